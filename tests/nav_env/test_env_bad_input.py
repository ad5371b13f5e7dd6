"""Bad input gets a clear error naming the value; invalid actions are never clipped."""

import subprocess
import sys

import numpy as np
import pytest

from nav_env import ConfigError, NavEnv, NavVectorEnv, load_level


def test_unknown_level():
    with pytest.raises(ConfigError, match="unknown level 'nope'"):
        NavEnv("nope")


def test_unknown_key_and_section(tmp_path):
    with pytest.raises(ConfigError, match="unknown config key 'camera.widht'"):
        load_level("default", {"camera.widht": 3})
    bad = tmp_path / "bad.toml"
    bad.write_text("[cameras]\nwidth = 3\n")
    with pytest.raises(ConfigError, match="unknown config section 'cameras'"):
        load_level(bad)


@pytest.mark.parametrize(
    "key,value,match",
    [
        ("camera.width", 0, "camera.width must be positive"),
        ("arena.size_x", -5.0, "arena.size_x must be positive"),
        ("vehicle.dt", 0.0, "vehicle.dt must be positive"),
        ("camera.fov_deg", 200.0, "camera.fov_deg"),
        ("obstacles.cylinders", [5, 2], "reversed"),
        ("camera.width", "wide", "must be an integer"),
        ("task.action_type", "teleport", "task.action_type"),
    ],
)
def test_bad_values(key, value, match):
    with pytest.raises(ConfigError, match=match):
        load_level("default", {key: value})


def test_step_before_reset():
    with pytest.raises(RuntimeError, match="before reset"):
        NavEnv().step(0)
    with pytest.raises(RuntimeError, match="before reset"):
        NavVectorEnv(2).step(np.zeros(2, int))


@pytest.mark.parametrize("action", [25, -1, 2.5, "x"])
def test_discrete_action_outside_space(action):
    env = NavEnv()
    env.reset(seed=0)
    with pytest.raises(ValueError, match="outside Discrete|must be"):
        env.step(action)


def test_continuous_action_outside_box_is_not_clipped():
    env = NavEnv(overrides={"task.action_type": "continuous"})
    env.reset(seed=0)
    pos = env.sim.pos.copy()
    with pytest.raises(ValueError, match="outside the box"):
        env.step(np.array([9.0, 0, 0, 0], np.float32))
    with pytest.raises(ValueError, match="outside the box"):
        env.step(np.array([np.nan, 0, 0, 0], np.float32))
    np.testing.assert_array_equal(env.sim.pos, pos)


def test_vector_actions_wrong_shape_or_range():
    venv = NavVectorEnv(3)
    venv.reset(seed=0)
    with pytest.raises(ValueError, match="3 integers"):
        venv.step(np.zeros(2, int))
    with pytest.raises(ValueError, match="action 30 is outside"):
        venv.step(np.array([0, 30, 1]))


def test_step_after_episode_end_requires_reset():
    env = NavEnv(overrides={"task.max_steps": 1})
    env.reset(seed=0)
    env.step(7)
    with pytest.raises(RuntimeError, match="call reset"):
        env.step(7)


def test_cli_bad_level_exits_2_with_one_line():
    r = subprocess.run(
        [sys.executable, "-m", "nav_env.evaluate", "--level", "nope", "--episodes", "2"], capture_output=True, text=True
    )
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "unknown level 'nope'" in r.stderr
