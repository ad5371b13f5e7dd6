"""The MAVLink actuator against an autopilot peer that behaves as ArduCopter and PX4 document (mavlink_peer.py):
heartbeats, explicit arming, take-off and modes, setpoints in each autopilot's frame and type mask, the hold as
the autopilot's own hold mode, a pilot's mode never overridden, a lost link reported."""

from __future__ import annotations

import math
import socket
import time

import numpy as np
import pytest

pytest.importorskip("pymavlink", reason="the mavlink actuator needs the mavlink extra (make installs it)")

from pymavlink import mavutil  # noqa: E402

from firmware_bridge.flight_modes import FLY_MODE  # noqa: E402
from firmware_bridge.mavlink_actuator import VELOCITY_YAW_RATE_MASK, MavlinkActuator, MavlinkError  # noqa: E402
from tests.firmware_bridge.mavlink_peer import PX4_OFFBOARD_LOSS_S, AutopilotPeer  # noqa: E402

MAV = mavutil.mavlink


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def until(predicate, timeout: float = 5.0) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)


@pytest.fixture(params=["ardupilot", "px4"])
def pair(request):
    port = free_udp_port()
    peer = AutopilotPeer(request.param, port)
    actuator = MavlinkActuator(f"udpout:127.0.0.1:{port}", link_timeout_s=2.0)
    yield peer, actuator
    actuator.close()
    peer.close()
    assert peer.state.errors == []  # every message decoded and within the dialect's enums


def test_heartbeats_both_ways_name_the_autopilot_its_mode_and_version(pair):
    peer, actuator = pair
    state = actuator.wait_heartbeat(5)
    assert state.autopilot == peer.autopilot and state.armed is False
    until(lambda: actuator.state.firmware == "4.7.0")
    until(lambda: actuator.stats()["link_ok"])
    comp, kind, autopilot = peer.state.heartbeats_from_companion[0]
    assert (comp, kind, autopilot) == (191, MAV.MAV_TYPE_ONBOARD_CONTROLLER, MAV.MAV_AUTOPILOT_INVALID)


def test_arming_take_off_and_modes_are_explicit_and_setpoints_use_the_autopilots_frame(pair):
    peer, actuator = pair
    actuator.wait_heartbeat(5)
    actuator.command((2.0, 0.5, -0.25, 0.3), time.monotonic_ns())
    time.sleep(0.2)
    # an act arms nothing, and in the mode the autopilot booted in (not the bridge's) sends nothing
    assert not peer.state.armed and peer.state.mode in ("STABILIZE", "LOITER")
    assert peer.state.setpoints == [] and actuator.setpoints_withheld == 1
    assert actuator.vehicle()["control"] == "pilot"
    fly = "GUIDED" if peer.autopilot == "ardupilot" else "OFFBOARD"
    if peer.autopilot == "ardupilot":
        with pytest.raises(MavlinkError, match="take-off refused"):
            actuator.takeoff(5.0)  # ArduCopter: not armed, not in GUIDED
        actuator.set_mode(fly)
    actuator.arm()
    assert peer.state.armed
    actuator.takeoff(5.0)
    assert peer.vehicle.takeoff_altitude == pytest.approx(5.0, abs=0.01)  # PX4: sent as 5 m above sea level's
    if peer.autopilot == "px4":
        actuator.set_mode(fly)  # primes the setpoint stream PX4 requires first
    assert peer.state.mode == fly and actuator.state.mode == fly
    n = len(peer.state.setpoints)
    actuator.command((2.0, 0.5, -0.25, 0.3), time.monotonic_ns())
    until(lambda: len(peer.state.setpoints) > n)
    sp = peer.state.setpoints[-1]
    frame = MAV.MAV_FRAME_BODY_OFFSET_NED if peer.autopilot == "ardupilot" else MAV.MAV_FRAME_BODY_NED
    assert sp.frame == frame and sp.type_mask == VELOCITY_YAW_RATE_MASK == 0x05C7
    # forward-left-up, counter-clockwise yaw rate -> forward-right-down, clockwise
    assert sp.velocity == pytest.approx((2.0, -0.5, 0.25)) and sp.yaw_rate == pytest.approx(-0.3)
    assert sp.target == (1, 1)


def test_px4_refuses_offboard_without_a_setpoint_stream_and_the_actuator_primes_it():
    port = free_udp_port()
    peer = AutopilotPeer("px4", port)
    actuator = MavlinkActuator(f"udpout:127.0.0.1:{port}")
    try:
        actuator.wait_heartbeat(5)
        actuator.link.set_mode("OFFBOARD")  # asked cold, as a naive client would
        until(lambda: any(c == MAV.MAV_CMD_DO_SET_MODE for c, _ in peer.state.commands))
        assert peer.state.commands[-1] == (MAV.MAV_CMD_DO_SET_MODE, MAV.MAV_RESULT_TEMPORARILY_REJECTED)
        actuator.set_mode("OFFBOARD")
        assert peer.state.mode == "OFFBOARD"
    finally:
        actuator.close()
        peer.close()


def test_px4_keeps_its_setpoint_stream_until_the_heartbeat_shows_offboard():
    """On a lossy link the heartbeat that shows OFFBOARD can be lost; PX4 leaves OFFBOARD for Hold after COM_OF_LOSS_T
    without setpoints, so the actuator streams them while it waits (PX4 v1.16.0 SITL, 20% loss: 'stayed in LOITER')."""
    port = free_udp_port()
    peer = AutopilotPeer("px4", port)
    actuator = MavlinkActuator(f"udpout:127.0.0.1:{port}", link_timeout_s=3.0)
    try:
        actuator.wait_heartbeat(5)
        actuator.arm()
        peer.drop_heartbeats = 1  # the next heartbeat, the first that could show OFFBOARD, is lost: 2 s to wait
        actuator.set_mode("OFFBOARD")
        assert peer.state.mode == "OFFBOARD" and peer.state.offboard_losses == 0
        stream = [sp.t for sp in peer.state.setpoints]
        assert stream[-1] - stream[0] > PX4_OFFBOARD_LOSS_S and max(b - a for a, b in zip(stream, stream[1:])) < 0.5
    finally:
        actuator.close()
        peer.close()
    assert peer.state.errors == []


def hold_until_held(actuator: MavlinkActuator) -> None:
    """The watchdog's hold, and the bridge loop's ticks while it brakes (PX4: in OFFBOARD, then Hold)."""
    actuator.hold(time.monotonic_ns())
    end = time.monotonic() + 5.0
    while actuator.braking and time.monotonic() < end:
        actuator.tick(time.monotonic_ns())
        time.sleep(0.01)


def test_a_vehicle_disarmed_in_the_fly_mode_gets_no_setpoint(pair):
    """A fail-safe lands the vehicle and disarms it; PX4 (v1.16.0 SITL) then shows the companion's mode again. The
    acts are answered "pilot" and send nothing: armed by a pilot there, it would fly a stream no one meant for it."""
    peer, actuator = pair
    actuator.wait_heartbeat(5)
    fly = "GUIDED" if peer.autopilot == "ardupilot" else "OFFBOARD"
    actuator.arm()  # first: armed in OFFBOARD without an act for COM_OF_LOSS_T, PX4 would hold by itself
    actuator.set_mode(fly)
    actuator.command((1.0, 0.0, 0.0, 0.0), time.monotonic_ns())
    until(lambda: len(peer.state.setpoints) > 0 and peer.state.setpoints[-1].velocity[0] == 1.0)
    assert actuator.vehicle()["control"] == "bridge"
    peer.state.armed = False  # landed and disarmed by the autopilot, left in the fly mode
    until(lambda: actuator.state.armed is False and actuator.state.mode == fly)
    time.sleep(0.1)  # a setpoint still in flight
    n, withheld = len(peer.state.setpoints), actuator.setpoints_withheld
    for _ in range(5):
        actuator.command((1.0, 0.0, 0.0, 0.0), time.monotonic_ns())
    actuator.hold(time.monotonic_ns())
    actuator.reset()
    time.sleep(0.2)
    assert len(peer.state.setpoints) == n and actuator.setpoints_withheld == withheld + 5
    assert actuator.vehicle()["control"] == "pilot" and peer.state.mode == fly


def test_the_hold_is_the_autopilots_own_and_a_pilots_mode_is_never_overridden(pair):
    peer, actuator = pair
    actuator.wait_heartbeat(5)
    fly = "GUIDED" if peer.autopilot == "ardupilot" else "OFFBOARD"
    hold = "BRAKE" if peer.autopilot == "ardupilot" else "LOITER"
    actuator.arm()  # first: armed in OFFBOARD without an act for COM_OF_LOSS_T, PX4 would hold by itself
    actuator.set_mode(fly)
    actuator.command((1.0, 0.0, 0.0, 0.0), time.monotonic_ns())
    until(lambda: len(peer.state.setpoints) > 0 and peer.state.setpoints[-1].velocity[0] == 1.0)
    n = len(peer.state.setpoints)
    hold_until_held(actuator)
    until(lambda: peer.state.mode == hold)
    assert peer.state.setpoints[n].velocity == (0.0, 0.0, 0.0)  # a zero setpoint first, then the hold mode
    until(lambda: actuator.state.mode == hold)
    actuator.command((1.0, 0.0, 0.0, 0.0), time.monotonic_ns())  # the bridge's own hold: it takes the vehicle back
    until(lambda: peer.state.mode == fly)
    until(lambda: actuator.state.mode == fly)
    # the race of a 1 Hz heartbeat: a hold, and acts again before any heartbeat showed the hold (held back here)
    peer.silent.set()
    hold_until_held(actuator)
    until(lambda: peer.state.mode == hold)
    assert actuator.state.mode == fly  # not heard
    actuator.command((1.0, 0.0, 0.0, 0.0), time.monotonic_ns())
    peer.silent.clear()
    end = time.monotonic() + 2.5
    while time.monotonic() < end:
        actuator.command((1.0, 0.0, 0.0, 0.0), time.monotonic_ns())
        time.sleep(0.1)
    assert peer.state.mode == fly  # asked again until a heartbeat showed it
    pilots = "LOITER" if peer.autopilot == "ardupilot" else "POSCTL"
    peer.set_mode(pilots)  # the pilot takes over on the RC switch
    until(lambda: actuator.state.mode == pilots)
    mode_requests = sum(c == MAV.MAV_CMD_DO_SET_MODE for c, _ in peer.state.commands)
    time.sleep(0.1)  # a setpoint still in flight
    n, withheld = len(peer.state.setpoints), actuator.setpoints_withheld
    for _ in range(5):
        actuator.command((1.0, 0.0, 0.0, 0.0), time.monotonic_ns())
        time.sleep(0.05)
    actuator.hold(time.monotonic_ns())  # the watchdog's hold: the pilot's mode stays, nothing is sent
    actuator.reset()
    time.sleep(0.2)
    assert peer.state.mode == pilots
    assert sum(c == MAV.MAV_CMD_DO_SET_MODE for c, _ in peer.state.commands) == mode_requests
    assert len(peer.state.setpoints) == n and actuator.setpoints_withheld == withheld + 5
    assert actuator.vehicle()["control"] == "pilot"


def test_a_silent_autopilot_is_a_lost_link(pair):
    peer, actuator = pair
    actuator.wait_heartbeat(5)
    until(lambda: actuator.stats()["link_ok"])
    peer.silent.set()
    until(lambda: not actuator.stats()["link_ok"], timeout=5)
    assert actuator.stats()["heartbeat_age_s"] >= 2.0
    peer.silent.clear()
    until(lambda: actuator.stats()["link_ok"], timeout=3)


@pytest.mark.parametrize("autopilot", ["ardupilot", "px4"])
def test_a_reboot_refuses_acts_until_the_host_arms_again(autopilot):
    """A reboot shorter than the link's timeout (the link is never lost): the boot clock, asked for again after the
    heartbeat gap, went back; acts are refused and send nothing until the host arms again."""
    port = free_udp_port()
    peer = AutopilotPeer(autopilot, port)
    actuator = MavlinkActuator(f"udpout:127.0.0.1:{port}", link_timeout_s=5.0)
    fly = FLY_MODE[autopilot]
    try:
        actuator.wait_heartbeat(5)
        actuator.set_mode(fly)
        actuator.arm()
        until(lambda: actuator.state.boot_ms is not None)  # SYSTEM_TIME streams
        assert actuator.link_error() is None
        peer.reboot(down_s=2.0)
        until(lambda: actuator.state.reboots == 1)
        assert actuator.link.link_ok()
        assert "the autopilot rebooted (its boot clock went back" in actuator.link_error()
        assert "arm it again with a vehicle request" in actuator.link_error()
        assert actuator.stats()["reboots"] == 1 and actuator.vehicle()["control"] == "pilot"
        actuator.set_mode(fly)  # a mode alone is not enough
        assert actuator.link_error() is not None
        actuator.arm()
        if autopilot == "px4":  # armed in OFFBOARD a second after its last setpoint, PX4 held by itself
            actuator.set_mode(fly)
        assert actuator.link_error() is None and actuator.vehicle()["control"] == "bridge"
    finally:
        actuator.close()
        peer.close()
    assert peer.state.errors == []


def test_no_autopilot_is_a_clear_error():
    actuator = MavlinkActuator(f"udpout:127.0.0.1:{free_udp_port()}")
    try:
        with pytest.raises(MavlinkError, match="no autopilot heartbeat"):
            actuator.wait_heartbeat(0.3)
        assert actuator.stats()["link_ok"] is False
    finally:
        actuator.close()


def test_the_bridge_process_flies_acts_to_the_autopilot_and_reports_it(start_bridge, discrete_model_file):
    """python -m firmware_bridge.serve --actuator mavlink --fc udpout:...: mode, arming and take-off are explicit
    vehicle requests (a refused one is VEHICLE_REFUSED with the autopilot's answer); an act's setpoint reaches the
    autopilot in its frame and its reply carries the autopilot's state; the watchdog's hold becomes the autopilot's
    hold; a silent autopilot makes acts VEHICLE_LINK errors that send nothing."""
    from firmware_bridge.client import BridgeClient, BridgeRefused

    port = free_udp_port()
    peer = AutopilotPeer("ardupilot", port)
    try:
        bridge = start_bridge(
            "--policy", str(discrete_model_file), "--actuator", "mavlink", "--fc", f"udpout:127.0.0.1:{port}"
        )
        client = BridgeClient(bridge.endpoint)
        try:
            until(lambda: client.status().actuator.get("autopilot") == "ardupilot", timeout=10)
            status = client.status().actuator
            assert status["kind"] == "mavlink" and status["link_ok"] and status["mode"] == "STABILIZE"
            with pytest.raises(BridgeRefused, match="VEHICLE_REFUSED.*take-off refused .MAV_RESULT_FAILED"):
                client.vehicle("takeoff", altitude_m=5.0)  # ArduCopter takes off only armed, in GUIDED
            assert client.vehicle("mode", mode="guided")["vehicle"]["mode"] == "GUIDED"
            assert client.vehicle("arm")["vehicle"]["armed"] is True
            reply = client.vehicle("takeoff", altitude_m=5.0)
            assert reply["command"] == "takeoff" and peer.state.commands[-1] == (MAV.MAV_CMD_NAV_TAKEOFF, 0)
            before = len(peer.state.setpoints)
            result = client.act(np.zeros(1032, np.float32))
            assert result.vehicle == {
                "autopilot": "ardupilot",
                "mode": "GUIDED",
                "armed": True,
                "link_ok": True,
                "control": "bridge",
            }
            until(lambda: len(peer.state.setpoints) > before)
            sp = peer.state.setpoints[before]
            assert sp.frame == MAV.MAV_FRAME_BODY_OFFSET_NED and sp.type_mask == VELOCITY_YAW_RATE_MASK
            vx, vy, vz, yaw_rate = result.setpoint
            assert sp.velocity == pytest.approx((vx, -vy, -vz)) and sp.yaw_rate == pytest.approx(-yaw_rate)
            until(lambda: peer.state.mode == "BRAKE", timeout=3)  # no act for 200 ms: the hold
            peer.silent.set()  # the autopilot's link cut: no heartbeat for the bridge's 3 s
            until(lambda: not client.status().actuator["link_ok"], timeout=6)
            sent = len(peer.state.setpoints)
            with pytest.raises(BridgeRefused, match="VEHICLE_LINK: autopilot link lost: no heartbeat on udpout"):
                client.act(np.zeros(1032, np.float32))
            time.sleep(0.1)
            assert len(peer.state.setpoints) == sent  # nothing sent into the dead link
            peer.silent.clear()
            until(lambda: client.status().actuator["link_ok"], timeout=3)
            assert client.act(np.zeros(1032, np.float32)).vehicle["link_ok"] is True
        finally:
            client.close()
    finally:
        peer.close()


def test_vehicle_commands_are_validated_and_a_mock_bridge_has_no_vehicle(loaded_bridge):
    from firmware_bridge.client import BridgeClient, BridgeRefused

    with BridgeClient(loaded_bridge.endpoint) as client:
        with pytest.raises(BridgeRefused, match="VEHICLE_REFUSED: the mock actuator has no vehicle to arm"):
            client.vehicle("arm")
        with pytest.raises(BridgeRefused, match="BAD_MESSAGE: vehicle 'command' must be one of arm, disarm"):
            client.vehicle("launch")
        with pytest.raises(BridgeRefused, match="BAD_MESSAGE: takeoff 'altitude_m' must be a number of metres"):
            client.vehicle("takeoff", altitude_m=500.0)
        with pytest.raises(BridgeRefused, match="BAD_MESSAGE: mode 'mode' must be a flight mode"):
            client.vehicle("mode", mode="GUIDED; rm -rf")
        assert client.act(np.zeros(1032, np.float32)).vehicle is None


def test_the_boot_service_passes_the_flight_controller_and_opens_its_serial_port():
    from firmware_bridge.systemd import render_unit

    unit = render_unit(python="/usr/bin/python3", bind="tcp://0.0.0.0:5555", policy=None, actuator="mavlink",
                       fc="serial:/dev/serial0:921600", fc_signing_key="/etc/airq/fc.key")  # fmt: skip
    assert "--actuator mavlink" in unit and "--fc serial:/dev/serial0:921600" in unit
    assert "--fc-signing-key /etc/airq/fc.key" in unit
    assert "SupplementaryGroups=dialout" in unit and "PrivateDevices=yes" not in unit


def test_px4_the_hold_brakes_in_offboard_then_enters_hold():
    """PX4's Hold entered at speed re-plans from the vehicle's acceleration (jerk-limited) and speeds up first: the
    hold brakes in OFFBOARD with zero setpoints at 20 Hz until GLOBAL_POSITION_INT says the vehicle is slow, then
    asks for Hold; an act while braking flies on in OFFBOARD. ArduCopter's hold is BRAKE at once."""
    port = free_udp_port()
    peer = AutopilotPeer("px4", port, gcs_port=free_udp_port())  # the gcs port runs the peer's vehicle
    actuator = MavlinkActuator(f"udpout:127.0.0.1:{port}", link_timeout_s=3.0)
    try:
        actuator.wait_heartbeat(5)
        actuator.arm()
        actuator.set_mode("OFFBOARD")
        for _ in range(15):  # 1.5 s at 2 m/s forward
            actuator.command((2.0, 0.0, 0.0, 0.0), time.monotonic_ns())
            time.sleep(0.1)
        until(lambda: actuator.ground_speed is not None and actuator.ground_speed[0] > 1.5)
        # an act while braking: no Hold, the act flies on in OFFBOARD
        actuator.hold(time.monotonic_ns())
        actuator.tick(time.monotonic_ns())
        actuator.command((2.0, 0.0, 0.0, 0.0), time.monotonic_ns())
        assert not actuator.braking
        for _ in range(3):
            actuator.tick(time.monotonic_ns())
            time.sleep(0.1)
        assert peer.state.modes == ["OFFBOARD"] and peer.state.mode == "OFFBOARD"
        n, held = len(peer.state.setpoints), actuator.stats()["hold_setpoints_sent"]
        actuator.hold(time.monotonic_ns())
        assert actuator.braking and actuator.stats()["braking"] and actuator.vehicle()["control"] == "bridge"
        while actuator.braking:
            actuator.tick(time.monotonic_ns())
            time.sleep(0.01)
        braking = peer.state.setpoints[n:]
        assert len(braking) >= 5 and all(sp.velocity == (0.0, 0.0, 0.0) for sp in braking)
        until(lambda: len(peer.state.setpoints) - n == actuator.stats()["hold_setpoints_sent"] - held)  # all counted
        assert max(b.t - a.t for a, b in zip(braking, braking[1:])) < 0.15  # a stream, well above PX4's 2 Hz
        until(lambda: peer.state.mode == "LOITER")
        assert peer.state.offboard_losses == 0 and peer.state.modes == ["OFFBOARD", "LOITER"]  # the bridge's Hold
        assert math.hypot(*peer.vehicle.velocity[:2]) < 0.5
        assert actuator.vehicle()["control"] == "bridge"  # its own hold: the next act takes the vehicle back
    finally:
        actuator.close()
        peer.close()
    assert peer.state.errors == []


@pytest.mark.parametrize("autopilot", ["ardupilot", "px4"])
def test_a_mode_change_or_a_reset_with_no_act_after_it_ends_in_the_bridges_own_hold(
    start_bridge, discrete_model_file, autopilot
):
    """After the bridge switches an armed vehicle to its fly mode, or resets an episode there, and no act follows,
    the watchdog holds as after an act: before PX4's own offboard-loss Hold (COM_OF_LOSS_T), which the bridge could
    not tell from a pilot's switch, so the next act takes the vehicle back instead of being withheld."""
    from firmware_bridge.client import BridgeClient

    port = free_udp_port()
    peer = AutopilotPeer(autopilot, port, gcs_port=free_udp_port())
    fly, hold = FLY_MODE[autopilot], ("BRAKE" if autopilot == "ardupilot" else "LOITER")
    try:
        bridge = start_bridge(
            "--policy", str(discrete_model_file), "--actuator", "mavlink", "--fc", f"udpout:127.0.0.1:{port}"
        )
        client = BridgeClient(bridge.endpoint)
        try:
            until(lambda: client.status().actuator.get("autopilot") == autopilot, timeout=10)
            if autopilot == "ardupilot":
                client.vehicle("mode", mode=fly)
                client.vehicle("arm")
                time.sleep(0.5)
                assert peer.state.mode == fly  # disarmed when GUIDED was set: no hold before the take-off
                client.vehicle("mode", mode=fly)  # armed now
            else:
                client.vehicle("arm")
                client.vehicle("mode", mode=fly)
            for _ in range(2):  # after the mode change, then after a reset
                until(lambda: peer.state.mode == hold, timeout=3)
                assert peer.state.offboard_losses == 0
                result = client.act(np.zeros(1032, np.float32))
                assert result.vehicle["control"] == "bridge"
                until(lambda: peer.state.mode == fly, timeout=3)  # the act took it back
                for _ in range(3):
                    client.act(np.zeros(1032, np.float32))
                client.reset()
            assert client.status().actuator["setpoints_withheld"] == 0
        finally:
            client.close()
    finally:
        peer.close()
    assert peer.state.errors == []


def test_a_lost_command_is_sent_again_until_it_is_acknowledged(pair):
    """MAVLink's command protocol on a lossy link: no COMMAND_ACK within a second, the command goes again with its
    confirmation counted up; arming, take-off and mode changes survive lost COMMAND_LONGs."""
    peer, actuator = pair
    actuator.wait_heartbeat(5)
    fly = FLY_MODE[peer.autopilot]
    if peer.autopilot == "ardupilot":
        actuator.set_mode(fly)
    peer.drop_commands = 2
    actuator.arm(timeout_s=5.0)
    arms = [c for cmd, c in peer.state.confirmations if cmd == MAV.MAV_CMD_COMPONENT_ARM_DISARM]
    assert arms == [0, 1, 2] and peer.state.armed
    peer.drop_commands = 1
    actuator.takeoff(5.0)
    assert [c for cmd, c in peer.state.confirmations if cmd == MAV.MAV_CMD_NAV_TAKEOFF] == [0, 1]
    peer.drop_commands = 1
    actuator.set_mode("LOITER" if peer.autopilot == "ardupilot" else "POSCTL")
    assert [c for cmd, c in peer.state.confirmations if cmd == MAV.MAV_CMD_DO_SET_MODE][-2:] == [
        0,
        0,
    ]  # DO_SET_MODE as pymavlink sends it
    peer.drop_commands = 10
    with pytest.raises(MavlinkError, match=r"did not acknowledge command 400 within 2 s \(2 sent\)"):
        actuator.disarm(timeout_s=2.0)
