"""The MAVLink actuator: the bridge as a companion computer that sends setpoints to ArduPilot or PX4.

Needs the ``mavlink`` extra (pymavlink). The link is a pymavlink endpoint:

* ``serial:/dev/serial0:921600`` - a UART wired to the flight controller's TELEM port;
* ``udpin:0.0.0.0:14540`` (listen), ``udpout:HOST:PORT`` (send), ``tcp:HOST:PORT`` - a SITL build or a router.

What goes over it (MAVLink common plus each autopilot's documented behaviour):

* our HEARTBEAT once a second, as ``MAV_TYPE_ONBOARD_CONTROLLER`` / ``MAV_AUTOPILOT_INVALID`` from component
  ``MAV_COMP_ID_ONBOARD_COMPUTER`` (191) of the vehicle's system;
* every act: ``SET_POSITION_TARGET_LOCAL_NED`` with velocity and yaw rate only (type mask ``0x05C7``: position,
  acceleration and yaw ignored), in the frame each autopilot reads as "relative to the vehicle's heading":
  ``MAV_FRAME_BODY_OFFSET_NED`` for ArduPilot (GUIDED), ``MAV_FRAME_BODY_NED`` for PX4 (OFFBOARD). nav_env's
  setpoint is forward-left-up with counter-clockwise yaw rate; MAVLink's body frame is forward-right-down with
  clockwise yaw rate, so y, z and the yaw rate change sign;
* the hold (the watchdog's fail-safe): a zero-velocity setpoint, then the autopilot's own hold mode, ``BRAKE`` on
  ArduPilot, ``HOLD`` (AUTO_LOITER) on PX4. The next act takes the vehicle back to GUIDED / OFFBOARD only if the
  bridge itself put it in that hold: a mode someone else chose (a pilot on the RC switch) is never overridden. The
  act sends its setpoint before the mode request (PX4 enters OFFBOARD only with a setpoint younger than
  COM_OF_LOSS_T) and asks again every half second until a heartbeat shows the mode (one a second: a refused or
  lost request, or a hold the heartbeat did not show yet, would otherwise leave the vehicle holding);
* nothing arms, takes off or changes mode implicitly: :meth:`arm`, :meth:`takeoff` and :meth:`set_mode` are
  separate calls (the bridge's ``vehicle`` request). PX4 refuses OFFBOARD without a setpoint stream:
  :meth:`set_mode` streams zero setpoints at 20 Hz for half a second before asking. PX4 reads a take-off's altitude
  above sea level, ArduPilot above home: :meth:`takeoff` takes metres above the vehicle and sends each its own.

A reader thread follows the autopilot's HEARTBEAT (which autopilot, mode, armed), COMMAND_ACK, AUTOPILOT_VERSION,
GLOBAL_POSITION_INT (the altitude above sea level) and STATUSTEXT (PX4 sends it only to ground stations); with no
autopilot heartbeat for ``link_timeout_s`` the link is lost: :meth:`stats` (the bridge's status) says so, and
:meth:`link_error` makes the bridge refuse acts (VEHICLE_LINK) until a heartbeat comes again.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from firmware_bridge.actuator import Actuator, VehicleCommandError
from firmware_bridge.flight_modes import FLY_MODE, HOLD_MODE

try:
    from pymavlink import mavutil
except ImportError as e:  # the optional extra
    raise ImportError(f"the mavlink actuator needs pymavlink: pip install 'airq[mavlink]' ({e})") from None

MAV = mavutil.mavlink
COMPANION_COMPONENT = MAV.MAV_COMP_ID_ONBOARD_COMPUTER  # 191
# velocity and yaw rate only: ignore position (x, y, z), acceleration (x, y, z) and yaw
VELOCITY_YAW_RATE_MASK = (
    MAV.POSITION_TARGET_TYPEMASK_X_IGNORE
    | MAV.POSITION_TARGET_TYPEMASK_Y_IGNORE
    | MAV.POSITION_TARGET_TYPEMASK_Z_IGNORE
    | MAV.POSITION_TARGET_TYPEMASK_AX_IGNORE
    | MAV.POSITION_TARGET_TYPEMASK_AY_IGNORE
    | MAV.POSITION_TARGET_TYPEMASK_AZ_IGNORE
    | MAV.POSITION_TARGET_TYPEMASK_YAW_IGNORE
)
AUTOPILOTS = {MAV.MAV_AUTOPILOT_ARDUPILOTMEGA: "ardupilot", MAV.MAV_AUTOPILOT_PX4: "px4"}
SETPOINT_FRAME = {"ardupilot": MAV.MAV_FRAME_BODY_OFFSET_NED, "px4": MAV.MAV_FRAME_BODY_NED}
HEARTBEAT_PERIOD_S = 1.0
OFFBOARD_PRIMING_S = 0.5  # PX4 wants a setpoint stream (> 2 Hz) before it enters OFFBOARD
RESUME_RETRY_S = 0.5  # while taking the vehicle back from our hold: re-ask for the fly mode at most this often


class MavlinkError(VehicleCommandError):
    """The autopilot refused or did not answer."""


@dataclass
class AutopilotState:
    autopilot: str | None = None  # "ardupilot" or "px4" once a heartbeat names it
    system: int | None = None
    component: int | None = None
    mode: str | None = None
    armed: bool = False
    last_heartbeat_s: float | None = None  # time.monotonic()
    firmware: str | None = None  # AUTOPILOT_VERSION's flight_sw_version, major.minor.patch


def result_name(result: int) -> str:
    """MAV_RESULT's name for a COMMAND_ACK result (e.g. MAV_RESULT_DENIED)."""
    entry = MAV.enums["MAV_RESULT"].get(result)
    return entry.name if entry is not None else f"MAV_RESULT {result}"


def connection_string(spec: str) -> tuple[str, int | None]:
    """``serial:DEVICE:BAUD`` -> (DEVICE, BAUD); a pymavlink ``udpin:``/``udpout:``/``tcp:`` endpoint as it is.
    ValueError (one line) for anything else."""
    kind, sep, rest = spec.partition(":")
    if not sep or not rest:
        raise ValueError(
            f"--fc must be serial:DEVICE:BAUD, udpin:HOST:PORT, udpout:HOST:PORT or tcp:HOST:PORT, got {spec!r}"
        )
    if kind == "serial":
        device, _, baud = rest.rpartition(":")
        if not device or not baud.isdigit():
            raise ValueError(f"--fc serial needs DEVICE:BAUD, e.g. serial:/dev/serial0:921600, got {spec!r}")
        return device, int(baud)
    if kind in ("udpin", "udpout", "tcp", "udp"):
        host, _, port = rest.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"--fc {kind} needs HOST:PORT, got {spec!r}")
        return spec, None
    raise ValueError(f"--fc: unknown link kind {kind!r} (serial, udpin, udpout, tcp)")


class MavlinkActuator(Actuator):
    """Setpoints to an ArduPilot or PX4 flight controller over MAVLink (module docstring)."""

    name = "mavlink"

    def __init__(
        self,
        endpoint: str,
        link_timeout_s: float = 3.0,
        connect: Callable[..., Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        device, baud = connection_string(endpoint)
        opener = connect or mavutil.mavlink_connection
        kwargs: dict[str, Any] = {"source_system": 1, "source_component": COMPANION_COMPONENT, "autoreconnect": True}
        if baud is not None:
            kwargs["baud"] = baud
        self.endpoint = endpoint
        self.link = opener(device, **kwargs)
        self.link_timeout_s = link_timeout_s
        self.clock = clock
        self.state = AutopilotState()
        self.acks: deque[tuple[int, int]] = deque(maxlen=32)  # (command, result)
        self.statustext: deque[str] = deque(maxlen=8)
        self.setpoints_sent = 0
        self.holds = 0
        self.last_command_ns: int | None = None  # time.monotonic_ns() of the last act's setpoint
        self.last_hold_ns: int | None = None  # ... and of the last hold
        self._we_hold = False  # the bridge put the vehicle in its hold mode (and may take it back)
        self._resume_sent_s: float | None = None  # when we last asked to go back to the fly mode
        self.amsl_m: float | None = None  # GLOBAL_POSITION_INT.alt (PX4's take-off altitude is AMSL)
        self._version_requested = False
        self._send_lock = threading.Lock()
        self._stop = threading.Event()
        self._boot = clock()
        self._reader = threading.Thread(target=self._run, name="airq-mavlink", daemon=True)
        self._reader.start()

    # ------------------------------------------------------------------ the link
    def _run(self) -> None:
        next_heartbeat = 0.0
        while not self._stop.is_set():
            now = self.clock()
            if now >= next_heartbeat:
                self._send(
                    lambda mav: mav.heartbeat_send(
                        MAV.MAV_TYPE_ONBOARD_CONTROLLER, MAV.MAV_AUTOPILOT_INVALID, 0, 0, MAV.MAV_STATE_ACTIVE
                    )
                )
                next_heartbeat = now + HEARTBEAT_PERIOD_S
            try:
                msg = self.link.recv_match(blocking=True, timeout=0.05)
            except (OSError, ValueError):  # a closed or broken link: the heartbeat check reports it
                msg = None
                time.sleep(0.05)
            if msg is not None:
                self._on_message(msg)

    def _on_message(self, msg: Any) -> None:
        kind = msg.get_type()
        if kind == "HEARTBEAT":
            autopilot = AUTOPILOTS.get(msg.autopilot)
            if autopilot is None or msg.type in (MAV.MAV_TYPE_GCS, MAV.MAV_TYPE_ONBOARD_CONTROLLER):
                return  # another companion or a ground station
            s = self.state
            s.autopilot, s.system, s.component = autopilot, msg.get_srcSystem(), msg.get_srcComponent()
            s.armed = bool(msg.base_mode & MAV.MAV_MODE_FLAG_SAFETY_ARMED)
            s.mode = mavutil.mode_string_v10(msg)
            s.last_heartbeat_s = self.clock()
            self.link.target_system, self.link.target_component = s.system, s.component
            if not self._version_requested:
                self._version_requested = True
                self._command(MAV.MAV_CMD_REQUEST_MESSAGE, MAV.MAVLINK_MSG_ID_AUTOPILOT_VERSION)
        elif kind == "COMMAND_ACK":
            self.acks.append((msg.command, msg.result))
        elif kind == "AUTOPILOT_VERSION":
            v = msg.flight_sw_version
            self.state.firmware = f"{v >> 24 & 0xFF}.{v >> 16 & 0xFF}.{v >> 8 & 0xFF}"
        elif kind == "GLOBAL_POSITION_INT":
            self.amsl_m = msg.alt / 1000.0
        elif kind == "STATUSTEXT":
            self.statustext.append(str(msg.text))

    def _send(self, write: Callable[[Any], None]) -> None:
        with self._send_lock:
            try:
                write(self.link.mav)
            except OSError:  # the link is down: the missing heartbeats say so
                pass

    def _command(self, command: int, *params: float) -> None:
        # an older answer to the same command (a mode change sent by hold()/command()) is not this one's
        for old in [a for a in list(self.acks) if a[0] == command]:
            self.acks.remove(old)
        p = [*params, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0][:7]
        s = self.state
        self._send(lambda mav: mav.command_long_send(s.system or 1, s.component or 1, command, 0, *p))

    def wait_heartbeat(self, timeout_s: float = 10.0) -> AutopilotState:
        """The autopilot's state once its heartbeat has been seen; MavlinkError after ``timeout_s``."""
        end = self.clock() + timeout_s
        while self.state.last_heartbeat_s is None:
            if self.clock() > end:
                raise MavlinkError(f"no autopilot heartbeat on {self.endpoint} within {timeout_s:g} s")
            time.sleep(0.02)
        return self.state

    def _wait_ack(self, command: int, timeout_s: float) -> int:
        end = self.clock() + timeout_s
        while self.clock() < end:
            for cmd, result in list(self.acks):
                if cmd == command:
                    self.acks.remove((cmd, result))
                    return result
            time.sleep(0.01)
        raise MavlinkError(f"the autopilot did not acknowledge command {command} within {timeout_s:g} s")

    # ------------------------------------------------------------------ explicit commands
    def set_mode(self, mode: str, timeout_s: float = 5.0) -> None:
        """Ask for a flight mode by name (pymavlink's names: GUIDED, BRAKE, LOITER, OFFBOARD, ...) and wait until
        the heartbeat shows it."""
        s = self.wait_heartbeat(timeout_s)
        mapping = self.link.mode_mapping() or {}
        if mode not in mapping:
            raise MavlinkError(f"{s.autopilot} has no mode {mode!r} (known: {', '.join(sorted(mapping))})")
        if s.autopilot == "px4" and mode == "OFFBOARD":
            end = self.clock() + OFFBOARD_PRIMING_S
            while self.clock() < end:
                self._send_setpoint((0.0, 0.0, 0.0, 0.0))
                time.sleep(0.05)
        for old in [a for a in list(self.acks) if a[0] == MAV.MAV_CMD_DO_SET_MODE]:
            self.acks.remove(old)
        self._send(lambda mav: self.link.set_mode(mode))
        result = self._wait_ack(MAV.MAV_CMD_DO_SET_MODE, timeout_s)
        if result != MAV.MAV_RESULT_ACCEPTED:  # PX4: TEMPORARILY_REJECTED e.g. OFFBOARD without setpoints
            raise MavlinkError(f"mode {mode} refused ({result_name(result)}): "
                               f"{' | '.join(self.statustext) or 'no reason given'}")  # fmt: skip
        end = self.clock() + timeout_s
        while self.state.mode != mode:  # the heartbeat (1 Hz) follows the accepted change
            if self.clock() > end:
                raise MavlinkError(f"the autopilot stayed in {self.state.mode} instead of {mode}")
            time.sleep(0.02)

    def arm(self, timeout_s: float = 5.0) -> None:
        """Arm (MAV_CMD_COMPONENT_ARM_DISARM); MavlinkError, with the autopilot's last messages, if refused."""
        self._arm_disarm(True, timeout_s)

    def disarm(self, timeout_s: float = 5.0) -> None:
        """Disarm (the autopilot refuses while flying); MavlinkError if refused."""
        self._arm_disarm(False, timeout_s)

    def _arm_disarm(self, arm: bool, timeout_s: float) -> None:
        self.wait_heartbeat(timeout_s)
        self.statustext.clear()  # the refusal's reason is what the autopilot says from now on
        self._command(MAV.MAV_CMD_COMPONENT_ARM_DISARM, 1 if arm else 0)
        result = self._wait_ack(MAV.MAV_CMD_COMPONENT_ARM_DISARM, timeout_s)
        if result != MAV.MAV_RESULT_ACCEPTED:
            time.sleep(0.1)  # the reason (a STATUSTEXT) follows the refusal
            raise MavlinkError(
                f"{'arming' if arm else 'disarming'} refused ({result_name(result)}): "
                f"{' | '.join(self.statustext) or 'no reason given'}"
            )
        end = self.clock() + timeout_s
        while self.state.armed != arm:  # accepted: the heartbeat shows it within one of its periods
            if self.clock() > end:
                raise MavlinkError(f"{'arming' if arm else 'disarming'} accepted but the heartbeat still shows "
                                   f"{'disarmed' if arm else 'armed'} after {timeout_s:g} s")  # fmt: skip
            time.sleep(0.01)

    def takeoff(self, altitude_m: float, timeout_s: float = 5.0) -> None:
        """MAV_CMD_NAV_TAKEOFF to ``altitude_m`` above the take-off point; MavlinkError if refused.
        ArduPilot reads param7 as the altitude above home, PX4 as AMSL (a relative 5 m is "already higher than
        take-off altitude": accepted, and the vehicle stays on the ground)."""
        s = self.wait_heartbeat(timeout_s)
        target = altitude_m
        if s.autopilot == "px4":
            end = self.clock() + timeout_s
            while self.amsl_m is None:
                if self.clock() > end:
                    raise MavlinkError("no GLOBAL_POSITION_INT: PX4's take-off altitude is AMSL")
                time.sleep(0.02)
            target = self.amsl_m + altitude_m  # like PX4's own default (current altitude + MIS_TAKEOFF_ALT)
        self._command(MAV.MAV_CMD_NAV_TAKEOFF, 0, 0, 0, float("nan"), float("nan"), float("nan"), target)
        result = self._wait_ack(MAV.MAV_CMD_NAV_TAKEOFF, timeout_s)
        if result != MAV.MAV_RESULT_ACCEPTED:
            raise MavlinkError(
                f"take-off refused ({result_name(result)}): {' | '.join(self.statustext) or 'no reason given'}"
            )

    def vehicle_command(self, command: str, args: dict[str, Any]) -> None:
        if command == "arm":
            self.arm()
        elif command == "disarm":
            self.disarm()
        elif command == "takeoff":
            self.takeoff(float(args["altitude_m"]))
        elif command == "mode":
            self.set_mode(str(args["mode"]))
        else:
            raise MavlinkError(f"unknown vehicle command {command!r}")

    def vehicle(self) -> dict[str, Any]:
        s = self.state
        return {"autopilot": s.autopilot, "mode": s.mode, "armed": s.armed, "link_ok": self._link_ok()}

    def link_error(self) -> str | None:
        if self._link_ok():
            return None
        last = self.state.last_heartbeat_s
        if last is None:
            return f"no heartbeat from the autopilot on {self.endpoint} yet"
        return f"autopilot link lost: no heartbeat on {self.endpoint} for {self.clock() - last:.1f} s"

    def _link_ok(self) -> bool:
        last = self.state.last_heartbeat_s
        return last is not None and self.clock() - last < self.link_timeout_s

    # ------------------------------------------------------------------ the Actuator interface
    def _send_setpoint(self, setpoint: Sequence[float]) -> None:
        s = self.state
        frame = SETPOINT_FRAME.get(s.autopilot or "", MAV.MAV_FRAME_BODY_OFFSET_NED)
        vx, vy, vz, yaw_rate = (float(v) for v in setpoint[:4])
        t_ms = int((self.clock() - self._boot) * 1000) & 0xFFFFFFFF
        self._send(
            lambda mav: mav.set_position_target_local_ned_send(
                t_ms,
                s.system or 1,
                s.component or 1,
                frame,
                VELOCITY_YAW_RATE_MASK,
                0.0,
                0.0,
                0.0,
                vx,
                -vy,
                -vz,
                0.0,
                0.0,
                0.0,
                0.0,
                -yaw_rate,
            )  # fmt: skip
        )
        self.setpoints_sent += 1

    def command(self, setpoint: Sequence[float], t_ns: int) -> None:
        self.last_command_ns = t_ns
        # the setpoint first: PX4 refuses OFFBOARD (TEMPORARILY_REJECTED) unless a setpoint arrived within
        # COM_OF_LOSS_T (1 s), and a hold usually lasts longer than that
        self._send_setpoint(setpoint)
        autopilot = self.state.autopilot
        if not self._we_hold or autopilot is None:
            return
        s, fly, hold = self.state, FLY_MODE[autopilot], HOLD_MODE[autopilot]
        if s.mode not in (fly, hold):
            self._we_hold = False  # someone else chose a mode: never override it
        elif s.mode == fly and self._resume_sent_s is not None and (s.last_heartbeat_s or 0) > self._resume_sent_s:
            self._we_hold = False  # back in the fly mode (a heartbeat after our request says so)
        elif self._resume_sent_s is None or self.clock() - self._resume_sent_s >= RESUME_RETRY_S:
            # in our hold, or the heartbeat (1 Hz) does not show the hold yet: ask (again) until it shows `fly`
            self._send(lambda mav: self.link.set_mode(fly))
            self._resume_sent_s = self.clock()

    def hold(self, t_ns: int) -> None:
        self.holds += 1
        self.last_hold_ns = t_ns
        self._send_setpoint((0.0, 0.0, 0.0, 0.0))
        autopilot = self.state.autopilot
        # also while a resume is pending: the heartbeat may still show the hold although OFFBOARD was accepted
        if autopilot is not None and (self.state.mode == FLY_MODE[autopilot] or self._we_hold):
            self._send(lambda mav: self.link.set_mode(HOLD_MODE[autopilot]))
            self._we_hold = True
            self._resume_sent_s = None

    def reset(self) -> None:
        self._send_setpoint((0.0, 0.0, 0.0, 0.0))

    def stats(self) -> dict[str, Any]:
        return {
            "kind": self.name,
            "endpoint": self.endpoint,
            **asdict(self.state),
            "link_ok": self._link_ok(),
            "heartbeat_age_s": None
            if self.state.last_heartbeat_s is None
            else round(self.clock() - self.state.last_heartbeat_s, 3),
            "setpoints_sent": self.setpoints_sent,
            "holds": self.holds,
            "last_command_ns": self.last_command_ns,
            "last_hold_ns": self.last_hold_ns,
            "statustext": list(self.statustext),
        }

    def close(self) -> None:
        self._stop.set()
        self._reader.join(timeout=2.0)
        self.link.close()
