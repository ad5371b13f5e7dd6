"""The actuators ``--actuator`` can select: the mock flight controller, or MAVLink to ArduPilot / PX4."""

from __future__ import annotations

from firmware_bridge.actuator import Actuator, MockFlightController


def make_actuator(kind: str, fc: str | None = None) -> Actuator:
    """Factory for the --actuator CLI flag: ``mock``, or ``mavlink`` to the flight controller at ``fc`` (a
    pymavlink endpoint, firmware_bridge.mavlink_actuator; needs the mavlink extra). ValueError, one line, for a
    bad kind, a missing or stray ``fc``, or a missing pymavlink."""
    if kind == "mock":
        if fc is not None:
            raise ValueError("--fc is for --actuator mavlink")
        return MockFlightController()
    if kind == "mavlink":
        if fc is None:
            raise ValueError("--actuator mavlink needs --fc (e.g. serial:/dev/serial0:921600 or udpin:0.0.0.0:14540)")
        try:
            from firmware_bridge.mavlink_actuator import MavlinkActuator
        except ImportError as e:
            raise ValueError(str(e)) from None
        return MavlinkActuator(fc)
    raise ValueError(f"unknown actuator {kind!r}; available: {', '.join(ACTUATOR_KINDS)}")


ACTUATOR_KINDS = ("mock", "mavlink")
