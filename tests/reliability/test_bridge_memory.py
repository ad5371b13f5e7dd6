"""Many peers holding partial large frames cannot grow the bridge's memory past the documented bound.

docs/protocol.md section 6: each connection holds at most one partial frame of max_message_bytes +
TRANSPORT_SLACK_BYTES and RCVHWM_MESSAGES complete messages, connections are capped at twice --max-peers
(newer ones are closed at once), and uploads go through one staging buffer of --max-model-bytes.
Without the cap, 8 raw peers each holding a 32 MiB frame one byte short take the bridge from 68 to
324 MiB RSS on this kind of machine.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from reliability_helpers import rss_bytes
from zmtp_peer import RawZmtpPeer

from firmware_bridge.client import BridgeClient
from firmware_bridge.launcher import BridgeProcess
from firmware_bridge.protocol import (
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_MAX_PEERS,
    RCVHWM_MESSAGES,
    TRANSPORT_SLACK_BYTES,
    sha256_hex,
)
from firmware_bridge.toy_policy import build_mlp_policy

MIB = 1 << 20
FRAME_LIMIT = DEFAULT_MAX_MESSAGE_BYTES + TRANSPORT_SLACK_BYTES
# The documented bound on what connections can hold, plus allocator slack (libzmq and glibc keep a
# little per connection beyond the frame itself).
MAX_CONNECTIONS = 2 * DEFAULT_MAX_PEERS
CONNECTION_BOUND = MAX_CONNECTIONS * (RCVHWM_MESSAGES + 1) * FRAME_LIMIT + 8 * MIB


def port_of(bridge: BridgeProcess) -> int:
    return int(bridge.endpoint.rsplit(":", 1)[1])


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "toy.onnx"
    path.write_bytes(build_mlp_policy(64, hidden=32, n_actions=5, seed=3))
    return path


def attack(port: int, peers: int, declared: int) -> list[RawZmtpPeer]:
    held = []
    for _ in range(peers):
        try:
            peer = RawZmtpPeer("127.0.0.1", port, timeout_s=2.0)
        except (OSError, ConnectionError):
            continue  # closed by the cap during the handshake
        peer.partial_frame(declared, declared - 1)
        held.append(peer)
    time.sleep(1.0)  # let libzmq read what it will
    return held


def test_many_peers_holding_partial_frames_stay_within_the_bound(model: Path) -> None:
    with BridgeProcess(["--policy", str(model), "--log-level", "error"]) as bridge:
        baseline = rss_bytes(bridge.pid)
        peers = attack(port_of(bridge), 3 * MAX_CONNECTIONS, FRAME_LIMIT)
        try:
            grown = rss_bytes(bridge.pid) - baseline
            alive = sum(peer.alive() for peer in peers)
            print(f"{len(peers)} peers held, {alive} alive; RSS grew {grown / MIB:.1f} MiB")
            assert alive <= MAX_CONNECTIONS, f"{alive} connections held, cap is {MAX_CONNECTIONS}"
            assert grown <= CONNECTION_BOUND, f"RSS grew {grown / MIB:.1f} MiB, bound {CONNECTION_BOUND / MIB:.1f}"
        finally:
            for peer in peers:
                peer.close()
        # Once they leave, a real client is served as before.
        time.sleep(0.3)
        with BridgeClient(bridge.endpoint, timeout_s=5.0) as client:
            status = client.status()
            assert status.peers["refused"] >= 2 * MAX_CONNECTIONS
            assert status.peers["max"] == DEFAULT_MAX_PEERS
            assert status.peers["max_connections"] == MAX_CONNECTIONS
            assert isinstance(client.act(np.zeros(64, np.float32)).action, int)


def test_frames_over_the_message_limit_are_never_buffered(model: Path) -> None:
    # The attack: 8 peers x a 32 MiB frame one byte short (+256 MiB before): dropped at the header.
    with BridgeProcess(["--policy", str(model), "--log-level", "error"]) as bridge:
        baseline = rss_bytes(bridge.pid)
        peers = attack(port_of(bridge), 8, 32 * MIB)
        try:
            grown = rss_bytes(bridge.pid) - baseline
            print(f"8 peers announcing 32 MiB frames: RSS grew {grown / MIB:.2f} MiB")
            assert grown < 8 * MIB
            assert not any(peer.alive() for peer in peers)
        finally:
            for peer in peers:
                peer.close()


def test_a_small_cap_is_enforced_and_established_peers_keep_flying(model: Path) -> None:
    with (
        BridgeProcess(["--policy", str(model), "--max-peers", "3", "--log-level", "error"]) as bridge,
        BridgeClient(bridge.endpoint, timeout_s=5.0) as client,
    ):
        client.hello()  # our connection is established first: the cap sheds the newest
        peers = attack(port_of(bridge), 12, 1024)
        try:
            assert sum(peer.alive() for peer in peers) <= 5  # 6 connections minus ours (the launcher's has left)
            status = client.status()
            assert status.peers["connected"] <= 6 and status.peers["refused"] >= 7
            assert isinstance(client.act(np.zeros(64, np.float32)).action, int)
        finally:
            for peer in peers:
                peer.close()


def test_large_model_uploads_in_chunks_through_one_bounded_buffer(tmp_path: Path) -> None:
    # A 2.2 MB model through 256 KiB messages, while another peer holds a partial frame.
    big = build_mlp_policy(1032, hidden=512, n_actions=25, seed=4)
    assert len(big) > 8 * DEFAULT_MAX_MESSAGE_BYTES
    with BridgeProcess(["--log-level", "error"]) as bridge, BridgeClient(bridge.endpoint, timeout_s=10.0) as client:
        squatter = attack(port_of(bridge), 1, FRAME_LIMIT)
        try:
            loaded = client.load_policy(big, name="big")
            assert loaded.sha256 == sha256_hex(big) and loaded.reply["received"] == len(big)
            assert client.status().peers["upload_staged_bytes"] == 0
        finally:
            for peer in squatter:
                peer.close()
