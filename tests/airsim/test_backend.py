"""AirSimNavEnv against the fake AirSim server, through the real client library (skipped cleanly
when the library is not installed: ``pip install 'airq[airsim]'``)."""

from __future__ import annotations

import asyncio
import math
import socket
import time

import numpy as np
import pytest

from nav_env.actions import ACTION_NAMES
from nav_env.arena import make_episode, sample_episode
from nav_env.backends import AirSimOptions, make_env
from nav_env.config import load_level
from nav_env.env import NavEnv

CFG = load_level("default")
INFO_KEYS = {
    "is_success",
    "collision",
    "distance_to_goal",
    "start_distance",
    "path_length",
    "steps",
    "flight_time",
    "zone",
}
FORWARD5 = ACTION_NAMES.index("forward 5")
YAW_LEFT_90 = ACTION_NAMES.index("yaw left 90")


def test_reset_places_the_vehicle_in_ned(serve, connect):
    ep = make_episode(CFG, (10, 20), (10, 28), yaw=math.pi / 2)
    server = serve(CFG, ep, origin=(100.0, 5.0, -1.0))
    env = connect(server, CFG, origin=(100.0, 5.0, -1.0))
    obs, info = env.reset(options={"episode": ep})
    assert obs.shape == env.observation_space.shape == (1032,) and obs.dtype == np.float32
    assert env.observation_space.contains(obs)
    assert set(info) == INFO_KEYS and info["steps"] == 0 and not info["collision"] and not info["is_success"]
    assert info["start_distance"] == pytest.approx(8.0, abs=1e-5)
    for call in ("reset", "enableApiControl", "armDisarm", "takeoff", "simSetVehiclePose"):
        assert call in server.calls
    pose = server.last["simSetVehiclePose"][0]
    p, q = pose["position"], pose["orientation"]
    # arena (10, 20, 2) -> NED origin + (10, -20, -2); arena yaw +90 deg (facing west) -> NED yaw -90 deg
    assert (p["x_val"], p["y_val"], p["z_val"]) == pytest.approx((110.0, -15.0, -3.0), abs=1e-5)
    assert math.degrees(2 * math.atan2(q["z_val"], q["w_val"])) == pytest.approx(-90.0, abs=1e-4)
    np.testing.assert_allclose(env.trajectory[0], (10, 20, 2), atol=1e-5)
    # the goal is 8 m straight ahead (west): bearing 0
    assert obs[1024 + 1] == pytest.approx(0.0, abs=1e-5) and obs[1024 + 2] == pytest.approx(1.0, abs=1e-5)


def test_step_commands_ned_velocity_and_clockwise_yaw_rate(serve, connect):
    ep = make_episode(CFG, (10, 10), (25, 25), yaw=math.pi / 2)  # facing arena +y: west
    server = serve(CFG, ep)
    env = connect(server, CFG)
    env.reset(options={"episode": ep})
    env.step(FORWARD5)
    vx, vy, vz, duration, _drivetrain, yaw_mode, _vehicle = server.last["moveByVelocity"]
    assert (vx, vy, vz) == pytest.approx((0.0, -5.0, 0.0), abs=1e-5)  # west = -east
    assert duration == pytest.approx(CFG.vehicle.dt) and yaw_mode["is_rate"] and yaw_mode["yaw_or_rate"] == 0
    obs, *_ = env.step(YAW_LEFT_90)  # counter-clockwise from above: negative in NED
    assert server.last["moveByVelocity"][5]["yaw_or_rate"] == pytest.approx(-90.0)
    assert env.trajectory[-1][1] > 10.2 and abs(env.trajectory[-1][0] - 10) < 1e-4  # moved west (arena +y)
    assert obs[1024 + 6] > 0  # yaw rate feature: counter-clockwise positive, as on the embedded sim


@pytest.mark.parametrize("level", ["default", "hard"])
@pytest.mark.parametrize("lockstep", [False, True])
def test_same_episode_same_actions_as_embedded(serve, connect, level, lockstep):
    """With the embedded dynamics and ray caster behind the protocol, the backend gives the embedded
    simulator's observations, rewards and episode ends: conventions, scaling, noise and scoring agree."""
    cfg = load_level(level)
    ep = sample_episode(np.random.default_rng(7), cfg, zone=1)
    server = serve(cfg, ep)
    env, ref = connect(server, cfg, lockstep=lockstep), NavEnv(config=cfg)
    o1, i1 = env.reset(options={"episode": ep})
    o2, i2 = ref.reset(options={"episode": ep})
    np.testing.assert_allclose(o1, o2, atol=1e-5)
    rng = np.random.default_rng(1)
    for t in range(120):
        a = int(rng.choice([0, 1, 2, 5, 6, 8, 9, 10, 15, 17, 20, 22]))
        o1, r1, te1, tr1, i1 = env.step(a)
        o2, r2, te2, tr2, i2 = ref.step(a)
        assert (te1, tr1) == (te2, tr2), t
        assert r1 == pytest.approx(r2, abs=1e-4)
        np.testing.assert_allclose(o1[1024:], o2[1024:], atol=1e-4)
        assert np.mean(np.abs(o1[:1024] - o2[:1024]) < 1e-4) > 0.99  # a grazing ray may flip with float32 poses
        assert {k: i1[k] for k in ("is_success", "collision", "steps", "zone")} == {
            k: i2[k] for k in ("is_success", "collision", "steps", "zone")
        }
        assert i1["distance_to_goal"] == pytest.approx(i2["distance_to_goal"], abs=1e-4)
        assert i1["path_length"] == pytest.approx(i2["path_length"], abs=1e-3)
        if te1 or tr1:
            break
    assert ("simContinueForTime" in server.calls) == lockstep


@pytest.mark.parametrize("size", [(32, 32), (96, 96), (96, 160)])
@pytest.mark.parametrize("depth_type", ["perspective", "planar"])
def test_depth_shape_and_scaling(serve, connect, size, depth_type):
    # facing north at x = 25 in an empty arena: the wall is 5 m ahead, planar depth 0.5 at the horizon
    ep = make_episode(CFG, (25, 15), (5, 15), yaw=0.0)
    server = serve(CFG, ep, image_size=size)
    env = connect(server, CFG, depth_type=depth_type)
    obs, _ = env.reset(options={"episode": ep})
    depth = obs[:1024].reshape(32, 32)
    np.testing.assert_allclose(depth[15:17], 0.5, atol=1e-5)
    assert server.last["simGetImages"][0][0]["image_type"] == (2 if depth_type == "perspective" else 1)
    ref, _ = NavEnv(config=CFG).reset(options={"episode": ep})
    np.testing.assert_allclose(obs, ref, atol=1e-5)


def test_camera_too_short_is_a_clear_error(serve, connect):
    from nav_env.airsim import AirSimError

    ep = make_episode(CFG, (25, 15), (5, 15))
    env = connect(serve(CFG, ep, image_size=(256, 144)), CFG)
    with pytest.raises(AirSimError, match="vertical FOV"):
        env.reset(options={"episode": ep})


def test_collision_ends_the_episode(serve, connect):
    ep = make_episode(CFG, (10, 15), (25, 15), cylinders=[(15, 15, 1.0)])
    server = serve(CFG, ep)
    env = connect(server, CFG)
    env.reset(options={"episode": ep})
    for _ in range(30):
        obs, reward, terminated, truncated, info = env.step(FORWARD5)
        if terminated:
            break
    assert terminated and not truncated and info["collision"] and not info["is_success"]
    assert reward < CFG.reward.collision / 2
    assert env.trajectory[-1][0] < 15 - 1.0
    with pytest.raises(RuntimeError, match="reset"):
        env.step(FORWARD5)
    env.reset(options={"episode": ep})  # a new episode after a crash starts clean
    _, _, terminated, _, info = env.step(7)
    assert not terminated and not info["collision"]


def test_wall_is_a_collision_even_if_the_simulator_does_not_report_it(serve, connect):
    # the fake's arena is twice as long, so only the env's own bounds check sees the wall at x = 30
    big = load_level("default", {"arena.size_x": 60.0})
    ep = make_episode(CFG, (27, 15), (5, 15))
    env = connect(serve(big, make_episode(big, (27, 15), (5, 15))), CFG)
    env.reset(options={"episode": ep})
    for _ in range(20):
        _, reward, terminated, _, info = env.step(FORWARD5)
        if terminated:
            break
    assert terminated and info["collision"] and 29.7 - 1e-3 <= env.trajectory[-1][0] <= 31


def test_success_detection(serve, connect):
    ep = make_episode(CFG, (10, 15), (18, 15))
    env = connect(serve(CFG, ep), CFG)
    env.reset(options={"episode": ep})
    for _ in range(40):
        _, reward, terminated, truncated, info = env.step(FORWARD5)
        if terminated:
            break
    assert terminated and info["is_success"] and not info["collision"]
    assert info["distance_to_goal"] < CFG.task.success_radius
    assert reward > CFG.reward.success / 2


def test_seeded_reset_draws_the_embedded_start_and_goal(serve, connect):
    server = serve(CFG)
    env = connect(server, CFG, takeoff=False)
    _, info = env.reset(seed=11)
    ref = NavEnv(config=CFG)
    _, ref_info = ref.reset(seed=11)
    np.testing.assert_allclose(env.episode.start, ref.episode.start)
    np.testing.assert_allclose(env.episode.goal, ref.episode.goal)
    assert env.episode.yaw == ref.episode.yaw and info["zone"] == ref_info["zone"]
    assert info["start_distance"] == pytest.approx(ref_info["start_distance"], abs=1e-4)
    assert "takeoff" not in server.calls
    with pytest.raises(ValueError, match="zone"):
        env.reset(options={"zone": 99})


def test_server_error_surfaces_as_a_clear_error(serve, connect):
    from nav_env.airsim import AirSimError

    ep = make_episode(CFG, (10, 15), (25, 15))
    env = connect(serve(CFG, ep, fail={"moveByVelocity": "motor 3 failed"}), CFG)
    env.reset(options={"episode": ep})
    with pytest.raises(
        AirSimError, match=r"AirSim moveByVelocity: the simulator reported an error: .*motor 3 failed"
    ) as e:
        env.step(FORWARD5)
    assert "\n" not in str(e.value)
    env2 = connect(serve(CFG, ep), CFG, camera_name="no_such_camera")
    with pytest.raises(AirSimError, match="simGetImages.*no_such_camera"):
        env2.reset(options={"episode": ep})


def test_absent_server_fails_fast(client_name):
    from nav_env.airsim import AirSimConnectionError, AirSimNavEnv

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    with pytest.raises(
        AirSimConnectionError, match=f"cannot reach the AirSim simulator at 127.0.0.1:{port} within 1 s"
    ) as e:
        AirSimNavEnv(config=CFG, host="127.0.0.1", port=port, timeout_s=1.0, client=client_name)
    assert time.monotonic() - t0 < 3.0
    assert "\n" not in str(e.value)


def test_lost_server_is_a_connection_error(serve, connect):
    from nav_env.airsim import AirSimConnectionError

    ep = make_episode(CFG, (10, 15), (25, 15))
    server = serve(CFG, ep)
    env = connect(server, CFG)
    env.reset(options={"episode": ep})
    server.stop()
    t0 = time.monotonic()
    with pytest.raises(AirSimConnectionError, match="lost or no connection"):
        env.step(FORWARD5)
    assert time.monotonic() - t0 < 8.0


def test_old_msgpack_is_refused(monkeypatch, serve, client_name):
    import msgpack

    from nav_env.airsim import AirSimError, AirSimNavEnv

    monkeypatch.setattr(msgpack, "version", (0, 5, 6))
    with pytest.raises(AirSimError, match=r"msgpack 0\.5\.6 is too old.*>= 1\.0"):
        AirSimNavEnv(config=CFG, port=serve(CFG).port, client=client_name)


def test_make_env_and_render(serve, client_name):
    ep = make_episode(CFG, (10, 15), (25, 15), cylinders=[(20, 20, 1.0)])
    server = serve(CFG, ep)
    options = AirSimOptions(host=server.host, port=server.port, client=client_name)
    env = make_env(CFG, "airsim", render_mode="rgb_array", options=options)
    try:
        env.reset(options={"episode": ep})
        env.step(FORWARD5)
        frame = env.render()
        ref = NavEnv(config=CFG, render_mode="rgb_array")
        ref.reset(options={"episode": ep})
        assert frame.shape == ref.render().shape and frame.dtype == np.uint8
        assert len(env.trajectory) == 2
    finally:
        env.close()


def test_works_inside_a_running_asyncio_loop(serve, connect):
    """The blocking clients break inside a running event loop; the env runs them on its own thread."""
    ep = make_episode(CFG, (10, 15), (25, 15))
    server = serve(CFG, ep)

    async def main():
        env = connect(server, CFG)
        env.reset(options={"episode": ep})
        return env.step(FORWARD5)

    obs, reward, *_ = asyncio.run(main())
    assert obs.shape == (1032,) and reward > 0


def test_continuous_actions(serve, connect):
    cfg = load_level("default", {"task.action_type": "continuous"})
    ep = make_episode(cfg, (10, 15), (25, 15))
    env = connect(serve(cfg, ep), cfg)
    env.reset(options={"episode": ep})
    env.step(np.array([2.0, 1.0, 0.5, 0.3], np.float32))
    with pytest.raises(ValueError, match="outside"):
        env.step(np.array([9.0, 0, 0, 0], np.float32))


def test_gymnasium_env_checker_passes(serve, connect):
    from gymnasium.utils.env_checker import check_env

    env = connect(serve(CFG), CFG, render_mode="rgb_array")
    check_env(env, skip_render_check=False)


def test_server_versions(serve, client_name):
    from nav_env.airsim import AirSimError, AirSimNavEnv

    with pytest.raises(AirSimError, match="needs client version >= 99"):
        AirSimNavEnv(config=CFG, port=serve(CFG, min_client_version=99).port, client=client_name)
    if client_name == "cosysairsim":  # client version 4 against a Microsoft (version 1) server: a warning
        with pytest.warns(UserWarning, match="API version 1"):
            AirSimNavEnv(config=CFG, port=serve(CFG, server_version=1).port, client=client_name).close()
