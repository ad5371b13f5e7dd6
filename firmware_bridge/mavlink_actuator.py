"""The MAVLink actuator: the bridge as a companion computer that sends setpoints to ArduPilot or PX4.

Needs the ``mavlink`` extra (pymavlink). The link (``--fc``) is a :class:`firmware_bridge.mavlink_link.MavlinkLink`
in the companion role, its endpoint in that module's grammar: ``serial:/dev/serial0:921600`` for a UART wired to the
flight controller's TELEM port, ``udpin:0.0.0.0:14540`` or ``tcp:HOST:PORT`` for a SITL build or a router.

What goes over it (MAVLink common plus each autopilot's documented behaviour):

* our HEARTBEAT once a second, as ``MAV_TYPE_ONBOARD_CONTROLLER`` / ``MAV_AUTOPILOT_INVALID`` from component
  ``MAV_COMP_ID_ONBOARD_COMPUTER`` (191) of the vehicle's system;
* every act: ``SET_POSITION_TARGET_LOCAL_NED`` with velocity and yaw rate only (type mask ``0x05C7``: position,
  acceleration and yaw ignored), in the frame each autopilot reads as "relative to the vehicle's heading":
  ``MAV_FRAME_BODY_OFFSET_NED`` for ArduPilot (GUIDED), ``MAV_FRAME_BODY_NED`` for PX4 (OFFBOARD). nav_env's
  setpoint is forward-left-up with counter-clockwise yaw rate; MAVLink's body frame is forward-right-down with
  clockwise yaw rate, so y, z and the yaw rate change sign;
* the hold (the watchdog's fail-safe): a zero-velocity setpoint, then the autopilot's own hold mode, ``BRAKE`` on
  ArduPilot, ``HOLD`` (AUTO_LOITER) on PX4; in the fly mode it also comes when no act follows a reset or the
  bridge's switch to that mode (:meth:`flies_on_setpoints`), before PX4's own offboard-loss hold would. The next act takes the vehicle back to GUIDED / OFFBOARD only if the
  bridge itself put it in that hold: a mode someone else chose (a pilot on the RC switch) is never overridden. The
  act sends its setpoint before the mode request (PX4 enters OFFBOARD only with a setpoint younger than
  COM_OF_LOSS_T) and asks again every half second until a heartbeat shows the mode (one a second: a refused or
  lost request, or a hold the heartbeat did not show yet, would otherwise leave the vehicle holding);
* **who flies it**: the bridge's setpoints go out only while the autopilot reports the vehicle armed, in the fly mode
  (GUIDED / OFFBOARD, the mode a companion computer flies in) or the hold the bridge itself entered. In any other
  mode a pilot or a ground station has the vehicle, and a disarmed one flies for no one (PX4 v1.16.0 puts a vehicle
  its fail-safe landed back in OFFBOARD, disarmed): an act is answered (the policy runs) but sends nothing, its
  reply's ``vehicle`` says ``"control": "pilot"``, and :attr:`setpoints_withheld` counts it; the hold and a reset
  send nothing either;
* **a reboot** (the link notices it: a boot clock that went back, or a vehicle back disarmed from a lost link):
  every act is refused (:meth:`link_error`, VEHICLE_LINK) until the host arms the vehicle again with a ``vehicle``
  request, and the bridge forgets its hold;
* nothing arms, takes off or changes mode implicitly: :meth:`arm`, :meth:`takeoff` and :meth:`set_mode` are
  separate calls (the bridge's ``vehicle`` request). PX4 refuses OFFBOARD without a setpoint stream:
  :meth:`set_mode` streams zero setpoints at 20 Hz for half a second before asking. PX4 reads a take-off's altitude
  above sea level, ArduPilot above home: :meth:`takeoff` takes metres above the vehicle and sends each its own.

The link's reader thread follows the autopilot's HEARTBEAT (which autopilot, mode, armed), COMMAND_ACK,
AUTOPILOT_VERSION and STATUSTEXT (PX4 sends it only to ground stations); the actuator adds GLOBAL_POSITION_INT (the
altitude above sea level). With no autopilot heartbeat for ``link_timeout_s`` the link is lost: :meth:`stats` (the
bridge's status) says so, and :meth:`link_error` makes the bridge refuse acts (VEHICLE_LINK) until a heartbeat comes
again.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from firmware_bridge.actuator import Actuator, VehicleCommandError
from firmware_bridge.flight_modes import FLY_MODE, HOLD_MODE
from firmware_bridge.mavlink_link import AutopilotState, MavlinkLink

try:
    from pymavlink import mavutil
except ImportError as e:  # the optional extra
    raise ImportError(f"the mavlink actuator needs pymavlink: pip install 'airq[mavlink]' ({e})") from None

MAV = mavutil.mavlink
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
SETPOINT_FRAME = {"ardupilot": MAV.MAV_FRAME_BODY_OFFSET_NED, "px4": MAV.MAV_FRAME_BODY_NED}
OFFBOARD_PRIMING_S = 0.5  # PX4 wants a setpoint stream (> 2 Hz) before it enters OFFBOARD
COMMAND_RETRY_S = 1.0  # a command without a COMMAND_ACK within this is sent again (MAVLink's command protocol)
RESUME_RETRY_S = 0.5  # while taking the vehicle back from our hold: re-ask for the fly mode at most this often
# The hold on PX4 brakes in OFFBOARD first: zero-velocity setpoints (its velocity loop, limited by MPC_ACC_HOR_MAX and
# MPC_TILTMAX_AIR, brakes at once), then Hold once the vehicle is slower than BRAKE_DONE_MPS or after BRAKE_MAX_S.
# Hold entered at speed re-plans from the vehicle's acceleration under MPC_JERK_AUTO and keeps accelerating for up
# to a second (docs/autopilot.md). ArduCopter's BRAKE mode brakes at once (BRAKE_MODE_DECEL_RATE): entered directly.
BRAKE_IN_FLY_MODE = {"px4": True, "ardupilot": False}
BRAKE_SETPOINT_S = 0.05  # zero setpoints at 20 Hz while braking (PX4 wants more than 2 Hz)
BRAKE_DONE_MPS = 0.3
BRAKE_MAX_S = 4.0
SPEED_FRESH_S = 0.5  # a GLOBAL_POSITION_INT older than this says nothing of the speed now
# the autopilot's state in the bridge's status (docs/protocol.md), in this order
STATUS_FIELDS = (
    "autopilot", "system", "component", "mode", "armed", "last_heartbeat_s", "firmware",
    "reboots", "rebooted", "foreign_messages", "foreign_datagrams", "unsigned_rejected", "bad_signatures",
)  # fmt: skip


class MavlinkError(VehicleCommandError):
    """The autopilot refused or did not answer."""


def result_name(result: int) -> str:
    """MAV_RESULT's name for a COMMAND_ACK result (e.g. MAV_RESULT_DENIED)."""
    entry = MAV.enums["MAV_RESULT"].get(result)
    return entry.name if entry is not None else f"MAV_RESULT {result}"


class MavlinkActuator(Actuator):
    """Setpoints to an ArduPilot or PX4 flight controller over MAVLink (module docstring)."""

    name = "mavlink"

    def __init__(
        self,
        endpoint: str,
        link_timeout_s: float = 3.0,
        connect: Callable[..., Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
        signing_key: bytes | None = None,
    ) -> None:
        self.link = MavlinkLink(endpoint, "companion", on_message=self._on_message, link_timeout_s=link_timeout_s,
                                connect=connect, clock=clock, signing_key=signing_key)  # fmt: skip
        self.endpoint = endpoint
        self.clock = clock
        self.state: AutopilotState = self.link.state
        self.statustext = self.link.statustext
        self.setpoints_sent = 0
        self.setpoints_withheld = 0  # acts answered while a pilot had the vehicle: nothing sent
        self.hold_setpoints_sent = 0  # of setpoints_sent, the zero setpoints of the bridge's own hold and resets
        self.holds = 0
        self.last_command_ns: int | None = None  # time.monotonic_ns() of the last act's setpoint
        self.last_hold_ns: int | None = None  # ... and of the last hold
        self._we_hold = False  # the bridge put the vehicle in its hold mode (and may take it back)
        self._resume_sent_s: float | None = None  # when we last asked to go back to the fly mode
        self.amsl_m: float | None = None  # GLOBAL_POSITION_INT.alt (PX4's take-off altitude is AMSL)
        self.ground_speed: tuple[float, float] | None = None  # (m/s, when) from GLOBAL_POSITION_INT
        self._braking_since: float | None = None  # the hold brakes in the fly mode before the hold mode
        self._brake_sent_s = 0.0
        self._boot = clock()
        self.link.start()

    # ------------------------------------------------------------------ the link
    def _on_message(self, msg: Any, now: float) -> None:
        if msg.get_type() == "GLOBAL_POSITION_INT":
            self.amsl_m = msg.alt / 1000.0
            self.ground_speed = (math.hypot(msg.vx, msg.vy) / 100.0, now)  # cm/s

    def wait_heartbeat(self, timeout_s: float = 10.0) -> AutopilotState:
        """The autopilot's state once its heartbeat has been seen; MavlinkError after ``timeout_s``."""
        if not self.link.wait_heartbeat(timeout_s):
            raise MavlinkError(f"no autopilot heartbeat on {self.endpoint} within {timeout_s:g} s")
        return self.state

    def _command(self, send: Callable[[int], None], command: int, timeout_s: float) -> int:
        """Send a command (``send(confirmation)``) and wait for its COMMAND_ACK, sending it again, the confirmation
        counted up, every COMMAND_RETRY_S until ``timeout_s`` (MAVLink's command protocol: on a lossy link a lost
        COMMAND_LONG or ACK costs a retry, not the command); the result, or MavlinkError."""
        self.link.forget_acks(command)
        end = self.clock() + timeout_s
        confirmation = 0
        while True:
            send(confirmation)
            result = self.link.wait_ack(command, max(0.0, min(COMMAND_RETRY_S, end - self.clock())))
            if result is not None:
                return result
            if self.clock() >= end:
                raise MavlinkError(f"the autopilot did not acknowledge command {command} within {timeout_s:g} s "
                                   f"({confirmation + 1} sent)")  # fmt: skip
            confirmation += 1

    # ------------------------------------------------------------------ explicit commands
    def set_mode(self, mode: str, timeout_s: float = 5.0) -> None:
        """Ask for a flight mode by name (pymavlink's names: GUIDED, BRAKE, LOITER, OFFBOARD, ...) and wait until
        the heartbeat shows it."""
        s = self.wait_heartbeat(timeout_s)
        mapping = self.link.mode_mapping()
        if mode not in mapping:
            raise MavlinkError(f"{s.autopilot} has no mode {mode!r} (known: {', '.join(sorted(mapping))})")
        if s.autopilot == "px4" and mode == "OFFBOARD":
            end = self.clock() + OFFBOARD_PRIMING_S
            while self.clock() < end:
                self._send_setpoint((0.0, 0.0, 0.0, 0.0))
                time.sleep(0.05)
        result = self._command(lambda _: self.link.set_mode(mode), MAV.MAV_CMD_DO_SET_MODE, timeout_s)
        if result != MAV.MAV_RESULT_ACCEPTED:  # PX4: TEMPORARILY_REJECTED e.g. OFFBOARD without setpoints
            raise MavlinkError(f"mode {mode} refused ({result_name(result)}): "
                               f"{' | '.join(self.statustext) or 'no reason given'}")  # fmt: skip
        end = self.clock() + timeout_s
        offboard = s.autopilot == "px4" and mode == "OFFBOARD"
        while self.state.mode != mode:  # the heartbeat (1 Hz) follows the accepted change
            if self.clock() > end:
                raise MavlinkError(f"the autopilot stayed in {self.state.mode} instead of {mode}")
            if offboard:  # PX4 leaves OFFBOARD after COM_OF_LOSS_T without setpoints: the wait must not starve it
                self._send_setpoint((0.0, 0.0, 0.0, 0.0))
                time.sleep(0.05)
            else:
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
        arm_disarm = MAV.MAV_CMD_COMPONENT_ARM_DISARM
        result = self._command(lambda n: self.link.command(arm_disarm, 1 if arm else 0, confirmation=n), arm_disarm,
                               timeout_s)  # fmt: skip
        if result == MAV.MAV_RESULT_ACCEPTED and arm:
            self.state.rebooted = None  # the host has seen the reboot (acts were refused) and armed again
            self._we_hold = False
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
        nan = float("nan")
        result = self._command(
            lambda n: self.link.command(MAV.MAV_CMD_NAV_TAKEOFF, 0, 0, 0, nan, nan, nan, target, confirmation=n),
            MAV.MAV_CMD_NAV_TAKEOFF, timeout_s,
        )  # fmt: skip
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

    def flies_on_setpoints(self) -> bool:
        """Armed in the fly mode (GUIDED / OFFBOARD), which lives on the bridge's setpoints: PX4 leaves OFFBOARD for
        its own hold COM_OF_LOSS_T after the last one, a mode the bridge would then take for a pilot's. (Disarmed,
        the vehicle is on the ground, where ArduCopter is put in GUIDED before it arms and takes off.)"""
        s = self.state
        return s.autopilot is not None and bool(s.armed) and s.mode == FLY_MODE[s.autopilot]

    def in_control(self) -> bool:
        """Whether the bridge's setpoints fly the vehicle: armed, in its fly mode or in the hold the bridge entered
        (module docstring). Disarmed, nothing flies on them: PX4 puts a vehicle its fail-safe landed back in the
        companion's mode, where a pilot arming it would otherwise hand it to a stream the host never meant for it."""
        s = self.state
        if s.autopilot is None or not s.armed:
            return False
        return s.mode == FLY_MODE[s.autopilot] or (self._we_hold and s.mode == HOLD_MODE[s.autopilot])

    def vehicle(self) -> dict[str, Any]:
        s = self.state
        control = None if s.autopilot is None else "bridge" if self.in_control() else "pilot"
        return {"autopilot": s.autopilot, "mode": s.mode, "armed": s.armed, "link_ok": self.link.link_ok(),
                "control": control}  # fmt: skip

    def link_error(self) -> str | None:
        lost = self.link.link_error()
        if lost is not None or self.state.rebooted is None:
            return lost
        return f"the autopilot rebooted ({self.state.rebooted}): arm it again with a vehicle request"

    # ------------------------------------------------------------------ the Actuator interface
    def _send_setpoint(self, setpoint: Sequence[float]) -> None:
        s = self.state
        frame = SETPOINT_FRAME.get(s.autopilot or "", MAV.MAV_FRAME_BODY_OFFSET_NED)
        vx, vy, vz, yaw_rate = (float(v) for v in setpoint[:4])
        t_ms = int((self.clock() - self._boot) * 1000) & 0xFFFFFFFF
        self.link.send(
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
        self._braking_since = None  # an act while braking: still in the fly mode, it flies on
        autopilot = self.state.autopilot
        if not self.in_control():
            self.setpoints_withheld += 1
            self._we_hold = False  # someone else chose the mode: never override it
            return
        # the setpoint first: PX4 refuses OFFBOARD (TEMPORARILY_REJECTED) unless a setpoint arrived within
        # COM_OF_LOSS_T (1 s), and a hold usually lasts longer than that
        self._send_setpoint(setpoint)
        if not self._we_hold or autopilot is None:
            return
        s, fly = self.state, FLY_MODE[autopilot]
        if s.mode == fly and self._resume_sent_s is not None and (s.last_heartbeat_s or 0) > self._resume_sent_s:
            self._we_hold = False  # back in the fly mode (a heartbeat after our request says so)
        elif self._resume_sent_s is None or self.clock() - self._resume_sent_s >= RESUME_RETRY_S:
            # in our hold, or the heartbeat (1 Hz) does not show the hold yet: ask (again) until it shows `fly`
            self.link.set_mode(fly)
            self._resume_sent_s = self.clock()

    def hold(self, t_ns: int) -> None:
        self.holds += 1
        self.last_hold_ns = t_ns
        if not self.in_control():
            return  # a pilot's mode is never overridden, not even by a zero setpoint
        self._send_hold_setpoint()
        s = self.state
        if BRAKE_IN_FLY_MODE.get(s.autopilot or "") and not self._we_hold and s.mode == FLY_MODE[s.autopilot or ""]:
            self._braking_since = self._brake_sent_s = self.clock()  # tick() streams zeros, then the hold mode
            return
        self._enter_hold_mode()

    def _enter_hold_mode(self) -> None:
        self._braking_since = None
        # also while a resume is pending: the heartbeat may still show the hold although OFFBOARD was accepted
        self.link.set_mode(HOLD_MODE[self.state.autopilot or ""])
        self._we_hold = True
        self._resume_sent_s = None

    @property
    def braking(self) -> bool:
        return self._braking_since is not None

    def tick(self, now_ns: int) -> None:
        """While the hold brakes in the fly mode: a zero setpoint every BRAKE_SETPOINT_S, and the hold mode once
        the vehicle is slower than BRAKE_DONE_MPS (GLOBAL_POSITION_INT) or BRAKE_MAX_S has passed."""
        if self._braking_since is None:
            return
        if not self.in_control():  # a pilot took the vehicle meanwhile
            self._braking_since = None
            return
        now = self.clock()
        speed = self.ground_speed
        slow = speed is not None and now - speed[1] <= SPEED_FRESH_S and speed[0] < BRAKE_DONE_MPS
        if now - self._braking_since >= BRAKE_MAX_S or (slow and now - self._braking_since >= BRAKE_SETPOINT_S):
            self._send_hold_setpoint()
            self._enter_hold_mode()
        elif now - self._brake_sent_s >= BRAKE_SETPOINT_S:
            self._send_hold_setpoint()
            self._brake_sent_s = now

    def _send_hold_setpoint(self) -> None:
        self._send_setpoint((0.0, 0.0, 0.0, 0.0))
        self.hold_setpoints_sent += 1

    def reset(self) -> None:
        self._braking_since = None
        if self.in_control():
            self._send_hold_setpoint()

    def stats(self) -> dict[str, Any]:
        age = self.link.heartbeat_age_s()
        return {
            "kind": self.name,
            "endpoint": self.endpoint,
            "signed": self.link.signed,
            **{name: getattr(self.state, name) for name in STATUS_FIELDS},
            "link_ok": self.link.link_ok(),
            "heartbeat_age_s": None if age is None else round(age, 3),
            "setpoints_sent": self.setpoints_sent,
            "setpoints_withheld": self.setpoints_withheld,
            "hold_setpoints_sent": self.hold_setpoints_sent,
            "holds": self.holds,
            "braking": self.braking,
            "last_command_ns": self.last_command_ns,
            "last_hold_ns": self.last_hold_ns,
            "statustext": list(self.statustext),
        }

    def close(self) -> None:
        self.link.close()
