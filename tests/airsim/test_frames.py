"""Frame and depth conventions of the AirSim backend (pure numpy: no client library needed)."""

import math

import numpy as np
import pytest

from nav_env.airsim.frames import (
    FLIP,
    DepthResampler,
    arena_to_ned,
    arena_yaw_from_ned_quaternion,
    body_to_world,
    ned_to_arena,
    world_to_body,
    yaw_quaternion_ned,
)
from nav_env.arena import make_episode
from nav_env.config import load_level
from nav_env.sim import BatchSim

CFG = load_level("default")


def test_arena_to_ned_by_hand():
    # x forward/north stays north, y left/west becomes -east, up becomes -down
    np.testing.assert_allclose(arena_to_ned((10, 20, 2), (0, 0, 0)), (10, -20, -2))
    np.testing.assert_allclose(arena_to_ned((10, 20, 2), (100, 5, -1)), (110, -15, -3))
    np.testing.assert_allclose(ned_to_arena(arena_to_ned((3.5, -1, 7), (4, 5, 6)), (4, 5, 6)), (3.5, -1, 7))
    assert np.linalg.det(np.diag(FLIP)) == 1.0  # a rotation (180 deg about north), not a mirror


@pytest.mark.parametrize("yaw", np.linspace(-math.pi + 1e-9, math.pi - 1e-9, 13))
def test_yaw_round_trip_and_sense(yaw):
    w, x, y, z = yaw_quaternion_ned(yaw)
    assert math.isclose(w * w + z * z, 1.0) and x == y == 0.0
    assert math.isclose(
        math.remainder(arena_yaw_from_ned_quaternion(w, x, y, z) - yaw, 2 * math.pi), 0.0, abs_tol=1e-12
    )


def test_left_turn_is_negative_ned_yaw():
    # facing west (arena yaw +90 deg, counter-clockwise) is heading 270 = -90 deg in NED
    w, _, _, z = yaw_quaternion_ned(math.pi / 2)
    assert math.isclose(math.degrees(2 * math.atan2(z, w)), -90.0)


def test_body_to_world_matches_embedded_rotation():
    sim = BatchSim(CFG, 1)
    sim.load([0], [make_episode(CFG, (15, 15), (25, 15), yaw=0.7)])
    sim.alpha = 1.0  # setpoint reached in one step: vel is the rotated command
    cmd = np.array([[3.0, -1.0, 0.5, 0.0]])
    sim.step(cmd)
    np.testing.assert_allclose(body_to_world(cmd[0, :3], 0.7), sim.vel[0], atol=1e-12)
    np.testing.assert_allclose(world_to_body(sim.vel[0], 0.7), cmd[0, :3], atol=1e-12)


def _embedded_depth(cfg, ep):
    sim = BatchSim(cfg, 1)
    sim.load([0], [ep])
    return sim.depth()[0].copy()


def _metric_frame(cfg, ep, w, h, fov, perspective):
    """A frame as AirSim would send it: metres, no range limit, at (w, h, fov)."""
    import dataclasses

    cam = dataclasses.replace(cfg.camera, width=w, height=h, fov_deg=fov, max_range=1000.0)
    sim = BatchSim(dataclasses.replace(cfg, camera=cam), 1)
    sim.load([0], [ep])
    d = sim.depth()[0] * 1000.0
    if perspective:
        d = d * np.sqrt(1 + np.tan(sim.col_angle)[None, :] ** 2 + sim.row_tan[:, None] ** 2)
    return d


@pytest.mark.parametrize("size", [(32, 32), (96, 96), (96, 160), (160, 224)])
@pytest.mark.parametrize("perspective", [True, False])
def test_resampler_reproduces_embedded_rays(size, perspective):
    """Same horizontal FOV, the env's size or an odd multiple of it, or taller frames (a wider
    vertical FOV, cropped): each env pixel gets exactly its own ray."""
    ep = make_episode(CFG, (6, 8), (25, 25), yaw=0.6, cylinders=[(10, 11, 1.0)], boxes=[(9, 4, 11, 6)])
    w, h = size
    frame = _metric_frame(CFG, ep, w, h, CFG.camera.fov_deg, perspective)
    out = DepthResampler(CFG, w, h, CFG.camera.fov_deg, perspective)(frame)
    assert out.shape == (CFG.camera.height, CFG.camera.width) and out.dtype == np.float32
    np.testing.assert_allclose(out, _embedded_depth(CFG, ep), atol=2e-6)


def test_resampler_planar_wall_and_range():
    # facing north (arena +x) at x = 25: the wall at x = 30: planar depth 5 m on every horizon-row pixel
    ep = make_episode(CFG, (25, 15), (5, 15), yaw=0.0)
    frame = _metric_frame(CFG, ep, 64, 64, 90.0, perspective=True)
    out = DepthResampler(CFG, 64, 64, 90.0, True)(frame)
    mid = out[15:17]  # rows at the horizon see the wall (floor/ceiling are farther there)
    np.testing.assert_allclose(mid, 0.5, atol=1e-5)
    # beyond range and no return read 1; negative readings clip to 0
    raw = np.full((32, 32), 12.0, np.float32)
    raw[0, 0], raw[0, 1], raw[0, 2] = np.inf, np.nan, -1.0
    out = DepthResampler(CFG, 32, 32, 90.0, False)(raw)
    assert out[0, 0] == 1.0 and out[0, 1] == 1.0 and out[0, 2] == 0.0 and np.all(out[1:] == 1.0)


def test_resampler_rejects_narrow_cameras():
    with pytest.raises(ValueError, match="vertical FOV"):
        DepthResampler(CFG, 256, 144, 90.0, True)  # 16:9 at 90 deg horizontal: 59 deg vertical < 90
    with pytest.raises(ValueError, match="horizontal FOV"):
        DepthResampler(CFG, 64, 64, 60.0, True)
    with pytest.raises(ValueError, match="expected"):
        DepthResampler(CFG, 32, 32, 90.0, True)(np.zeros((16, 16)))


def test_missing_client_library_is_a_clear_error(monkeypatch):
    import importlib

    from nav_env.airsim import AirSimError
    from nav_env.airsim import client as client_mod

    def no_module(name, *a, **k):
        raise ImportError(f"No module named {name!r}")

    monkeypatch.setattr(importlib, "import_module", no_module)
    with pytest.raises(AirSimError, match=r"no AirSim client library .*pip install 'airq\[airsim\]'"):
        client_mod.import_client("auto")
    with pytest.raises(ValueError, match="unknown AirSim client"):
        client_mod.import_client("unreal")
