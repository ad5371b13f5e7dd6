"""The MAVLink link's reader on a UDP link: a datagram is parsed whole, so a frame cut short in one datagram never
takes the next datagrams' frames with it (a noisy radio, a fuzzer), while a datagram of several frames gives them all."""

from __future__ import annotations

import socket
import time

import pytest

pytest.importorskip("pymavlink", reason="the mavlink link needs the mavlink extra (make installs it)")

from pymavlink.dialects.v20 import ardupilotmega as mavlink2  # noqa: E402

from firmware_bridge.mavlink_link import MavlinkLink  # noqa: E402
from tests.firmware_bridge.test_mavlink_actuator import free_udp_port, until  # noqa: E402

ENCODER = mavlink2.MAVLink(None, srcSystem=1, srcComponent=1)


def heartbeat(mode: int = 4) -> bytes:
    return ENCODER.heartbeat_encode(
        mavlink2.MAV_TYPE_QUADROTOR, mavlink2.MAV_AUTOPILOT_ARDUPILOTMEGA, 1, mode, mavlink2.MAV_STATE_ACTIVE
    ).pack(ENCODER)


def statustext(text: str) -> bytes:
    return ENCODER.statustext_encode(mavlink2.MAV_SEVERITY_INFO, text.encode()).pack(ENCODER)


@pytest.fixture
def link():
    port = free_udp_port()
    seen: list[str] = []
    link = MavlinkLink(f"udpin:127.0.0.1:{port}", "companion", on_message=lambda m, now: seen.append(m.get_type()))
    link.start()
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    yield link, seen, lambda data: sender.sendto(data, ("127.0.0.1", port))
    sender.close()
    link.close()


def test_a_truncated_frame_does_not_swallow_the_heartbeats_after_it(link):
    link, seen, send = link
    # a MAVLink 2 header claiming a 255-byte payload, in a 30-byte datagram: as a stream it waits for 267 bytes
    send(bytes([0xFD, 255, 0, 0, 0, 1, 1, 0, 0, 0]) + bytes(20))
    send(heartbeat())
    until(lambda: link.state.last_heartbeat_s is not None, timeout=2.0)
    assert link.state.autopilot == "ardupilot" and link.state.mode == "GUIDED"


def test_every_frame_of_a_datagram_is_read_and_a_broken_one_costs_only_itself(link):
    link, seen, send = link
    send(heartbeat() + statustext("one") + statustext("two"))
    until(lambda: len(link.statustext) == 2, timeout=2.0)
    broken = bytearray(statustext("three"))
    broken[-1] ^= 0xFF  # its CRC
    send(bytes(broken))
    send(statustext("four"))
    until(lambda: len(link.statustext) == 3, timeout=2.0)
    assert [line.split()[-1] for line in link.statustext] == ["one", "two", "four"]


def autopilot_version(encoder, major: int, minor: int, patch: int) -> bytes:
    return encoder.autopilot_version_encode(
        0, major << 24 | minor << 16 | patch << 8, 0, 0, 0, b"abcdef12", bytes(8), bytes(8), 0, 0, 0
    ).pack(encoder)


def test_the_link_serves_the_first_autopilot_and_believes_only_the_version_it_asked_for(link):
    link, seen, send = link
    second = mavlink2.MAVLink(None, srcSystem=2, srcComponent=1)
    send(heartbeat(mode=4))  # system 1, GUIDED
    until(lambda: link.state.system == 1, timeout=2.0)
    send(autopilot_version(ENCODER, 4, 5, 7))  # the answer to the request the first heartbeat sent
    until(lambda: link.state.firmware == "4.5.7", timeout=2.0)
    before = len(seen)
    for _ in range(5):  # a second autopilot in LOITER, and its version
        send(
            second.heartbeat_encode(mavlink2.MAV_TYPE_QUADROTOR, mavlink2.MAV_AUTOPILOT_ARDUPILOTMEGA, 1, 5, 4).pack(
                second
            )
        )
    send(autopilot_version(second, 23, 126, 130))
    send(autopilot_version(ENCODER, 9, 9, 9))  # unasked for, from the autopilot itself
    send(statustext("after"))
    until(lambda: "after" in " ".join(link.statustext), timeout=2.0)
    assert link.state.foreign_messages == 6
    assert (link.state.system, link.state.mode, link.conn.target_system) == (1, "GUIDED", 1)
    assert link.state.firmware == "4.5.7"
    assert seen[before:] == ["STATUSTEXT"]  # neither the other system's messages nor the unasked version reach them


def system_time(encoder, boot_ms: int) -> bytes:
    return encoder.system_time_encode(0, boot_ms).pack(encoder)


def test_on_udpin_the_link_writes_to_the_autopilots_address_alone_and_reads_no_one_else():
    """pymavlink's UDP server writes to every address that ever sent it a datagram: a stranger on the port would get
    every setpoint. The link locks to the address of the autopilot's heartbeat; while the autopilot is heard, another
    address's datagrams (the same system id spoofed included) are dropped unread; after a lost link the autopilot
    may come back from a new port (a restarted SITL)."""
    port = free_udp_port()
    link = MavlinkLink(f"udpin:127.0.0.1:{port}", "companion", link_timeout_s=1.0)
    link.start()
    autopilot, stranger, restarted = (socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(3))
    for s in (autopilot, stranger, restarted):
        s.bind(("127.0.0.1", 0))
        s.settimeout(0.05)

    def received(sock) -> int:
        n = 0
        try:
            while True:
                sock.recv(65535)
                n += 1
        except TimeoutError:
            return n

    try:
        stranger.sendto(statustext("before the autopilot"), ("127.0.0.1", port))  # read: nothing is locked yet
        autopilot.sendto(heartbeat(), ("127.0.0.1", port))
        until(lambda: link.state.system == 1, timeout=2.0)
        for _ in range(20):  # the same system id from another address, and garbage
            stranger.sendto(heartbeat(mode=5), ("127.0.0.1", port))
            stranger.sendto(bytes(range(40)), ("127.0.0.1", port))
        link.command(400, 1.0)  # a COMMAND_LONG, and the link's own heartbeats
        autopilot.sendto(statustext("from the autopilot"), ("127.0.0.1", port))
        until(lambda: "from the autopilot" in " ".join(link.statustext), timeout=2.0)
        assert link.state.foreign_datagrams == 40 and link.state.mode == "GUIDED"
        time.sleep(0.3)
        assert received(autopilot) >= 2  # the request for its version, the boot-clock request, our command
        assert received(stranger) == 0
        # the autopilot restarts on a new port: taken once the old address has been silent for the link's timeout
        restarted.sendto(heartbeat(mode=5), ("127.0.0.1", port))
        time.sleep(0.3)
        assert link.state.mode == "GUIDED"  # the old address is still heard from: ignored
        until(lambda: not link.link_ok(), timeout=3.0)
        time.sleep(1.0)  # its last datagram (the statustext) came after its last heartbeat
        restarted.sendto(heartbeat(mode=5), ("127.0.0.1", port))
        until(lambda: link.state.mode == "LOITER", timeout=2.0)
        received(autopilot)  # what went to the old address before the lock moved (the link's heartbeat)
        link.command(400, 1.0)
        time.sleep(0.3)
        assert received(restarted) >= 1 and received(autopilot) == 0 and received(stranger) == 0
    finally:
        for s in (autopilot, stranger, restarted):
            s.close()
        link.close()


def test_a_reboot_is_noticed_by_the_boot_clock_or_by_a_vehicle_back_disarmed(link):
    link, seen, send = link
    armed = ENCODER.heartbeat_encode(
        mavlink2.MAV_TYPE_QUADROTOR, mavlink2.MAV_AUTOPILOT_ARDUPILOTMEGA, 1 | 128, 4, mavlink2.MAV_STATE_ACTIVE
    ).pack(ENCODER)
    send(armed)
    until(lambda: link.state.armed, timeout=2.0)
    for ms in (60_000, 61_000, 60_900):  # a few ms out of order is not a reboot
        send(system_time(ENCODER, ms))
    until(lambda: link.state.boot_ms == 60_900, timeout=2.0)
    assert link.state.reboots == 0
    send(system_time(ENCODER, 3_000))  # the boot clock went back: a reboot
    until(lambda: link.state.reboots == 1, timeout=2.0)
    assert "boot clock went back from 60.9 s to 3.0 s" in link.state.rebooted
    link.state.rebooted = None  # the owner's part (the actuator clears it when the host arms again)
    send(armed)
    time.sleep(3.3)  # the link is lost (3 s) ...
    send(heartbeat())  # ... and the vehicle comes back disarmed: rebooted without a clock seen going back
    until(lambda: link.state.reboots == 2, timeout=2.0)
    assert "came back disarmed after 3." in link.state.rebooted


def test_a_stranger_does_not_take_the_lock_while_the_autopilot_still_sends():
    """A flood that costs the autopilot its heartbeats (the link is lost) while its other messages still arrive: a
    stranger's heartbeat with the autopilot's ids does not move the lock to the stranger's address."""
    port = free_udp_port()
    link = MavlinkLink(f"udpin:127.0.0.1:{port}", "companion", link_timeout_s=1.0)
    link.start()
    autopilot, stranger = (socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(2))
    try:
        autopilot.sendto(heartbeat(), ("127.0.0.1", port))
        until(lambda: link.state.mode == "GUIDED", timeout=2.0)
        end = time.monotonic() + 1.6
        while time.monotonic() < end:  # no heartbeat for longer than the link's timeout, telemetry all along
            autopilot.sendto(statustext("still here"), ("127.0.0.1", port))
            stranger.sendto(heartbeat(mode=5), ("127.0.0.1", port))
            time.sleep(0.05)
        assert not link.link_ok() and link.state.mode == "GUIDED"
        assert link.state.foreign_datagrams >= 20
    finally:
        autopilot.close()
        stranger.close()
        link.close()
