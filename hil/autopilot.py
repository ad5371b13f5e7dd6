"""Getting an autopilot's vehicle ready for ``hil.run --backend autopilot``, and what the report says of it.

Nothing here moves the vehicle by itself: every step is one of the bridge's explicit vehicle commands
(docs/protocol.md section 4.6), sent by the host over the bridge, which forwards it to the autopilot; the host
watches the result on its own ground-station link (nav_env.autopilot.Telemetry).

With ``--takeoff-m ALT`` the host flies the usual companion-computer sequence:

* ArduPilot: mode GUIDED, arm, MAV_CMD_NAV_TAKEOFF to ALT (ArduCopter takes off only armed in GUIDED);
* PX4: arm, take-off (AUTO_TAKEOFF, then it holds), then OFFBOARD (the bridge streams setpoints first); a vehicle
  disarmed in OFFBOARD (landed by a fail-safe while the companion flew it) is put in Hold first, where it arms.

Arming is retried while the autopilot refuses it (a SITL's EKF needs tens of seconds to use GPS: "PreArm: ..."),
each new reason shown, until ``timeout_s``. Without ``--takeoff-m`` the vehicle must already be armed and in the
mode the bridge flies (a pilot took off and switched to it), else the run stops with a one-line error.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from firmware_bridge.client import BridgeClient, BridgeRefused
from firmware_bridge.flight_modes import FLY_MODE, HOLD_MODE
from firmware_bridge.protocol import ErrorCode
from nav_env.autopilot import AutopilotNavEnv

ARM_RETRY_S = 2.0
ALTITUDE_REACHED = 0.95  # of the take-off altitude: the climb is done


class VehicleNotReady(RuntimeError):
    """The vehicle could not be made ready to fly the episodes (the message says what it answered)."""


@dataclass
class Preflight:
    """What getting the vehicle ready took."""

    autopilot: str
    took_off: bool  # False: it was already flying in its fly mode
    arm_attempts: int = 0
    ready_s: float = 0.0  # wall seconds from the first command to the vehicle flying in its fly mode
    altitude_m: float | None = None  # above the EKF origin when the episodes started
    refusals: tuple[str, ...] = ()  # the autopilot's distinct reasons for refusing to arm

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"refusals": list(self.refusals)}


def bridge_autopilot(client: BridgeClient, timeout_s: float) -> dict[str, Any]:
    """The bridge's actuator map once it hears an autopilot; VehicleNotReady if it is not a MAVLink bridge or
    hears none within ``timeout_s``."""
    end = time.monotonic() + timeout_s
    while True:
        actuator = client.status().actuator
        if actuator.get("kind") != "mavlink":
            raise VehicleNotReady(
                f"--backend autopilot needs a bridge started with --actuator mavlink --fc ENDPOINT; this one runs the "
                f"{actuator.get('kind')!r} actuator"
            )
        if actuator.get("link_ok") and actuator.get("autopilot") in FLY_MODE:
            return actuator
        if time.monotonic() > end:
            raise VehicleNotReady(f"the bridge hears no autopilot on {actuator.get('endpoint')} after {timeout_s:g} s")
        time.sleep(0.2)


def prepare_vehicle(
    client: BridgeClient,
    env: AutopilotNavEnv,
    takeoff_m: float | None,
    timeout_s: float,
    note: Callable[[str], None] = lambda text: None,
) -> Preflight:
    """Make the vehicle fly in the bridge's fly mode (taking off to ``takeoff_m`` if given); see the module
    docstring. VehicleNotReady (one line) when it cannot."""
    start = time.monotonic()
    end = start + timeout_s
    actuator = bridge_autopilot(client, timeout_s)
    autopilot = str(actuator["autopilot"])
    fly_mode = FLY_MODE[autopilot]
    telemetry = env.telemetry

    def altitude() -> float:
        pose = telemetry.pose
        return 0.0 if pose is None else float(-pose.position_ned[2])

    if takeoff_m is None:
        if not (actuator.get("armed") and actuator.get("mode") == fly_mode):
            raise VehicleNotReady(
                f"the {autopilot} vehicle is {'armed' if actuator.get('armed') else 'disarmed'} in "
                f"{actuator.get('mode')}: take off and switch it to {fly_mode} first, or pass --takeoff-m ALT"
            )
        return Preflight(autopilot, took_off=False, altitude_m=round(altitude(), 2))
    flight = Preflight(autopilot, took_off=True)
    if actuator.get("armed") and altitude() >= ALTITUDE_REACHED * takeoff_m:
        flight.took_off = False  # already up (a run resumed, a second policy): only the mode
    else:
        if autopilot == "ardupilot":
            command(client, "mode", mode="GUIDED")
        elif not actuator.get("armed") and actuator.get("mode") == fly_mode:
            # PX4 lands by itself (a fail-safe) in the mode the companion set and stays in it disarmed; there it
            # refuses to arm without a setpoint stream ("Resolve system health failures first"): Hold arms
            command(client, "mode", mode=HOLD_MODE[autopilot])
        refusals: list[str] = []
        while True:
            flight.arm_attempts += 1
            try:
                command(client, "arm")
                break
            except VehicleNotReady as e:
                reason = str(e)
                if reason.endswith("no reason given") and telemetry.statustext:  # PX4 tells ground stations only
                    reason = reason.removesuffix("no reason given") + telemetry.statustext[-1]
                    telemetry.statustext.clear()
                if reason not in refusals:
                    refusals.append(reason)
                    note(f"waiting for the autopilot to arm: {reason}")
                if time.monotonic() + ARM_RETRY_S > end:
                    raise VehicleNotReady(
                        f"the {autopilot} vehicle would not arm within {timeout_s:g} s: {reason}"
                    ) from None
                time.sleep(ARM_RETRY_S)
        flight.refusals = tuple(refusals)
        command(client, "takeoff", altitude_m=float(takeoff_m))
        note(f"{autopilot}: taking off to {takeoff_m:g} m")
        while altitude() < ALTITUDE_REACHED * takeoff_m:
            if time.monotonic() > end:
                raise VehicleNotReady(
                    f"the {autopilot} vehicle climbed to {altitude():.1f} m of {takeoff_m:g} m in {timeout_s:g} s"
                )
            time.sleep(0.1)
    if client.status().actuator.get("mode") != fly_mode:
        command(client, "mode", mode=fly_mode)
    flight.ready_s = round(time.monotonic() - start, 2)
    flight.altitude_m = round(altitude(), 2)
    return flight


def command(client: BridgeClient, name: str, **fields: Any) -> dict[str, Any]:
    """One vehicle command through the bridge; VehicleNotReady with the autopilot's answer if refused."""
    try:
        return client.vehicle(name, **fields)
    except BridgeRefused as e:
        if e.code != ErrorCode.VEHICLE_REFUSED:
            raise
        raise VehicleNotReady(e.detail) from None
