"""The bridge's MAVLink side under hostile input: the bridge process (``--actuator mavlink --fc udpin:...``) flies acts
to an autopilot peer (mavlink_peer.py, ArduCopter's behaviour) while a fuzzer floods its port at 10,000 messages a
second, from the autopilot's own address and from a stranger's: random bytes, frames cut short, bad CRCs, wrong
lengths, MAVLink 1 beside MAVLink 2, unknown message ids, several frames in one datagram, heartbeats of a second
autopilot and of a ground station, and the autopilot's own system id with a pilot's mode from the stranger's address.

What must hold (docs/autopilot.md, "Faults"), checked in three phases under the flood:
- the bridge neither dies nor grows: its resident memory after the flood within 16 MB of before;
- it commands only the autopilot it locked onto: every setpoint the peer records targets system 1, and the stranger
  receives nothing at all;
- flying: every act is answered and sends exactly one setpoint, the spoofed mode never shows;
- a pilot's mode (LOITER on the RC switch): acts are answered with ``vehicle.control == "pilot"`` and send nothing,
  and the host's loop counts them (``pilot_acts``);
- a reboot (2 s of silence, a new boot clock, disarmed): acts are refused VEHICLE_LINK naming the reboot and send
  nothing, until the host sets the mode and arms again with vehicle requests.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import socket
import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pymavlink", reason="the mavlink actuator needs the mavlink extra (make installs it)")

from pymavlink.dialects.v10 import ardupilotmega as mavlink1  # noqa: E402
from pymavlink.dialects.v20 import ardupilotmega as mavlink2  # noqa: E402

from firmware_bridge.client import BridgeClient, BridgeRefused  # noqa: E402
from hil.loop import ControlLink  # noqa: E402
from tests.firmware_bridge.mavlink_peer import ARDUCOPTER_MODES, AutopilotPeer  # noqa: E402
from tests.firmware_bridge.test_mavlink_actuator import free_udp_port, until  # noqa: E402

RATE_PER_S = 10_000  # the flood's messages per second
MIN_MESSAGES = 10_000
MEMORY_GROWTH_LIMIT = 16 * 2**20
OBS = np.zeros(1032, np.float32)


def encoders() -> dict[str, object]:
    return {
        "autopilot": mavlink2.MAVLink(None, srcSystem=1, srcComponent=1),
        "autopilot_v1": mavlink1.MAVLink(None, srcSystem=1, srcComponent=1),
        "gimbal": mavlink2.MAVLink(None, srcSystem=1, srcComponent=154),  # its own boot clock, not the autopilot's
        "gimbal_v1": mavlink1.MAVLink(None, srcSystem=1, srcComponent=154),
        "second": mavlink2.MAVLink(None, srcSystem=2, srcComponent=1),
        "second_v1": mavlink1.MAVLink(None, srcSystem=2, srcComponent=1),
        "gcs": mavlink2.MAVLink(None, srcSystem=255, srcComponent=190),
    }


def hostile_datagrams(rng: random.Random, n: int) -> tuple[list[bytes], list[bytes]]:
    """``n`` datagrams of every kind the module docstring names: (from the autopilot's address, from a stranger's).
    Nothing from the autopilot's address is a valid message of the autopilot's own component (without signing the
    link cannot tell those from the autopilot's): its system's valid messages there come from another component
    (a gimbal, with a boot clock of its own)."""
    enc = encoders()

    def heartbeat(e, mode: int, kind: int = mavlink2.MAV_TYPE_QUADROTOR) -> bytes:
        autopilot = mavlink2.MAV_AUTOPILOT_INVALID if kind == mavlink2.MAV_TYPE_GCS else 3
        return e.heartbeat_encode(kind, autopilot, 1 | 128, mode, 4).pack(e)

    def telemetry(e) -> bytes:
        return e.attitude_encode(rng.randrange(2**31), *(rng.uniform(-1, 1) for _ in range(6))).pack(e)

    def unknown_id(e) -> bytes:
        frame = bytearray(telemetry(e))
        frame[7:10] = rng.randrange(20_000, 2**24).to_bytes(3, "little")  # MAVLink 2's msgid, CRC now wrong too
        return bytes(frame)

    def damaged(frame: bytes) -> bytes:
        frame = bytearray(frame)
        how = rng.randrange(3)
        if how == 0:
            frame[-1] ^= 0xFF  # the CRC
        elif how == 1:
            frame[1] = (frame[1] + rng.randrange(1, 256)) % 256  # the length, never the right one
        else:
            frame = frame[: rng.randrange(1, len(frame))]  # cut short
        return bytes(frame)

    guided, loiter = ARDUCOPTER_MODES["GUIDED"], ARDUCOPTER_MODES["LOITER"]
    from_autopilot = [
        lambda: bytes(rng.randrange(256) for _ in range(rng.randrange(1, 280))),
        lambda: bytes([0xFD, 255]) + bytes(rng.randrange(256) for _ in range(28)),  # claims 255 bytes, has 28
        lambda: damaged(heartbeat(enc["autopilot"], loiter)),
        lambda: damaged(telemetry(enc["autopilot_v1"])),
        lambda: unknown_id(enc["autopilot"]),
        lambda: telemetry(enc["gimbal"]),
        lambda: heartbeat(enc["second"], loiter),
        lambda: heartbeat(enc["second_v1"], guided),
        lambda: heartbeat(enc["gcs"], 0, mavlink2.MAV_TYPE_GCS),
        lambda: telemetry(enc["gimbal"]) + telemetry(enc["gimbal_v1"]) + heartbeat(enc["second"], 5),
        lambda: enc["second"].command_ack_encode(400, 0).pack(enc["second"]),
    ]
    from_stranger = [
        lambda: heartbeat(enc["autopilot"], loiter),  # the autopilot's system id, a pilot's mode
        lambda: heartbeat(enc["autopilot_v1"], ARDUCOPTER_MODES["STABILIZE"]),
        lambda: enc["autopilot"].command_ack_encode(400, 0).pack(enc["autopilot"]),
        lambda: heartbeat(enc["second"], guided),
        lambda: bytes(rng.randrange(256) for _ in range(rng.randrange(1, 280))),
    ]
    a = [rng.choice(from_autopilot)() for _ in range(n // 2)]
    b = [rng.choice(from_stranger)() for _ in range(n - n // 2)]
    return a, b


class Flood:
    """Sends the datagrams at RATE_PER_S, alternating the two sources, round and round until stopped, from a process
    of its own (forked, so it sends from the same sockets): the flood then takes no share of this process's
    interpreter lock from the peer and the link under attack, which live here."""

    def __init__(self, autopilot_socket: socket.socket, stranger: socket.socket, port: int, seed: int) -> None:
        self.datagrams = hostile_datagrams(random.Random(seed), 20_000)
        self.sockets = (autopilot_socket, stranger)
        self.target = ("127.0.0.1", port)
        context = multiprocessing.get_context("fork")
        self._sent = context.Value("q", 0, lock=False)
        self._stop = context.Event()
        self._process = context.Process(target=self._run, daemon=True)

    @property
    def sent(self) -> int:
        return int(self._sent.value)

    def start(self) -> Flood:
        self._process.start()
        return self

    def _run(self) -> None:
        start = time.monotonic()
        a, b = self.datagrams
        sent = 0
        while not self._stop.is_set():
            due = int((time.monotonic() - start) * RATE_PER_S)
            while sent < due:
                i = sent // 2 % len(a)
                sock, data = (self.sockets[0], a[i]) if sent % 2 == 0 else (self.sockets[1], b[i])
                sock.sendto(data, self.target)
                sent += 1
            self._sent.value = sent
            time.sleep(0.001)

    def stop(self) -> None:
        self._stop.set()
        self._process.join(timeout=5)
        if self._process.is_alive():
            self._process.kill()


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_the_bridge_commands_only_its_autopilot_under_a_hostile_flood(start_bridge, discrete_model_file):
    port = free_udp_port()
    bridge = start_bridge(
        "--policy", str(discrete_model_file), "--actuator", "mavlink", "--fc", f"udpin:127.0.0.1:{port}"
    )  # fmt: skip
    peer = AutopilotPeer("ardupilot", port, connect=True)
    stranger = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    stranger.bind(("127.0.0.1", 0))
    stranger.settimeout(0.01)
    client = BridgeClient(bridge.endpoint)
    flood = None
    try:
        until(lambda: client.status().actuator.get("autopilot") == "ardupilot", timeout=15)
        assert client.vehicle("mode", mode="GUIDED")["vehicle"]["mode"] == "GUIDED"
        assert client.vehicle("arm")["vehicle"]["armed"] is True
        client.act(OBS)  # the bridge's first act: its memory settles
        memory_before = rss_bytes(bridge.pid)
        flood = Flood(peer.link.port, stranger, port, seed=0).start()

        # flying: every act answered, one setpoint each, the stranger's LOITER never shows (a machine stalled past the
        # watchdog's 200 ms between two acts adds the hold's zero setpoint, which the status counts apart)
        sent, holds = len(peer.state.setpoints), client.status().actuator["hold_setpoints_sent"]
        acts = 0
        while flood.sent < MIN_MESSAGES // 2 or acts < 20:
            result = client.act(OBS)
            assert result.vehicle["mode"] == "GUIDED" and result.vehicle["control"] == "bridge"
            acts += 1
            time.sleep(0.05)
        held = client.status().actuator["hold_setpoints_sent"] - holds
        try:
            until(lambda: len(peer.state.setpoints) == sent + acts + held, timeout=2)
        except AssertionError:
            raise AssertionError(
                f"{len(peer.state.setpoints) - sent} setpoints for {acts} acts and {held} holds"
            ) from None

        # a pilot's mode: answered, nothing sent
        peer.set_mode("LOITER")
        until(lambda: client.act(OBS).vehicle["control"] == "pilot", timeout=3)
        time.sleep(0.2)
        sent = len(peer.state.setpoints)
        events: list[dict] = []
        link = ControlLink(client, deadline_s=2.0, on_event=events.append)  # the host's loop counts them
        for _ in range(20):
            result = link.act(OBS)
            assert result is not None and result.vehicle["mode"] == "LOITER" and result.vehicle["control"] == "pilot"
            time.sleep(0.05)
        time.sleep(0.2)
        assert len(peer.state.setpoints) == sent
        assert link.stats.pilot_acts == 20 and [e["event"] for e in events] == ["pilot_has_control"]
        assert peer.state.mode == "LOITER"  # not taken back

        # a reboot: refused until the host arms again
        peer.set_mode("GUIDED")
        until(lambda: client.act(OBS).vehicle["control"] == "bridge", timeout=3)
        threading.Thread(target=peer.reboot, args=(2.0,), daemon=True).start()
        time.sleep(0.1)
        up_again = time.monotonic() + 1.9
        with pytest.raises(BridgeRefused, match="VEHICLE_LINK: the autopilot rebooted"):
            end = time.monotonic() + 6
            while time.monotonic() < end:
                client.act(OBS)
                time.sleep(0.05)
        noticed_after_s = time.monotonic() - up_again
        sent = len(peer.state.setpoints)
        for _ in range(5):
            with pytest.raises(BridgeRefused, match="VEHICLE_LINK: the autopilot rebooted"):
                client.act(OBS)
        assert client.vehicle("mode", mode="GUIDED")["vehicle"]["mode"] == "GUIDED"
        with pytest.raises(BridgeRefused, match="VEHICLE_LINK: the autopilot rebooted"):
            client.act(OBS)  # a mode is not enough
        assert len(peer.state.setpoints) == sent
        assert client.vehicle("arm")["vehicle"]["armed"] is True
        assert client.act(OBS).vehicle["control"] == "bridge"
        until(lambda: len(peer.state.setpoints) == sent + 1, timeout=2)
        while flood.sent < MIN_MESSAGES:
            client.act(OBS)
            time.sleep(0.05)
        flood.stop()

        status = client.status().actuator
        assert bridge.alive
        assert rss_bytes(bridge.pid) - memory_before < MEMORY_GROWTH_LIMIT
        assert {sp.target for sp in peer.state.setpoints} == {(1, 1)}
        with pytest.raises(TimeoutError):
            stranger.recv(65535)  # nothing the bridge sent went to the stranger
        assert status["reboots"] == 1 and status["foreign_datagrams"] > 0 and status["foreign_messages"] > 0
        assert status["setpoints_withheld"] >= 20
        print(
            f"fuzz: {flood.sent} datagrams, reboot noticed {noticed_after_s:.2f} s after the autopilot was back, "
            f"{status['foreign_datagrams']} stranger datagrams and {status['foreign_messages']} other systems' "
            f"messages ignored, memory {(rss_bytes(bridge.pid) - memory_before) / 2**20:+.1f} MB"
        )
    finally:
        if flood is not None:
            flood.stop()
        client.close()
        stranger.close()
        peer.close()
    assert peer.state.errors == []


def test_the_hosts_ground_station_link_takes_the_pose_of_its_autopilot_alone_under_the_flood():
    """The host's side (hil.run --backend autopilot's telemetry, nav_env.autopilot.Telemetry) under the same flood,
    plus poses far from the vehicle from every source but the autopilot: another component of its system, a second
    autopilot, and the autopilot's own ids from a stranger's address. The pose keeps streaming and is the vehicle's."""
    from nav_env.autopilot import Telemetry

    port, gcs_port = free_udp_port(), free_udp_port()
    peer = AutopilotPeer("ardupilot", port, gcs_port=gcs_port)
    telemetry = Telemetry(f"udpout:127.0.0.1:{gcs_port}")
    stranger = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    stranger.bind(("127.0.0.1", 0))
    flood = None
    try:
        telemetry.wait_streaming(10)
        enc = encoders()

        def far_pose(encoder, x: float) -> bytes:
            return encoder.local_position_ned_encode(10**6, x, x, -x, 0, 0, 0).pack(encoder)

        gimbal, second = enc["gimbal"], enc["second"]
        flood = Flood(peer.gcs.port, stranger, telemetry.link.conn.port.getsockname()[1], seed=1)
        from_autopilot, from_stranger = flood.datagrams
        from_autopilot[::50] = [far_pose(gimbal, 1000.0), far_pose(second, 2000.0)] * (len(from_autopilot[::50]) // 2)
        from_stranger[::50] = [far_pose(enc["autopilot"], 3000.0)] * len(from_stranger[::50])
        memory_before = rss_bytes(os.getpid())
        flood.start()
        poses = 0
        end = time.monotonic() + 4.0
        while time.monotonic() < end or flood.sent < MIN_MESSAGES:
            pose = telemetry.wait_pose_after(telemetry.pose.time_ms, timeout_s=2.0)
            assert abs(pose.position_ned).max() < 100.0, pose  # the peer's vehicle stands at home
            poses += 1
        flood.stop()
        assert poses >= 4.0 * 50 * 0.5  # the 50 Hz stream kept coming (at least half of it, on a loaded CI runner)
        assert telemetry.state.foreign_messages > 0 and telemetry.state.foreign_datagrams > 0
        assert rss_bytes(os.getpid()) - memory_before < MEMORY_GROWTH_LIMIT
    finally:
        if flood is not None:
            flood.stop()
        telemetry.close()
        stranger.close()
        peer.close()
