"""The SB3 VecEnv adapter over NavVectorEnv: SB3's info conventions on finished envs, seeding and
the same episodes as the single env."""

from __future__ import annotations

import numpy as np
from stable_baselines3.common.vec_env import VecEnv

from nav_env import HOVER_ACTION, NavEnv, load_level
from policies.vec_adapter import NavSB3VecEnv

FORWARD_5 = 0


def make(n: int, **overrides) -> NavSB3VecEnv:
    return NavSB3VecEnv(n, load_level("default", overrides or None))


def test_is_an_sb3_vecenv_with_spaces():
    venv = make(4)
    assert isinstance(venv, VecEnv)
    assert venv.num_envs == 4
    assert venv.observation_space.shape == (1032,)
    assert venv.action_space.n == 25
    venv.seed(7)
    obs = venv.reset()
    assert obs.shape == (4, 1032) and obs.dtype == np.float32
    assert venv.get_attr("render_mode") == [None] * 4
    assert venv.env_is_wrapped(object) == [False] * 4
    assert venv.get_attr("num_envs", indices=[1, 2]) == [4, 4]


def test_truncation_sets_time_limit_and_terminal_observation_matches_single_env():
    steps = 6
    venv = make(3, **{"task.max_steps": steps})
    venv.seed(100)
    obs = venv.reset()
    single = NavEnv("default", overrides={"task.max_steps": steps})
    first, _ = single.reset(seed=101)
    np.testing.assert_array_equal(obs[1], first)
    hover = np.full(3, HOVER_ACTION)
    total = np.zeros(3)
    for t in range(steps):
        obs, rewards, dones, infos = venv.step(hover)
        s_obs, s_rew, s_term, s_trunc, _ = single.step(HOVER_ACTION)
        total += rewards
        if t < steps - 1:
            assert not dones.any() and all(info == {} for info in infos)  # cheap: no dicts for running envs
    assert dones.all() and s_trunc and not s_term
    info = infos[1]
    assert info["TimeLimit.truncated"] is True
    assert info["is_success"] is False
    np.testing.assert_array_equal(info["terminal_observation"], s_obs)
    assert info["episode"]["l"] == steps
    np.testing.assert_allclose(info["episode"]["r"], total[1], rtol=1e-5)
    # the returned observation is the next episode's first, from the same seeded stream
    s_next, _ = single.reset()
    np.testing.assert_array_equal(obs[1], s_next)
    assert not np.array_equal(obs[1], info["terminal_observation"])


def test_collision_is_terminal_not_truncated():
    venv = make(8)
    venv.seed(0)
    venv.reset()
    finished = []
    for _ in range(300):  # full speed ahead: every env hits something or the goal quickly
        _, _, dones, infos = venv.step(np.full(8, FORWARD_5))
        finished += [infos[i] for i in np.flatnonzero(dones)]
        if len(finished) >= 8:
            break
    assert finished
    for info in finished:
        assert info["TimeLimit.truncated"] is False
        assert info["terminal_observation"].shape == (1032,)
        assert set(info["episode"]) == {"r", "l", "t"}
        if not info["is_success"]:
            assert info["collision"] is True


def test_seeding_is_reproducible_and_used_once():
    a, b = make(2), make(2)
    a.seed(5)
    b.seed(5)
    np.testing.assert_array_equal(a.reset(), b.reset())
    assert a._seeds == [None, None]  # SB3 convention: seeds apply to the next reset only


def test_curriculum_graduates_to_all_zones():
    venv = NavSB3VecEnv(2, load_level("default", {"curriculum.enabled": True}), graduate=True)
    venv.reset()
    assert venv.curriculum_zone == 0
    venv.venv.curriculum.zone = 3  # the last zone unlocked: next finished episode graduates
    for _ in range(600):
        _, _, dones, _ = venv.step(np.full(2, FORWARD_5))
        if dones.any():
            break
    assert venv.graduated and venv.curriculum_zone == -1
    assert not venv.venv.cfg.curriculum.enabled
