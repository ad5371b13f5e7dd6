"""Gymnasium / SB3 API conformance, registration, determinism and seeding."""

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env
from gymnasium.vector import AutoresetMode

from nav_env import NavEnv, NavVectorEnv


@pytest.mark.parametrize("level", ["easy", "default", "hard"])
def test_gymnasium_checker_passes(level):
    gym_check_env(NavEnv(level), skip_render_check=False)


def test_gymnasium_checker_continuous():
    gym_check_env(NavEnv("default", overrides={"task.action_type": "continuous"}))


def test_sb3_checker_passes():
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    sb3_check_env(NavEnv("default"), warn=True)


def test_registered_ids_make_and_make_vec():
    for env_id in ("AirNav-v0", "AirNav-Easy-v0", "AirNav-Default-v0", "AirNav-Hard-v0"):
        env = gym.make(env_id)
        obs, _ = env.reset(seed=1)
        assert obs.shape == (1032,) and obs.dtype == np.float32
        venv = gym.make_vec(env_id, num_envs=4, vectorization_mode="vector_entry_point")
        assert isinstance(venv.unwrapped, NavVectorEnv)
        vobs, _ = venv.reset(seed=1)
        assert vobs.shape == (4, 1032)
        np.testing.assert_array_equal(vobs[0], obs)


def test_observation_size_follows_camera():
    env = NavEnv("default", overrides={"camera.width": 64, "camera.height": 48})
    obs, _ = env.reset(seed=0)
    assert obs.shape == (64 * 48 + 8,) == env.observation_space.shape
    assert env.observation_space.contains(obs)


def _rollout_single(level, seed, actions):
    env = NavEnv(level)
    obs, _ = env.reset(seed=seed)
    out = [obs]
    for a in actions:
        obs, r, te, tr, info = env.step(a)
        out.append(obs)
        if te or tr:
            break
    return np.array(out)


@pytest.mark.parametrize("level", ["default", "hard"])
def test_same_seed_same_episode_single_vs_vector(level):
    rng = np.random.default_rng(7)
    actions = rng.integers(0, 25, size=(60, 6))
    # mostly forward so episodes last a while
    actions[rng.random(actions.shape) < 0.6] = 2
    venv = NavVectorEnv(6, level=level, autoreset_mode=AutoresetMode.DISABLED)
    vobs, _ = venv.reset(seed=100)
    traj = [vobs]
    done = np.zeros(6, bool)
    ends = np.full(6, len(actions))
    for t, a in enumerate(actions):
        vobs, r, te, tr, _ = venv.step(a)
        traj.append(vobs)
        newly = (te | tr) & ~done
        ends[newly] = t + 1
        done |= te | tr
    traj = np.array(traj)
    for i in range(6):
        single = _rollout_single(level, 100 + i, actions[:, i])
        assert len(single) == ends[i] + 1
        np.testing.assert_array_equal(single, traj[: len(single), i])


def test_reset_with_same_seed_repeats_episode_and_other_seed_differs():
    env = NavEnv("hard")
    a, _ = env.reset(seed=3)
    first = [env.step(2)[0] for _ in range(5)]
    b, _ = env.reset(seed=3)
    second = [env.step(2)[0] for _ in range(5)]
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(np.array(first), np.array(second))
    c, _ = env.reset(seed=4)
    assert not np.array_equal(a, c)


def test_vector_autoreset_next_step_and_same_step():
    acts = np.full(8, 2)  # forward 3 m/s: every env ends within the step limit
    for mode in (AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP):
        venv = NavVectorEnv(8, level="default", autoreset_mode=mode)
        venv.reset(seed=0)
        ended = 0
        for _ in range(600):
            obs, r, te, tr, info = venv.step(acts)
            if mode is AutoresetMode.SAME_STEP and (te | tr).any():
                assert info["_final_obs"].sum() == (te | tr).sum()
                # the returned observation is the new episode's first one
                assert np.all(obs[te | tr][:, -8 + 0] > 0)
                assert not np.array_equal(obs[te | tr], info["final_obs"][te | tr])
            ended += int((te | tr).sum())
        assert ended >= 8


def test_vector_reset_mask_resets_only_selected_envs():
    venv = NavVectorEnv(4, level="default", autoreset_mode=AutoresetMode.DISABLED)
    obs0, _ = venv.reset(seed=[10, 11, 12, 13])
    obs1, *_ = venv.step(np.full(4, 7))
    obs2, _ = venv.reset(seed=[None, 20, None, None], options={"reset_mask": np.array([False, True, False, False])})
    np.testing.assert_array_equal(obs2[[0, 2, 3]], obs1[[0, 2, 3]])
    ref, _ = NavEnv("default").reset(seed=20)
    np.testing.assert_array_equal(obs2[1], ref)


def test_curriculum_advances_zone_on_success():
    env = NavEnv("easy", overrides={"curriculum.enabled": True, "curriculum.window": 5, "curriculum.threshold": 0.6})
    zones = []
    for ep in range(12):
        env.reset(seed=ep)
        zones.append(env.episode.zone)
        env.curriculum.record(env.episode.zone, True)
    assert zones[0] == 0 and zones[-1] >= 2 and zones == sorted(zones)


def test_render_and_png(tmp_path):
    from nav_env.render import save_png

    env = NavEnv("default", render_mode="rgb_array")
    env.reset(seed=0)
    env.step(2)
    frame = env.render()
    assert frame.shape == (320, 640, 3) and frame.dtype == np.uint8
    path = save_png(tmp_path / "f.png", frame)
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000
    assert not list(tmp_path.glob(".*"))  # no temp file left behind
