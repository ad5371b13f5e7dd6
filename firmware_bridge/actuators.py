"""The actuators ``--actuator`` can select: the mock flight controller, or MAVLink to ArduPilot / PX4."""

from __future__ import annotations

from firmware_bridge.actuator import Actuator, MockFlightController
from firmware_bridge.mavlink_link import parse_endpoint


def check_fc(kind: str, fc: str | None) -> None:
    """``--actuator`` and ``--fc`` together: ValueError, one line, for a missing or stray ``fc``, or an ``fc``
    outside the MAVLink endpoint grammar (firmware_bridge.mavlink_link, the one ``hil.run --fc`` is checked by).
    Needs no pymavlink."""
    if kind == "mock" and fc is not None:
        raise ValueError("--fc is for --actuator mavlink")
    if kind == "mavlink":
        if fc is None:
            raise ValueError("--actuator mavlink needs --fc (e.g. serial:/dev/serial0:921600 or udpin:0.0.0.0:14540)")
        try:
            parse_endpoint(fc)
        except ValueError as e:
            raise ValueError(f"--fc: {e}") from None


def make_actuator(kind: str, fc: str | None = None) -> Actuator:
    """Factory for the --actuator CLI flag: ``mock``, or ``mavlink`` to the flight controller at ``fc`` (a
    MAVLink endpoint, firmware_bridge.mavlink_actuator; needs the mavlink extra). ValueError, one line, for a
    bad kind, an ``fc`` :func:`check_fc` refuses, or a missing pymavlink."""
    if kind not in ACTUATOR_KINDS:
        raise ValueError(f"unknown actuator {kind!r}; available: {', '.join(ACTUATOR_KINDS)}")
    check_fc(kind, fc)
    if kind == "mock":
        return MockFlightController()
    try:
        # deferred: pymavlink (via firmware_bridge.mavlink_actuator): the mavlink extra
        from firmware_bridge.mavlink_actuator import MavlinkActuator
    except ImportError as e:
        raise ValueError(str(e)) from None
    assert fc is not None
    return MavlinkActuator(fc)


ACTUATOR_KINDS = ("mock", "mavlink")
