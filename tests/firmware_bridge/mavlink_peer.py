"""A MAVLink autopilot for tests: ArduCopter's or PX4's documented behaviour for the messages the bridge sends,
each message checked against the dialect definitions pymavlink ships (decoding checks each message's id, layout
and CRC extra; the enums are looked up in the dialect).

Behaviour (ArduPilot: ArduCopter's GCS_MAVLink and mode docs; PX4: its offboard docs; both as their SITL builds
were seen to behave, docs/autopilot.md):
- HEARTBEAT once a second (autopilot ARDUPILOTMEGA or PX4, type QUADROTOR, custom mode, armed flag), so a mode
  change shows up to a second late, as on the real ones; none while ``silent`` is set (a cut link). ArduCopter boots
  in STABILIZE, PX4 without RC in Hold (LOITER).
- COMMAND_LONG: COMPONENT_ARM_DISARM arms or disarms (PX4 refuses to arm in OFFBOARD without a setpoint stream,
  TEMPORARILY_REJECTED, "Resolve system health failures first": v1.16.0 SITL, disarmed in OFFBOARD after a fail-safe
  landed it); NAV_TAKEOFF is accepted only armed and in GUIDED
  (ArduPilot, param7 metres above home); PX4 accepts it armed and reads param7 above sea level (a target below the
  vehicle is accepted and flies nothing); DO_SET_MODE changes the mode, but PX4 refuses OFFBOARD
  (TEMPORARILY_REJECTED) unless a setpoint arrived within COM_OF_LOSS_T (1 s); REQUEST_MESSAGE(AUTOPILOT_VERSION)
  answers with the version. Every command gets a COMMAND_ACK, but the ``drop_commands`` next vehicle commands (not the link's stream
  requests), which are lost.
- SET_POSITION_TARGET_LOCAL_NED is recorded with its arrival time; a frame or type mask outside the dialect's
  enums is a protocol error the test sees (``errors``), and so is a frame PX4 drops (it takes LOCAL_NED and
  BODY_NED only).
- PX4 streams GLOBAL_POSITION_INT (its altitude above sea level, its velocity) to the companion at 10 Hz; armed in
  OFFBOARD without a setpoint for COM_OF_LOSS_T (1 s) it holds by itself (COM_OBL_RC_ACT 5: LOITER). MAV_CMD_SET_MESSAGE_INTERVAL
  for SYSTEM_TIME (both autopilots honour it per link) streams SYSTEM_TIME, stamped with the boot clock, until a
  reboot.
- With ``signing_key``: MAVLink 2 signing as ArduPilot and PX4 do it once a key is set up: everything it sends is
  signed, an unsigned or wrongly signed message is dropped (counted by pymavlink's ``signing`` counters, and
  recorded in ``errors``).
- :meth:`reboot`: silent for a while (the process restarting), then a new boot clock, disarmed, the boot mode, every
  stream asked for forgotten (as on a real reboot).

With ``gcs_port`` the peer is also a vehicle a ground station watches (for hil.run --backend autopilot): a point
whose velocity follows the last body-frame setpoint (first-order lag ``TAU_S``) while armed in GUIDED / OFFBOARD and
the setpoint is under 3 s old (ArduCopter's GUIDED timeout), climbs at 1 m/s to a take-off's altitude, and stops in
any other mode. A second link on ``gcs_port`` sends HEARTBEAT and, only at the intervals a ground station asked
with MAV_CMD_SET_MESSAGE_INTERVAL, LOCAL_POSITION_NED and ATTITUDE stamped with the peer's boot clock.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from pymavlink import mavutil

from firmware_bridge.mavlink_link import speak_mavlink2

MAV = mavutil.mavlink
ARDUCOPTER_MODES = {"STABILIZE": 0, "GUIDED": 4, "LOITER": 5, "BRAKE": 17, "LAND": 9}
PX4_MODES = {"POSCTL": (3, 0), "OFFBOARD": (6, 0), "LOITER": (4, 3), "TAKEOFF": (4, 2)}  # (main, sub)
PX4_FRAMES = (MAV.MAV_FRAME_LOCAL_NED, MAV.MAV_FRAME_BODY_NED)  # the others: "coordinate frame unsupported"
PX4_OFFBOARD_LOSS_S = 1.0  # COM_OF_LOSS_T
HOME_AMSL_M = 584.0
HEARTBEAT_PERIOD_S = 1.0
VERSION = (4, 7, 0)
TAU_S = 0.2  # the peer vehicle's velocity lag
SETPOINT_TIMEOUT_S = 3.0  # ArduCopter GUIDED: a velocity target older than this is dropped (the vehicle stops)
PHYSICS_PERIOD_S = 0.005
PARAMS = {"FRAME_CLASS": 1.0, "FRAME_TYPE": 1.0}  # ArduCopter: quad, X


@dataclass
class Setpoint:
    t: float
    frame: int
    type_mask: int
    velocity: tuple[float, float, float]
    yaw_rate: float
    target: tuple[int, int]


@dataclass
class PeerState:
    mode: str
    armed: bool = False
    setpoints: list[Setpoint] = field(default_factory=list)
    heartbeats_from_companion: list[tuple[int, int, int]] = field(default_factory=list)  # (component, type, autopilot)
    commands: list[tuple[int, int]] = field(default_factory=list)  # (command, result)
    modes: list[str] = field(default_factory=list)  # every mode a command set, in order
    confirmations: list[tuple[int, int]] = field(default_factory=list)  # (command, confirmation) of each COMMAND_LONG
    offboard_losses: int = 0  # PX4: OFFBOARD left for Hold by itself (no setpoint for COM_OF_LOSS_T)
    errors: list[str] = field(default_factory=list)


@dataclass
class PointVehicle:
    """The peer's vehicle: NED position and velocity, yaw (rad, clockwise from north) and yaw rate."""

    position: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    velocity: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    yaw: float = 0.3
    yaw_rate: float = 0.0
    roll: float = 0.0  # rad, right side down positive (as ATTITUDE carries it), set by a test
    pitch: float = 0.0  # rad, nose up positive
    roll_rate: float = 0.0  # rad/s
    pitch_rate: float = 0.0  # rad/s
    takeoff_altitude: float | None = None


class AutopilotPeer:
    """Listens on ``udpin:127.0.0.1:PORT``; the actuator connects with ``udpout:127.0.0.1:PORT``; with ``gcs_port``
    a ground station connects with ``udpout:127.0.0.1:GCS_PORT``. With ``connect`` the peer sends to PORT instead
    (the actuator listens with ``udpin:127.0.0.1:PORT``, as for PX4 SITL)."""

    def __init__(
        self, autopilot: str, port: int, gcs_port: int | None = None, connect: bool = False,
        signing_key: bytes | None = None,
    ) -> None:  # fmt: skip
        self.autopilot = autopilot
        if signing_key is not None:
            speak_mavlink2(mavutil)
        self.link = mavutil.mavlink_connection(
            f"{'udpout' if connect else 'udpin'}:127.0.0.1:{port}", source_system=1, source_component=1
        )
        if signing_key is not None:  # as ArduPilot and PX4 with a key: sign everything, accept only signed
            self.link.setup_signing(signing_key, sign_outgoing=True, allow_unsigned_callback=lambda mav, msg_id: False)
        self.connect = connect
        self.state = PeerState(mode="STABILIZE" if autopilot == "ardupilot" else "LOITER")
        self.vehicle = PointVehicle()
        self.boot = time.monotonic()
        self.silent = threading.Event()
        self.drop_commands = 0  # the next this many COMMAND_LONGs from the companion are lost on the way
        self.drop_heartbeats = 0  # the next this many heartbeats to the companion are lost on the way
        self.telemetry_silent = threading.Event()
        self.intervals: dict[int, float] = {}  # message id -> seconds, as a ground station asked
        self.companion_intervals: dict[int, float] = {}  # ... as the companion asked (its own link)
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, daemon=True)]
        self.gcs = None
        if gcs_port is not None:
            self.gcs = mavutil.mavlink_connection(f"udpin:127.0.0.1:{gcs_port}", source_system=1, source_component=1)
            self._threads.append(threading.Thread(target=self._run_vehicle, daemon=True))
        for thread in self._threads:
            thread.start()

    def _time_boot_ms(self) -> int:
        return int((time.monotonic() - self.boot) * 1000)

    def _run_vehicle(self) -> None:
        """The vehicle's physics, and the ground station's link."""
        assert self.gcs is not None
        last = time.monotonic()
        next_beat = 0.0
        next_send: dict[int, float] = {}
        while not self._stop.is_set():
            now = time.monotonic()
            self._physics(now - last, now)
            last = now
            clients = getattr(self.gcs, "clients", None)
            if clients and not self.telemetry_silent.is_set():
                if now >= next_beat:
                    self._heartbeat(self.gcs)
                    next_beat = now + HEARTBEAT_PERIOD_S
                for msg_id, period in list(self.intervals.items()):
                    if now >= next_send.get(msg_id, 0.0):
                        self._send_telemetry(msg_id)
                        next_send[msg_id] = max(next_send.get(msg_id, now) + period, now - period)
            msg = self.gcs.recv_match(blocking=True, timeout=PHYSICS_PERIOD_S)
            if msg is not None and msg.get_type() == "COMMAND_LONG":
                result = MAV.MAV_RESULT_UNSUPPORTED
                if msg.command == MAV.MAV_CMD_SET_MESSAGE_INTERVAL:
                    self.intervals[int(msg.param1)] = msg.param2 / 1e6
                    result = MAV.MAV_RESULT_ACCEPTED
                elif msg.command == MAV.MAV_CMD_REQUEST_MESSAGE:
                    result = self._command(msg, now, self.gcs)
                self.gcs.mav.command_ack_send(msg.command, result)
            elif msg is not None and msg.get_type() == "PARAM_REQUEST_READ":
                value = PARAMS.get(msg.param_id)
                if value is not None:
                    self.gcs.mav.param_value_send(msg.param_id.encode(), value, MAV.MAV_PARAM_TYPE_INT8, len(PARAMS), 0)

    def _physics(self, dt: float, now: float) -> None:
        v, s = self.vehicle, self.state
        target, yaw_rate = [0.0, 0.0, 0.0], 0.0
        fly_mode = "GUIDED" if self.autopilot == "ardupilot" else "OFFBOARD"
        recent = s.setpoints[-1] if s.setpoints and now - s.setpoints[-1].t < SETPOINT_TIMEOUT_S else None
        if not s.armed:
            v.takeoff_altitude = None
        elif v.takeoff_altitude is not None and -v.position[2] < v.takeoff_altitude - 0.05:
            target = [0.0, 0.0, -1.0]
        elif s.mode == fly_mode and recent is not None:
            v.takeoff_altitude = None
            fx, fy, fz = recent.velocity
            c, sn = math.cos(v.yaw), math.sin(v.yaw)
            target, yaw_rate = [c * fx - sn * fy, sn * fx + c * fy, fz], recent.yaw_rate
        alpha = 1.0 - math.exp(-dt / TAU_S)
        for k in range(3):
            v.velocity[k] += alpha * (target[k] - v.velocity[k])
            v.position[k] += v.velocity[k] * dt
        if v.position[2] > 0.0:  # the ground
            v.position[2], v.velocity[2] = 0.0, min(v.velocity[2], 0.0)
        v.yaw_rate = yaw_rate
        v.yaw = math.remainder(v.yaw + yaw_rate * dt, 2 * math.pi)

    def _send_telemetry(self, msg_id: int) -> None:
        v, t = self.vehicle, self._time_boot_ms()
        if msg_id == MAV.MAVLINK_MSG_ID_LOCAL_POSITION_NED:
            self.gcs.mav.local_position_ned_send(t, *v.position, *v.velocity)
        elif msg_id == MAV.MAVLINK_MSG_ID_ATTITUDE:
            self.gcs.mav.attitude_send(t, v.roll, v.pitch, v.yaw, v.roll_rate, v.pitch_rate, v.yaw_rate)

    def _heartbeat(self, link: Any = None) -> None:
        s = self.state
        base = MAV.MAV_MODE_FLAG_CUSTOM_MODE_ENABLED | (MAV.MAV_MODE_FLAG_SAFETY_ARMED if s.armed else 0)
        if self.autopilot == "ardupilot":
            custom, autopilot = ARDUCOPTER_MODES[s.mode], MAV.MAV_AUTOPILOT_ARDUPILOTMEGA
        else:
            main, sub = PX4_MODES[s.mode]
            custom, autopilot = (main << 16) | (sub << 24), MAV.MAV_AUTOPILOT_PX4
        (link or self.link).mav.heartbeat_send(MAV.MAV_TYPE_QUADROTOR, autopilot, base, custom, MAV.MAV_STATE_ACTIVE)

    def _run(self) -> None:
        next_beat = next_position = next_time = 0.0
        while not self._stop.is_set():
            now = time.monotonic()
            if not self.silent.is_set() and (self.connect or getattr(self.link, "clients", None)):
                if now >= next_beat:
                    if self.drop_heartbeats > 0:  # a lossy link: this one never arrives
                        self.drop_heartbeats -= 1
                    else:
                        self._heartbeat()
                    next_beat = now + HEARTBEAT_PERIOD_S
                period = self.companion_intervals.get(MAV.MAVLINK_MSG_ID_SYSTEM_TIME)
                if period is not None and now >= next_time:
                    self.link.mav.system_time_send(int(time.time() * 1e6), self._time_boot_ms())
                    next_time = now + period
                if self.autopilot == "px4" and now >= next_position:
                    v = self.vehicle
                    self.link.mav.global_position_int_send(
                        self._time_boot_ms(), 0, 0, int((HOME_AMSL_M - v.position[2]) * 1000),
                        int(-v.position[2] * 1000), *(int(round(100 * x)) for x in v.velocity), 0,
                    )  # fmt: skip
                    next_position = now + 0.1
            s = self.state
            if (self.autopilot == "px4" and s.armed and s.mode == "OFFBOARD"
                    and not (s.setpoints and now - s.setpoints[-1].t <= PX4_OFFBOARD_LOSS_S)):  # fmt: skip
                s.mode = "LOITER"  # COM_OF_LOSS_T passed: COM_OBL_RC_ACT 5, Hold
                s.offboard_losses += 1
            msg = self.link.recv_match(blocking=True, timeout=0.02)
            if msg is None or msg.get_type() == "BAD_DATA":
                if msg is not None:
                    self.state.errors.append(f"undecodable bytes: {msg}")
                continue
            self._on(msg, now)

    def _on(self, msg: Any, now: float) -> None:
        kind, s = msg.get_type(), self.state
        if kind == "HEARTBEAT":
            s.heartbeats_from_companion.append((msg.get_srcComponent(), msg.type, msg.autopilot))
        elif kind == "SET_POSITION_TARGET_LOCAL_NED":
            if msg.coordinate_frame not in MAV.enums["MAV_FRAME"]:
                s.errors.append(f"frame {msg.coordinate_frame} is not a MAV_FRAME")
            elif self.autopilot == "px4" and msg.coordinate_frame not in PX4_FRAMES:
                s.errors.append(f"PX4 drops a setpoint in frame {msg.coordinate_frame}: coordinate frame unsupported")
                return
            known = 0
            for value, entry in MAV.enums["POSITION_TARGET_TYPEMASK"].items():
                known |= 0 if entry.name.endswith("ENUM_END") else value
            if msg.type_mask & ~known:
                s.errors.append(f"type mask {msg.type_mask:#x} sets bits POSITION_TARGET_TYPEMASK does not define")
            s.setpoints.append(
                Setpoint(now, msg.coordinate_frame, msg.type_mask, (msg.vx, msg.vy, msg.vz), msg.yaw_rate,
                         (msg.target_system, msg.target_component))
            )  # fmt: skip
        elif kind == "COMMAND_LONG":
            self.state.confirmations.append((msg.command, msg.confirmation))
            streams = (MAV.MAV_CMD_SET_MESSAGE_INTERVAL, MAV.MAV_CMD_REQUEST_MESSAGE)  # the link's own, any time
            if self.drop_commands > 0 and msg.command not in streams:  # a lossy link: this one never arrived
                self.drop_commands -= 1
                return
            self._ack(msg.command, self._command(msg, now))

    def _command(self, msg: Any, now: float, link: Any = None) -> int:
        s = self.state
        if msg.command not in MAV.enums["MAV_CMD"]:
            s.errors.append(f"command {msg.command} is not a MAV_CMD")
            return MAV.MAV_RESULT_UNSUPPORTED
        if msg.command == MAV.MAV_CMD_SET_MESSAGE_INTERVAL and link is None:
            self.companion_intervals[int(msg.param1)] = msg.param2 / 1e6
            return MAV.MAV_RESULT_ACCEPTED
        if msg.command == MAV.MAV_CMD_COMPONENT_ARM_DISARM:
            if (self.autopilot == "px4" and msg.param1 == 1 and not s.armed and s.mode == "OFFBOARD"
                    and not (s.setpoints and now - s.setpoints[-1].t <= PX4_OFFBOARD_LOSS_S)):  # fmt: skip
                return MAV.MAV_RESULT_TEMPORARILY_REJECTED  # PX4: OFFBOARD's requirements include the stream
            s.armed = msg.param1 == 1
            return MAV.MAV_RESULT_ACCEPTED
        if msg.command == MAV.MAV_CMD_NAV_TAKEOFF:
            ok = s.armed and (self.autopilot == "px4" or s.mode == "GUIDED")
            if ok:  # ArduPilot: metres above home; PX4: above sea level, and a target below flies nothing
                above_home = msg.param7 if self.autopilot == "ardupilot" else msg.param7 - HOME_AMSL_M
                self.vehicle.takeoff_altitude = above_home if above_home > -self.vehicle.position[2] else None
            return MAV.MAV_RESULT_ACCEPTED if ok else MAV.MAV_RESULT_FAILED
        if msg.command == MAV.MAV_CMD_DO_SET_MODE:
            if self.autopilot == "ardupilot":
                names = {v: k for k, v in ARDUCOPTER_MODES.items()}
                mode = names.get(int(msg.param2))
            else:
                mode = {v: k for k, v in PX4_MODES.items()}.get((int(msg.param2), int(msg.param3)))
                if mode == "OFFBOARD" and not (s.setpoints and now - s.setpoints[-1].t <= PX4_OFFBOARD_LOSS_S):
                    return MAV.MAV_RESULT_TEMPORARILY_REJECTED  # PX4: no offboard without a setpoint stream
            if mode is None:
                return MAV.MAV_RESULT_DENIED
            s.mode = mode
            s.modes.append(mode)
            return MAV.MAV_RESULT_ACCEPTED
        if msg.command == MAV.MAV_CMD_REQUEST_MESSAGE and int(msg.param1) == MAV.MAVLINK_MSG_ID_AUTOPILOT_VERSION:
            major, minor, patch = VERSION
            version = (major << 24) | (minor << 16) | (patch << 8)
            (link or self.link).mav.autopilot_version_send(
                0, version, 0, 0, 0, list(b"peer0000"), [0] * 8, [0] * 8, 0, 0, 0
            )
            return MAV.MAV_RESULT_ACCEPTED
        return MAV.MAV_RESULT_UNSUPPORTED

    def _ack(self, command: int, result: int) -> None:
        self.state.commands.append((command, result))
        self.link.mav.command_ack_send(command, result)

    def set_mode(self, mode: str) -> None:
        """A mode change on the vehicle's side (the pilot's RC switch)."""
        self.state.mode = mode

    def reboot(self, down_s: float) -> None:
        """The autopilot restarts: silent for ``down_s``, then a new boot clock, disarmed, in its boot mode, with
        every stream the companion asked for forgotten."""
        self.silent.set()
        time.sleep(down_s)
        self.state.armed = False
        self.state.mode = "STABILIZE" if self.autopilot == "ardupilot" else "LOITER"
        self.companion_intervals.clear()
        self.boot = time.monotonic()
        self.silent.clear()

    def close(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=2)
        self.link.close()
        if self.gcs is not None:
            self.gcs.close()
