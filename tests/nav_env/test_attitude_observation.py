"""The versioned observation (``[observation] attitude = true``): roll, pitch and body rates after the 8 state
values, from the rigid body on the mujoco backend, level on the point mass; the episodes are the same either way."""

from __future__ import annotations

import importlib
import json
import math
import tomllib
from pathlib import Path

import numpy as np
import pytest

from nav_env import NavEnv
from nav_env.actions import ACTION_NAMES
from nav_env.arena import make_episode
from nav_env.common import observation_space
from nav_env.config import (
    ATTITUDE_SCALE_RAD,
    BODY_RATE_SCALE_RAD_S,
    N_ATTITUDE_FEATURES,
    ConfigError,
    load_level,
    observation_overrides_from_metadata,
    state_size_of,
    with_policy_observation,
)
from nav_env.rollout import episode_row, flat_row, run_episodes

REPO = Path(__file__).resolve().parents[2]
ATTITUDE = {"observation.attitude": True}
FWD5 = ACTION_NAMES.index("forward 5")


def test_off_by_default_and_five_values_more_when_on():
    plain, versioned = load_level("default"), load_level("default", ATTITUDE)
    assert plain.obs_dim == 32 * 32 + 8 and versioned.obs_dim == plain.obs_dim + N_ATTITUDE_FEATURES == 1037
    space = observation_space(versioned)
    assert space.shape == (1037,) and np.all(space.low[-5:] == -1.0) and np.all(space.high[-5:] == 1.0)
    with pytest.raises(ConfigError, match="attitude"):
        load_level("default", {"observation.attitude": "yes"})


@pytest.mark.parametrize("level", ["default", "hard"])
def test_the_experiment_levels_are_the_shipped_ones_with_the_attitude(level):
    path = REPO / "configs" / "levels" / f"{level}_attitude.toml"
    assert load_level(path) == load_level(level, ATTITUDE)
    assert tomllib.loads(path.read_text())["observation"] == {"attitude": True}


def open_arena(backend: str, attitude: bool) -> NavEnv:
    env = NavEnv("easy", backend=backend, overrides=ATTITUDE if attitude else None)
    env.reset(options={"episode": make_episode(env.cfg, start=(3.0, 15.0), goal=(28.0, 25.0))})
    return env


@pytest.mark.parametrize("backend", ["embedded", "mujoco"])
def test_the_same_episode_with_or_without_the_attitude(backend):
    plain, versioned = open_arena(backend, False), open_arena(backend, True)
    for action in [FWD5] * 8 + [ACTION_NAMES.index("yaw left 90")] * 4:
        a, *_ = plain.step(action)
        b, *_ = versioned.step(action)
        assert np.array_equal(a, b[:-N_ATTITUDE_FEATURES])  # the first 1032 values, bit for bit


def test_the_point_mass_flies_level_and_turns_about_its_vertical_axis():
    env = open_arena("embedded", True)
    for _ in range(3):
        obs, *_ = env.step(ACTION_NAMES.index("yaw left 90"))
    roll, pitch, p, q, r = obs[-5:]
    assert roll == pitch == p == q == 0.0
    assert r == pytest.approx(np.clip(env.sim.yaw_rate[0] / BODY_RATE_SCALE_RAD_S, -1, 1)) and r > 0.1


def test_the_quadrotor_pitches_nose_down_to_speed_up_and_its_rates_say_so():
    env = open_arena("mujoco", True)
    obs, *_ = env.step(FWD5)
    roll, pitch, p, q, r = obs[-5:]
    true_pitch = math.asin(-env.sim.rot[0, 2, 0])  # nose down positive
    assert pitch == pytest.approx(true_pitch / ATTITUDE_SCALE_RAD, abs=1e-6)
    assert math.degrees(true_pitch) > 3.0 and abs(roll) < 0.02
    # the body rate about the lateral axis is the angular velocity MuJoCo integrates: its sign is the pitch's change
    before = true_pitch
    sim = env.sim
    sim.step(np.array([[5.0, 0.0, 0.0, 0.0]]), period=np.array([sim.h]))
    after = math.asin(-sim.rot[0, 2, 0])
    q_now = sim.attitude(slice(None))[2][0, 1]
    assert np.sign(after - before) == np.sign(q_now) and abs(after - before) == pytest.approx(
        abs(q_now) * sim.h, rel=0.3
    )


def test_it_rolls_left_side_down_to_speed_up_to_the_left():
    env = open_arena("mujoco", True)
    obs, *_ = env.step(ACTION_NAMES.index("diagonal left 60"))
    roll = obs[-5] * ATTITUDE_SCALE_RAD
    assert math.degrees(roll) < -3.0  # the left side goes down: a roll to the right is positive


def test_the_metadata_carries_the_observation_to_tools_that_rebuild_the_env():
    meta = {"airq.env_config": json.dumps(load_level("hard", ATTITUDE).to_dict())}
    assert observation_overrides_from_metadata(meta)["observation.attitude"] is True
    assert load_level("hard", observation_overrides_from_metadata(meta)).obs_dim == 1037
    assert state_size_of(meta) == 13 and state_size_of({}) == 8


def test_a_backend_that_does_not_read_the_attitude_refuses_it_in_one_line():
    env_cls = importlib.import_module("nav_env.airsim.env").AirSimNavEnv
    with pytest.raises(ConfigError, match="does not read the vehicle's attitude") as err:
        env_cls("default", overrides=ATTITUDE)
    assert "\n" not in str(err.value)


# ------------------------------------------------------------------ the tilt each episode reports


def test_each_quadrotor_episode_reports_its_largest_and_mean_tilt_and_the_point_mass_none():
    dash = open_arena("mujoco", False)
    for _ in range(10):
        _, _, _, _, info = dash.step(FWD5)
    hover = open_arena("mujoco", False)
    for _ in range(10):
        _, _, _, _, still = hover.step(ACTION_NAMES.index("hover"))
    assert info["tilt"]["max_deg"] > 10.0 and 0.0 < info["tilt"]["mean_deg"] <= info["tilt"]["max_deg"]
    assert still["tilt"]["max_deg"] < 1.0
    assert info["tilt"]["max_deg"] >= math.degrees(math.acos(min(1.0, dash.sim.rot[0, 2, 2])))  # the last one
    _, _, _, _, point_mass = open_arena("embedded", False).step(FWD5)
    assert "tilt" not in point_mass


def test_the_episode_rows_carry_the_tilt_where_the_vehicle_tilts():
    cfg = load_level("default")
    quad = list(run_episodes(lambda obs: np.full(len(obs), FWD5), cfg, 3, 0, 3, backend="mujoco"))
    flat = list(run_episodes(lambda obs: np.full(len(obs), FWD5), cfg, 3, 0, 3))
    assert all(r.tilt is not None and r.tilt["max_deg"] >= r.tilt["mean_deg"] > 1.0 for r in quad)
    assert all(r.tilt is None for r in flat)
    assert "tilt" in episode_row(quad[0]) and "tilt" not in episode_row(flat[0])
    assert {"tilt_max_deg", "tilt_mean_deg"} <= set(flat_row(episode_row(quad[0])))


def test_a_policy_sees_the_level_through_the_observation_it_was_trained_on():
    hard, versioned = load_level("hard"), load_level("hard", ATTITUDE)
    meta_of = {cfg.observation.attitude: {"airq.env_config": json.dumps(cfg.to_dict())} for cfg in (hard, versioned)}
    assert with_policy_observation(hard, meta_of[True]) == versioned
    assert with_policy_observation(versioned, meta_of[False]) == hard
    assert with_policy_observation(hard, {}) is hard  # a baseline or a foreign model: the level as it is
    # only the observation comes from the policy: the world, the task and their overrides stay the caller's
    longer = load_level("hard", {"task.max_steps": 7})
    assert with_policy_observation(longer, meta_of[True]).task.max_steps == 7
