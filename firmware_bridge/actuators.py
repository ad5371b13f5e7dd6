"""The actuators ``--actuator`` can select: the mock flight controller, or MAVLink to ArduPilot / PX4."""

from __future__ import annotations

from firmware_bridge.actuator import Actuator, MockFlightController
from firmware_bridge.mavlink_link import load_signing_key, parse_endpoint


def check_fc(kind: str, fc: str | None, signing_key_file: str | None = None) -> bytes | None:
    """``--actuator``, ``--fc`` and ``--fc-signing-key`` together: ValueError, one line, for a missing or stray
    ``fc``, an ``fc`` outside the MAVLink endpoint grammar (firmware_bridge.mavlink_link, the one ``hil.run --fc``
    is checked by), or a key file :func:`load_signing_key` refuses; the key, if one is given. Needs no pymavlink."""
    if kind == "mock" and fc is not None:
        raise ValueError("--fc is for --actuator mavlink")
    if kind == "mock" and signing_key_file is not None:
        raise ValueError("--fc-signing-key is for --actuator mavlink")
    if kind == "mavlink":
        if fc is None:
            raise ValueError("--actuator mavlink needs --fc (e.g. serial:/dev/serial0:921600 or udpin:0.0.0.0:14540)")
        try:
            parse_endpoint(fc)
        except ValueError as e:
            raise ValueError(f"--fc: {e}") from None
    if signing_key_file is None:
        return None
    try:
        return load_signing_key(signing_key_file)
    except ValueError as e:
        raise ValueError(f"--fc-signing-key: {e}") from None


def make_actuator(kind: str, fc: str | None = None, signing_key: bytes | None = None) -> Actuator:
    """Factory for the --actuator CLI flag: ``mock``, or ``mavlink`` to the flight controller at ``fc`` (a
    MAVLink endpoint, firmware_bridge.mavlink_actuator; needs the mavlink extra), MAVLink 2 signed with
    ``signing_key`` (what :func:`check_fc` read from ``--fc-signing-key``) if given. ValueError, one line, for a
    bad kind, what :func:`check_fc` refuses, or a missing pymavlink."""
    if kind not in ACTUATOR_KINDS:
        raise ValueError(f"unknown actuator {kind!r}; available: {', '.join(ACTUATOR_KINDS)}")
    check_fc(kind, fc)
    if kind == "mock" and signing_key is not None:
        raise ValueError("--fc-signing-key is for --actuator mavlink")
    if kind == "mock":
        return MockFlightController()
    try:
        # deferred: pymavlink (via firmware_bridge.mavlink_actuator): the mavlink extra
        from firmware_bridge.mavlink_actuator import MavlinkActuator
    except ImportError as e:
        raise ValueError(str(e)) from None
    assert fc is not None
    return MavlinkActuator(fc, signing_key=signing_key)


ACTUATOR_KINDS = ("mock", "mavlink")
