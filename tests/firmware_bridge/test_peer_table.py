"""The request loop's admission rules (firmware_bridge.peers.PeerTable), against a gate whose connections
the test opens and closes: first come first served, BUSY beyond the cap, a slot freed when its connection
closes, a request read after its connection closed dropped, and a descriptor reused by a newer connection
never lending the old peer's slot to the new one. The same rules over real sockets:
tests/firmware_bridge/test_protocol_conformance.py (section 6) and tests/reliability/test_peer_cap.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any, cast

import pytest
import zmq

from firmware_bridge.actuator import MockFlightController
from firmware_bridge.peers import ConnectionGate, PeerTable
from firmware_bridge.server import BridgeConfig, BridgeServer


class Connections:
    """What PeerTable reads of the gate: the live connection (serial) on each descriptor."""

    def __init__(self) -> None:
        self.on_fd: dict[int, int] = {}
        self.next_serial = 1

    def accept(self, fd: int) -> int:
        self.on_fd[fd], self.next_serial = self.next_serial, self.next_serial + 1
        return self.on_fd[fd]

    def close(self, fd: int) -> None:
        del self.on_fd[fd]

    def serial_of(self, fd: int) -> int | None:
        return self.on_fd.get(fd)

    def is_live(self, serial: int) -> bool:
        return serial in self.on_fd.values()


def table(max_peers: int) -> tuple[PeerTable, Connections]:
    connections = Connections()
    return PeerTable(cast(ConnectionGate, cast(Any, connections)), max_peers), connections


def test_first_come_first_served_and_busy_beyond_the_cap() -> None:
    peers, connections = table(2)
    for fd in (10, 11, 12):
        connections.accept(fd)
    assert peers.admit(b"a", 10) is True and peers.admit(b"b", 11) is True
    assert peers.admit(b"c", 12) is False and peers.busy_replies == 1
    assert peers.is_admitted(b"a") and not peers.is_admitted(b"c")
    # Asked again at its next request: still full.
    assert peers.admit(b"c", 12) is False


def test_a_slot_frees_when_its_connection_closes_and_the_refused_peer_is_served_next() -> None:
    peers, connections = table(1)
    connections.accept(10)
    connections.accept(11)
    assert peers.admit(b"a", 10) is True and peers.admit(b"b", 11) is False
    connections.close(10)
    assert not peers.is_admitted(b"a") and peers.count == 0
    assert peers.admit(b"b", 11) is True


def test_a_request_read_after_its_connection_closed_is_dropped() -> None:
    peers, connections = table(4)
    connections.accept(10)
    connections.close(10)
    assert peers.admit(b"gone", 10) is None and peers.dropped_closed == 1 and peers.count == 0


def test_an_admitted_peer_whose_connection_closed_is_not_admitted_any_more() -> None:
    peers, connections = table(4)
    connections.accept(10)
    assert peers.admit(b"a", 10) is True
    connections.close(10)
    assert not peers.is_admitted(b"a")  # the loop then asks admit(), which drops it
    assert peers.admit(b"a", 10) is None


def test_a_reused_descriptor_does_not_keep_a_dead_peer_in_its_slot() -> None:
    # The old peer's first request is read only after its connection closed and a newer connection got
    # the same descriptor: the old peer is bound to the newer connection. When the newer connection's own
    # peer arrives, one connection cannot be two peers: the older binding is the dead one and goes.
    peers, connections = table(1)
    connections.accept(10)
    connections.close(10)
    connections.accept(10)
    assert peers.admit(b"old", 10) is True
    assert peers.admit(b"new", 10) is True and not peers.is_admitted(b"old") and peers.count == 1


def test_the_bridge_refuses_a_context_with_more_than_one_io_thread() -> None:
    # With two I/O threads a handshake could reach the gate before the gate sees its connection's accept.
    context = zmq.Context(io_threads=2)
    try:
        with pytest.raises(ValueError, match="exactly one I/O thread"):
            BridgeServer(BridgeConfig(bind="tcp://127.0.0.1:*"), MockFlightController(), context)
    finally:
        context.term()


CLIENT = """
import sys, zmq
sys.stdin.readline()  # connect when told
socket = zmq.Context().socket(zmq.DEALER)
socket.setsockopt(zmq.LINGER, 0)
socket.connect(sys.argv[1])
socket.send_multipart([b"", sys.argv[2].encode()])
sys.exit(0 if socket.poll(20_000) else 1)
"""


def test_a_reused_descriptor_is_told_apart_while_the_gate_thread_runs_late() -> None:
    # Real connections on a real ROUTER, admitted by descriptor number from the gate's monitor. The gate's
    # thread is made to stop 0.3 s between its two reads and after answering (its test hook), as a descheduled thread would. The
    # clients live in other processes, so that the bridge side's descriptors are the only ones this process
    # opens: the second connection gets the first one's number. Its first request must still be told apart:
    # admitted under a connection serial of its own, the first peer's slot freed, nothing dropped.
    context = zmq.Context()
    router = context.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    gate = ConnectionGate(router, context, max_connections=4, pause_s=0.3)
    clients: list[subprocess.Popen[bytes]] = []
    try:
        router.bind("tcp://127.0.0.1:*")
        endpoint = router.getsockopt_string(zmq.LAST_ENDPOINT)
        peers = PeerTable(gate, max_peers=1)

        def start_client(name: bytes) -> subprocess.Popen[bytes]:
            clients.append(
                subprocess.Popen([sys.executable, "-c", CLIENT, endpoint, name.decode()], stdin=subprocess.PIPE)
            )
            return clients[-1]

        def serve_one(name: bytes, client: subprocess.Popen[bytes]) -> tuple[bytes, int]:
            assert client.stdin is not None
            client.stdin.write(b"go\n")
            client.stdin.flush()
            assert router.poll(20_000), f"no request from client {name!r}"
            first = router.recv(copy=False)
            *_, payload = router.recv_multipart()
            assert payload == name
            routing_id, fd = first.bytes, cast(int, first.get(zmq.SRCFD))
            admitted = peers.admit(routing_id, fd)
            router.send_multipart([routing_id, b"", b"ok"])
            assert client.wait(20) == 0
            assert admitted is True, f"client {name!r} was {'dropped' if admitted is None else 'refused'}"
            return routing_id, fd

        first, second = start_client(b"first"), start_client(b"second")
        first_id, first_fd = serve_one(b"first", first)
        first_serial = peers.admitted[first_id]
        # The second client connects as soon as the gate has seen the first one go, so that its accept and its
        # handshake come while the gate's thread is in its pause; libzmq closes the descriptor just after.
        deadline = time.monotonic() + 20
        while gate.serial_of(first_fd) is not None or os.path.exists(f"/proc/self/fd/{first_fd}"):
            assert time.monotonic() < deadline, "the first connection never closed"
            time.sleep(0.001)
        second_id, second_fd = serve_one(b"second", second)
        assert second_fd == first_fd, "precondition: the second connection reuses the first one's descriptor"
        assert peers.admitted[second_id] != first_serial
        assert not peers.is_admitted(first_id) and peers.count == 1
        assert peers.dropped_closed == 0 and peers.busy_replies == 0
    finally:
        for client in clients:
            client.kill()
            client.wait()
        gate.stop()
        router.close(linger=0)
        context.term()
