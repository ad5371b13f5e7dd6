"""hil.run --backend autopilot against an autopilot peer that is also a vehicle (tests/firmware_bridge/mavlink_peer.py):
the host reads the pose as a ground station, places each seeded episode on the vehicle, waits in the autopilot's
clock, takes off through the bridge's vehicle commands; a lost telemetry link is a one-line failure. The same
flights against real ArduCopter and PX4 SITL builds: tests/firmware_bridge/test_mavlink_sitl.py."""

from __future__ import annotations

import json
import math
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pymavlink", reason="the autopilot backend needs the mavlink extra (make installs it)")

from firmware_bridge.mavlink_actuator import MavlinkActuator  # noqa: E402
from nav_env.arena import sample_episode  # noqa: E402
from nav_env.autopilot import AutopilotLinkError, AutopilotNavEnv  # noqa: E402
from nav_env.config import ATTITUDE_SCALE_RAD, BODY_RATE_SCALE_RAD_S, N_ATTITUDE_FEATURES, load_level  # noqa: E402
from tests.firmware_bridge.mavlink_peer import AutopilotPeer  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
POLICY = REPO / "models" / "policy1_int8.onnx"


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def peer():
    port, gcs_port = free_udp_port(), free_udp_port()
    p = AutopilotPeer("ardupilot", port, gcs_port=gcs_port)
    p.port, p.gcs_port = port, gcs_port
    yield p
    p.close()
    assert p.state.errors == []


def test_the_episode_is_placed_on_the_vehicle_and_time_is_the_autopilots(peer):
    """reset: the vehicle stands at the seeded episode's start with its heading; a forward setpoint moves it along
    that heading in the arena, and a step lasts one control period of the autopilot's clock."""
    cfg = load_level("easy")
    env = AutopilotNavEnv(config=cfg, telemetry=f"udpout:127.0.0.1:{peer.gcs_port}", connect_timeout_s=10)
    actuator = MavlinkActuator(f"udpout:127.0.0.1:{peer.port}")
    try:
        # LOCAL_POSITION_NED and ATTITUDE asked at 50 Hz; SYSTEM_TIME at 1 Hz (the link's watch on the boot clock)
        assert set(peer.intervals) == {32, 30, 2} and peer.intervals[32] == pytest.approx(0.02)
        actuator.wait_heartbeat(5)
        actuator.set_mode("GUIDED")
        actuator.arm()
        obs, info = env.reset(seed=7)
        expected = sample_episode(np.random.default_rng(7), cfg, None)  # NavEnv's draw for the same seed
        assert env.sim.pos[0] == pytest.approx(expected.start, abs=0.02)
        assert env.sim.yaw[0] == pytest.approx(expected.yaw, abs=0.01)
        assert np.array_equal(env.sim.goal[0], expected.goal) and obs.shape == (cfg.obs_dim,)
        start, t0 = env.sim.pos[0].copy(), env.time_ms
        for _ in range(10):
            actuator.command((1.0, 0.0, 0.0, 0.0), time.monotonic_ns())
            env.step(0)
        moved = env.sim.pos[0] - start
        heading = np.array([math.cos(expected.yaw), math.sin(expected.yaw)])
        assert float(moved[:2] @ heading) > 0.5 and abs(heading[0] * moved[1] - heading[1] * moved[0]) < 0.05
        assert env.time_ms - t0 == pytest.approx(1000, abs=25)  # ten 0.1 s periods
        assert env.sim.flight_time[0] == pytest.approx(1.0, abs=0.025)
        assert env.describe().speedup == pytest.approx(1.0, abs=0.1)
    finally:
        actuator.close()
        env.close()


def test_the_attitude_observation_reads_the_autopilots_attitude(peer):
    """observation.attitude on an autopilot: ATTITUDE's roll, pitch and rates (forward, right, down) in the
    observation's frame (forward, left, up): a roll to the right and a nose-down pitch positive."""
    cfg = load_level("easy", {"observation.attitude": True})
    peer.vehicle.roll, peer.vehicle.pitch = 0.2, -0.1  # right side down, nose down
    peer.vehicle.roll_rate, peer.vehicle.pitch_rate = 0.4, -0.8
    env = AutopilotNavEnv(config=cfg, telemetry=f"udpout:127.0.0.1:{peer.gcs_port}", connect_timeout_s=10)
    try:
        obs, _ = env.reset(seed=7)
        assert obs.shape == (cfg.obs_dim,) == (32 * 32 + 13,)
        roll, pitch, p, q, r = obs[-5:]
        assert roll == pytest.approx(0.2 / ATTITUDE_SCALE_RAD, abs=1e-6)
        assert pitch == pytest.approx(0.1 / ATTITUDE_SCALE_RAD, abs=1e-6)
        assert p == pytest.approx(0.4 / BODY_RATE_SCALE_RAD_S, abs=1e-6)
        assert q == pytest.approx(0.8 / BODY_RATE_SCALE_RAD_S, abs=1e-6) and r == pytest.approx(0.0, abs=1e-6)
        assert obs[:-N_ATTITUDE_FEATURES].shape == (1032,)  # the 8-value observation before them
    finally:
        env.close()


def test_lost_telemetry_is_a_one_line_error(peer):
    env = AutopilotNavEnv(level="easy", telemetry=f"udpout:127.0.0.1:{peer.gcs_port}", connect_timeout_s=10,
                          link_timeout_s=0.5)  # fmt: skip
    try:
        env.reset(seed=0)
        peer.telemetry_silent.set()
        with pytest.raises(AutopilotLinkError, match="no LOCAL_POSITION_NED from the autopilot on udpout:.* for 0.5 s"):
            env.step(0)
    finally:
        env.close()
    with pytest.raises(ValueError, match="a MAVLink endpoint is serial:DEVICE:BAUD, .* got '5762'"):
        AutopilotNavEnv(level="easy", telemetry="5762")


def test_no_telemetry_names_what_is_missing():
    with pytest.raises(
        AutopilotLinkError, match="no LOCAL_POSITION_NED and ATTITUDE at 50 Hz on udpout:.*no heartbeat"
    ):
        AutopilotNavEnv(level="easy", telemetry=f"udpout:127.0.0.1:{free_udp_port()}", connect_timeout_s=0.5)


def test_hil_run_takes_off_through_the_bridge_and_flies_the_episodes(peer, tmp_path):
    """The whole path: hil.run starts a local bridge with --actuator mavlink, takes off with the bridge's vehicle
    commands, flies seeded episodes on the vehicle (the bridge sends each act's setpoint, the host only watches),
    and the report names the autopilot and its clock."""
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "hil.run", "--policy", str(POLICY), "--sim-only", "--backend", "autopilot",
         "--level", "easy", "--fc", f"udpout:127.0.0.1:{peer.port}", "--telemetry", f"udpout:127.0.0.1:{peer.gcs_port}",
         "--takeoff-m", "5", "--episodes", "2", "--max-steps", "120", "--out", str(out), "--quiet"],
        cwd=REPO, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "flown by ardupilot 4.7.0 (QUADROTOR) in its own clock" in done.stdout
    report = json.loads((out / "report.json").read_text())
    vehicle = report["vehicle"]
    assert (vehicle["autopilot"], vehicle["firmware"], vehicle["frame"]) == ("ardupilot", "4.7.0", "QUADROTOR")
    assert vehicle["firmware_git"] == "peer0000" and vehicle["frame_params"] == {"FRAME_CLASS": 1, "FRAME_TYPE": 1}
    assert vehicle["speedup"] == pytest.approx(1.0, abs=0.1)
    assert vehicle["preflight"][0]["took_off"] and vehicle["preflight"][0]["altitude_m"] >= 4.75
    run = report["runs"][0]
    assert [e["outcome"] for e in run["episodes"]].count("success") >= 1  # Policy I flies the peer's point vehicle
    assert run["reliability"]["deadline_misses"] == 0 and run["reliability"]["vehicle_link_errors"] == 0
    assert vehicle["bridge_actuator"]["setpoints_sent"] >= run["acts"]  # every act went to the autopilot
    # flown in GUIDED; BRAKE at the end when the bridge outlived the host's last act by its 200 ms hold timeout
    # (its fail-safe, as designed: a loaded machine takes that long to stop it)
    assert "GUIDED" in peer.state.modes and peer.state.mode in ("GUIDED", "BRAKE") and peer.state.armed
    modes = [c for c, result in peer.state.commands if result == 0]
    assert 400 in modes and 22 in modes  # COMPONENT_ARM_DISARM and NAV_TAKEOFF, accepted


def test_a_px4_vehicle_left_disarmed_in_offboard_is_put_in_hold_to_arm(tmp_path):
    """PX4 (v1.16.0 SITL) lands by itself when a fail-safe takes a companion-flown vehicle and stays disarmed in
    OFFBOARD, where it refuses to arm without a setpoint stream: hil.run switches it to Hold, arms, takes off and
    flies, where arming straight away is refused for as long as it tries."""
    port, gcs_port = free_udp_port(), free_udp_port()
    peer = AutopilotPeer("px4", port, gcs_port=gcs_port)
    peer.state.mode = "OFFBOARD"  # as the fail-safe's landing left it
    try:
        out = tmp_path / "run"
        done = subprocess.run(
            [sys.executable, "-m", "hil.run", "--policy", str(POLICY), "--sim-only", "--backend", "autopilot",
             "--level", "easy", "--fc", f"udpout:127.0.0.1:{port}", "--telemetry", f"udpout:127.0.0.1:{gcs_port}",
             "--takeoff-m", "5", "--episodes", "1", "--max-steps", "30", "--preflight-timeout", "60",
             "--out", str(out), "--quiet"],
            cwd=REPO, capture_output=True, text=True, timeout=240, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        preflight = json.loads((out / "report.json").read_text())["vehicle"]["preflight"][0]
        assert preflight["took_off"] and preflight["arm_attempts"] == 1 and preflight["refusals"] == []
        assert peer.state.modes[:2] == ["LOITER", "OFFBOARD"]  # Hold to arm, then the bridge's fly mode
    finally:
        peer.close()
    assert peer.state.errors == []


def test_hil_run_autopilot_arguments_are_checked():
    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "hil.run", "--policy", str(POLICY), "--sim-only", *args],
                              cwd=REPO, capture_output=True, text=True, timeout=60, check=False)  # fmt: skip

    cases = {
        ("--backend", "autopilot"): "--backend autopilot needs --telemetry ENDPOINT",
        ("--backend", "autopilot", "--telemetry", "tcp:127.0.0.1:5762"): "--sim-only --backend autopilot needs --fc",
        ("--fc", "tcp:127.0.0.1:5760"): "--fc applies to --backend autopilot",
        ("--backend", "autopilot", "--telemetry", "5762", "--fc", "tcp:a:1"): "--telemetry: a MAVLink endpoint is",
        ("--backend", "autopilot", "--telemetry", "tcp:a:1", "--fc", "tcp:a:1", "--timing", "latency"):
            "flies in the autopilot's clock",
    }  # fmt: skip
    for args, message in cases.items():
        done = run(*args)
        assert done.returncode == 2 and message in done.stderr and len(done.stderr.strip().splitlines()) == 1, (
            args,
            done.stderr,
        )


def test_a_vehicle_without_a_position_is_told_from_a_lost_link(peer):
    """The autopilot stops LOCAL_POSITION_NED (its GPS or EKF lost) while its heartbeat goes on: the error says so,
    not that the link is lost."""
    env = AutopilotNavEnv(level="easy", telemetry=f"udpout:127.0.0.1:{peer.gcs_port}", connect_timeout_s=10,
                          link_timeout_s=2.5)  # fmt: skip
    try:
        env.reset(seed=0)
        peer.intervals.pop(32)  # LOCAL_POSITION_NED no more (and not asked again within the error's 2.5 s)
        with pytest.raises(
            AutopilotLinkError, match=r"for 2.5 s while its heartbeat goes on \(mode \w+\): it has lost"
        ):
            env.step(0)
    finally:
        env.close()
