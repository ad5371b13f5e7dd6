"""The camera size option (Air Learning's 144 x 256 depth image): shape, consistency with the 32 x 32
render, determinism, and bad input."""

import numpy as np
import pytest

from nav_env.config import (
    AIRLEARNING_CAMERA,
    ConfigError,
    camera_overrides,
    load_level,
    observation_overrides_from_metadata,
    parse_camera,
)
from nav_env.env import NavEnv
from nav_env.vector import NavVectorEnv

BIG = camera_overrides("144x256")


def area_matrix(n_out: int, n_in: int) -> np.ndarray:
    """Rows: output cells; each averages the input cells it overlaps, weighted by overlap."""
    m = np.zeros((n_out, n_in))
    for i in range(n_out):
        lo, hi = i * n_in / n_out, (i + 1) * n_in / n_out
        for j in range(int(lo), min(n_in, int(np.ceil(hi)))):
            m[i, j] = max(0.0, min(hi, j + 1) - max(lo, j))
    return m / m.sum(axis=1, keepdims=True)


def downsample(depth: np.ndarray) -> np.ndarray:
    return area_matrix(32, depth.shape[0]) @ depth @ area_matrix(32, depth.shape[1]).T


def test_parse_camera():
    assert parse_camera("144x256") == (144, 256) == AIRLEARNING_CAMERA
    assert parse_camera("airlearning") == (144, 256)
    assert parse_camera("default") == (32, 32)
    assert camera_overrides("32x32") == {"camera.height": 32, "camera.width": 32}
    assert BIG == {"camera.height": 144, "camera.width": 256, "camera.vfov_deg": 90.0}
    for bad in ("144", "x256", "144x", "0x256", "axb", "144x256x3"):
        with pytest.raises(ConfigError, match="camera size"):
            parse_camera(bad)
    with pytest.raises(ConfigError, match="camera.vfov_deg"):
        load_level("default", {"camera.vfov_deg": 180.0})


def test_metadata_round_trip():
    import json

    cfg = load_level("default", BIG)
    meta = {"airq.env_config": json.dumps(cfg.to_dict())}
    assert load_level("default", observation_overrides_from_metadata(meta)).camera == cfg.camera
    assert observation_overrides_from_metadata({}) == {}


def test_large_observation_shape_and_bounds():
    env = NavEnv("default", overrides=BIG)
    obs, _ = env.reset(seed=3)
    assert obs.shape == (144 * 256 + 8,) == env.observation_space.shape
    assert obs.dtype == np.float32
    assert env.observation_space.contains(obs)
    small, _ = NavEnv("default").reset(seed=3)
    np.testing.assert_array_equal(obs[-8:], small[-8:])  # same episode, same state features


@pytest.mark.parametrize("seed", [0, 7, 21])
def test_large_image_area_downsamples_to_the_small_one(seed):
    big_env, small_env = NavEnv("default", overrides=BIG), NavEnv("default")
    big, _ = big_env.reset(seed=seed)
    small, _ = small_env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    diffs = []
    for _ in range(30):  # same actions: same trajectory (the camera does not affect dynamics)
        d = downsample(big[:-8].reshape(144, 256).astype(np.float64)) - small[:-8].reshape(32, 32)
        diffs.append(np.abs(d))
        a = int(rng.integers(0, 5))  # forward speeds only: stays in the arena
        big, _, te, tr, _ = big_env.step(a)
        small, _, te2, tr2, _ = small_env.step(a)
        assert (te, tr) == (te2, tr2)
        if te or tr:
            break
    diffs = np.stack(diffs)
    # point samples vs block averages: equal on flat surfaces, apart only at edges within a block
    assert np.median(diffs) < 1e-3
    assert diffs.mean() < 0.02
    assert np.mean(diffs < 0.05) > 0.97


def test_large_camera_deterministic_single_and_vector():
    a = NavEnv("default", overrides=BIG)
    b = NavEnv("default", overrides=BIG)
    vec = NavVectorEnv(2, level="default", overrides=BIG)
    oa, _ = a.reset(seed=11)
    ob, _ = b.reset(seed=11)
    ov, _ = vec.reset(seed=[11, 12])
    np.testing.assert_array_equal(oa, ob)
    np.testing.assert_array_equal(oa, ov[0])
    for act in [0, 15, 1, 20, 2]:
        oa, *_ = a.step(act)
        ov, *_ = vec.step(np.array([act, act]))
        np.testing.assert_array_equal(oa, ov[0])


def test_hard_level_noise_at_large_size():
    env = NavEnv("hard", overrides=BIG)
    o1, _ = env.reset(seed=5)
    o2, _ = NavEnv("hard", overrides=BIG).reset(seed=5)
    np.testing.assert_array_equal(o1, o2)
    assert env.observation_space.contains(o1)
