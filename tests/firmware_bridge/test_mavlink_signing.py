"""MAVLink 2 signing on the flight-controller link (``--fc-signing-key``): with a key the bridge signs everything it
sends and drops what is not signed with it (unsigned, MAVLink 1, another key's, replayed), counting each; an
autopilot with a key drops the unsigned bridge's messages, as ArduPilot and PX4 do (docs/autopilot.md, section 5)."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import time

import pytest

pytest.importorskip("pymavlink", reason="the mavlink actuator needs the mavlink extra (make installs it)")

from pymavlink.dialects.v10 import ardupilotmega as mavlink1  # noqa: E402
from pymavlink.dialects.v20 import ardupilotmega as mavlink2  # noqa: E402

from firmware_bridge.mavlink_actuator import MavlinkActuator  # noqa: E402
from firmware_bridge.mavlink_link import load_signing_key  # noqa: E402
from tests.firmware_bridge.mavlink_peer import ARDUCOPTER_MODES, AutopilotPeer  # noqa: E402
from tests.firmware_bridge.test_mavlink_actuator import free_udp_port, until  # noqa: E402

KEY = hashlib.sha256(b"airq test passphrase").digest()
OTHER_KEY = hashlib.sha256(b"someone else").digest()


def loiter_heartbeat(encoder) -> bytes:
    return encoder.heartbeat_encode(2, 3, 1 | 128, ARDUCOPTER_MODES["LOITER"], 4).pack(encoder)


def signed_encoder(key: bytes, timestamp: int | None = None):
    encoder = mavlink2.MAVLink(None, srcSystem=1, srcComponent=1)
    encoder.signing.secret_key, encoder.signing.sign_outgoing, encoder.signing.link_id = key, True, 7
    encoder.signing.timestamp = timestamp if timestamp is not None else int((time.time() - 1420070400) * 1e5)
    return encoder


def test_a_signed_link_flies_and_drops_what_its_key_did_not_sign():
    port = free_udp_port()
    peer = AutopilotPeer("ardupilot", port, signing_key=KEY)
    actuator = MavlinkActuator(f"udpout:127.0.0.1:{port}", signing_key=KEY)
    try:
        actuator.wait_heartbeat(5)
        actuator.set_mode("GUIDED")
        actuator.arm()
        actuator.command((1.0, 0.0, 0.0, 0.0), time.monotonic_ns())
        until(lambda: len(peer.state.setpoints) == 1)
        assert peer.link.mav.signing.goodsig_count > 0 and peer.link.mav.signing.reject_count == 0
        # from the autopilot's own address and system: unsigned (MAVLink 2 and 1), another key's, and a replay
        send = lambda data: peer.link.port.sendto(data, actuator.link.conn.port.getsockname())  # noqa: E731
        send(loiter_heartbeat(mavlink2.MAVLink(None, srcSystem=1, srcComponent=1)))
        send(loiter_heartbeat(mavlink1.MAVLink(None, srcSystem=1, srcComponent=1)))
        send(loiter_heartbeat(signed_encoder(OTHER_KEY)))
        genuine = loiter_heartbeat(signed_encoder(KEY, timestamp=1))  # a minute and more old: a replay
        send(genuine)
        until(lambda: actuator.stats()["unsigned_rejected"] == 2 and actuator.stats()["bad_signatures"] == 2)
        time.sleep(1.2)  # the peer's next heartbeat
        assert actuator.state.mode == "GUIDED" and actuator.stats()["signed"] is True
        # a new stream signed with the key now is believed
        send(loiter_heartbeat(signed_encoder(KEY)))
        until(lambda: actuator.state.mode == "LOITER")
    finally:
        actuator.close()
        peer.close()
    assert peer.state.errors == []


def test_an_autopilot_with_a_key_ignores_an_unsigned_bridge():
    port = free_udp_port()
    peer = AutopilotPeer("ardupilot", port, signing_key=KEY)
    actuator = MavlinkActuator(f"udpout:127.0.0.1:{port}")
    try:
        until(lambda: peer.link.mav.signing.reject_count > 0)  # the companion's heartbeats, dropped
        assert actuator.wait_heartbeat(5).autopilot == "ardupilot"  # it hears the autopilot (unsigned links read all)
        actuator.command((1.0, 0.0, 0.0, 0.0), time.monotonic_ns())
        actuator.link.set_mode("GUIDED")
        time.sleep(0.5)
        assert peer.state.setpoints == [] and peer.state.mode == "STABILIZE" and peer.state.commands == []
    finally:
        actuator.close()
        peer.close()


@pytest.mark.parametrize(
    ("content", "mode", "expected"),
    [
        (KEY.hex(), 0o600, KEY),
        ("airq test passphrase\n", 0o600, KEY),  # MAVProxy's `signing setup PASSPHRASE`: the key is its SHA-256
        ("", 0o600, "is empty: write 64 hex digits or a passphrase in it"),
        (KEY.hex(), 0o644, "is open to other users (mode 644): chmod 600 it"),
    ],
)
def test_the_key_file(tmp_path, content, mode, expected):
    path = tmp_path / "fc.key"
    path.write_text(content)
    os.chmod(path, mode)
    if isinstance(expected, bytes):
        assert load_signing_key(path) == expected
        return
    with pytest.raises(ValueError, match=re.escape(expected)):
        load_signing_key(path)
    # and the bridge's command line refuses it in one line, before it starts anything
    r = subprocess.run(
        [sys.executable, "-m", "firmware_bridge.serve", "--actuator", "mavlink", "--fc", "udpin:127.0.0.1:14540",
         "--fc-signing-key", str(path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode != 0 and expected in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_a_key_is_for_the_mavlink_actuator(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "firmware_bridge.serve", "--fc-signing-key", str(tmp_path / "none")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode != 0 and "--fc-signing-key is for --actuator mavlink" in r.stderr
