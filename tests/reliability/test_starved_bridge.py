"""Every request read from a live connection is answered, however starved the bridge's CPU (docs/protocol.md
sections 1 and 6), and a peer that never reads its replies cannot grow the bridge.

libzmq's ROUTER drops a reply silently when it believes the peer's pipe holds ZMQ_SNDHWM unread replies. It
learns what the peer has read from commands the I/O thread posts every SNDHWM/2 replies, and processes them only
when its receive has to wait, on every 100th receive, or on a send ~1 ms of CPU ticks after the last processing.
A bridge that finds the next request already queued whenever it comes back to receive (its peer pipelines, or
its own thread lost the CPU inside the send while the peer answered) goes SNDHWM replies without processing
them, and without ZMQ_ROUTER_MANDATORY the next reply vanished: on a 2-core Xeon VM the bridge before the fix
lost a reply in 5 of 5 runs of the pipelining client below (idle machine) and in 3 of 3 runs of the waiting
client under the CPU hogs below. firmware_bridge.server.BridgeServer.send_reply makes the socket process its
commands and sends again; each such reply is counted in status (peers.replies_retried).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import zmq
from reliability_helpers import RawDealer, rss_bytes

from firmware_bridge.launcher import BridgeProcess
from firmware_bridge.protocol import DEFAULT_MAX_PEERS, SNDHWM_MESSAGES, pack, unpack
from firmware_bridge.toy_policy import build_mlp_policy

# The longest any reply may take. Measured (these tests run with -s on a 2-core Xeon VM, beside the whole suite
# under `make test-stress`): the slowest of 10,000 replies took 15-33 ms; 10 s is 300x that, room for a CI
# machine whose other worker trains at the same time.
REPLY_TIMEOUT_MS = 10_000
REQUESTS = 10_000
MIB = 1 << 20


@contextmanager
def cpu_hogs(count: int) -> Iterator[None]:
    """``count`` processes spinning on the CPU, as the rest of a busy Raspberry Pi would."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def pin(pid: int, cpus: set[int]) -> None:
    """Every thread of ``pid`` (the bridge's request loop, libzmq's I/O thread, the gate) onto ``cpus``."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        os.sched_setaffinity(int(tid), cpus)


def status(endpoint: str) -> dict:
    peer = RawDealer(endpoint)
    try:
        reply = peer.call({"v": 1, "type": "status", "seq": 1}, REPLY_TIMEOUT_MS)
    finally:
        peer.close()
    assert reply is not None, "no reply to status"
    return reply


def exchange(endpoint: str, kind: str, count: int, in_flight: int) -> list[float]:
    """``count`` requests from one DEALER that keeps ``in_flight`` of them unanswered at most (1: it waits for
    each reply) and reads every reply; fails at the first reply missing or out of order. The reply times (s)."""
    socket = zmq.Context.instance().socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    socket.connect(endpoint)
    sent_at: dict[int, float] = {}
    took: list[float] = []
    answered = 0
    try:
        while answered < count:
            while len(sent_at) < in_flight and answered + len(sent_at) < count:
                seq = answered + len(sent_at) + 1
                sent_at[seq] = time.perf_counter()
                socket.send_multipart([b"", pack({"v": 1, "type": kind, "seq": seq})])
            assert socket.poll(REPLY_TIMEOUT_MS), (
                f"request {answered + 1} of {count} not answered in {REPLY_TIMEOUT_MS} ms "
                f"({answered} answered, {len(sent_at)} in flight)"
            )
            reply = unpack(socket.recv_multipart()[-1])
            assert reply["seq"] == answered + 1, f"reply {reply['seq']} came for request {answered + 1}: lost"
            assert reply["type"] == kind, reply
            took.append(time.perf_counter() - sent_at.pop(answered + 1))
            answered += 1
    finally:
        socket.close(linger=0)
    return took


def summary(took: list[float]) -> str:
    ordered = sorted(took)
    return f"p50 {ordered[len(ordered) // 2] * 1e3:.2f} ms, max {ordered[-1] * 1e3:.1f} ms"


@pytest.fixture
def bridge() -> Iterator[BridgeProcess]:
    with BridgeProcess(["--log-level", "warning"]) as running:
        yield running


def test_a_pipelining_client_gets_every_reply(bridge: BridgeProcess) -> None:
    # 64 requests in flight: the bridge always finds the next one queued, never waits in its receive, and
    # sends its small replies far faster than one per SNDHWM/2 ms.
    took = exchange(bridge.endpoint, "reset", REQUESTS, in_flight=64)
    peers = status(bridge.endpoint)["peers"]
    print(
        f"{REQUESTS} pipelined resets answered ({summary(took)}); resent after a stale count: {peers['replies_retried']}"
    )
    assert peers["replies_dropped_unread"] == 0 and peers["replies_dropped_closed"] == 0


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs: the bridge on one, the client free")
def test_a_client_that_waits_for_each_reply_gets_every_reply_from_a_starved_bridge(bridge: BridgeProcess) -> None:
    assert bridge.pid is not None
    cpu = min(os.sched_getaffinity(0))
    pin(bridge.pid, {cpu})
    requests_before = status(bridge.endpoint)["counters"]["requests"]
    with cpu_hogs(2 * len(os.sched_getaffinity(0))):
        took = exchange(bridge.endpoint, "hello", REQUESTS, in_flight=1)
        answered_under_load = status(bridge.endpoint)
    peers = answered_under_load["peers"]
    print(
        f"{REQUESTS} hellos, each waiting for its reply, bridge on CPU {cpu} with hogs: all answered "
        f"({summary(took)}); resent after a stale count: {peers['replies_retried']}"
    )
    assert answered_under_load["counters"]["requests"] - requests_before == REQUESTS + 1  # + the status itself
    assert peers["replies_dropped_unread"] == 0 and peers["replies_dropped_closed"] == 0


def test_a_peer_that_never_reads_its_replies_cannot_grow_the_bridge(bridge: BridgeProcess) -> None:
    # A small receive buffer and queue on the peer's side, so that the replies back up into the bridge: once
    # the kernel's buffers are full, libzmq's pipe to the peer holds SNDHWM replies and the rest are dropped,
    # counted and logged; the bridge keeps serving everyone else.
    assert bridge.pid is not None
    before = rss_bytes(bridge.pid)
    socket = zmq.Context.instance().socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    socket.setsockopt(zmq.RCVHWM, 1)
    socket.setsockopt(zmq.RCVBUF, 4096)
    socket.connect(bridge.endpoint)
    try:
        hello = pack({"v": 1, "type": "hello", "seq": 1})
        deadline = time.monotonic() + 120
        dropped = 0
        while dropped < 100:
            for _ in range(1000):
                socket.send_multipart([b"", hello])
            dropped = status(bridge.endpoint)["peers"]["replies_dropped_unread"]
            assert time.monotonic() < deadline, f"the bridge dropped only {dropped} replies to a peer that never reads"
        grown = rss_bytes(bridge.pid) - before
        print(f"{dropped} replies dropped to a peer that never reads; bridge RSS grew {grown / MIB:.1f} MiB")
        # SNDHWM queued replies of ~2 KiB each, plus allocator slack: far below 8 MiB.
        assert grown < 8 * MIB
        assert exchange(bridge.endpoint, "hello", 100, in_flight=1)  # everyone else is still served
    finally:
        socket.close(linger=0)
    log = bridge.stderr_text()
    assert f"reply dropped: the peer has {SNDHWM_MESSAGES} replies unread" in log


def act(seq: int, observation: np.ndarray) -> bytes:
    return pack({"v": 1, "type": "act", "seq": seq, "obs": observation.astype("<f4").tobytes(), "shape": [8]})


def test_fifty_req_and_fifty_dealer_clients_beyond_the_peer_cap_on_a_busy_cpu(tmp_path: Path) -> None:
    # 50 REQ clients (a firmware's plain request/reply socket, one thread each) sending 10 acts one at a time and
    # 50 DEALERs pipelining 20 acts each, 100 peers against --max-peers 32 (64 connections), with a CPU hog per
    # core. Every request is answered, with its action or BUSY, and the vehicle moved exactly once per answered
    # act: nothing executed without its reply. Clients close when done, which frees slots for the others.
    model = tmp_path / "policy.onnx"
    model.write_bytes(build_mlp_policy(8, 16, n_actions=4, seed=3))
    observation = np.linspace(-1, 1, 8, dtype=np.float32)
    answers: dict[str, int] = {"act": 0, "BUSY": 0, "other": 0}
    lock = threading.Lock()
    failures: list[str] = []

    def tally(reply: dict) -> None:
        with lock:
            kind = "act" if reply["type"] == "act" else reply.get("code", "other")
            answers[kind if kind in answers else "other"] += 1

    def client(kind: int, endpoint: str) -> None:
        """REQ: 10 acts, each sent once the one before is answered; DEALER: 20 sent at once, then read."""
        name, count = ("REQ", 10) if kind == zmq.REQ else ("DEALER", 20)
        socket = zmq.Context.instance().socket(kind)
        socket.setsockopt(zmq.LINGER, 0)
        socket.connect(endpoint)
        try:
            if kind == zmq.DEALER:
                for seq in range(1, count + 1):
                    socket.send_multipart([b"", act(seq, observation)])
            for seq in range(1, count + 1):
                if kind == zmq.REQ:
                    socket.send(act(seq, observation))
                if not socket.poll(120_000):
                    failures.append(f"{name}: no reply to act {seq}")
                    return
                reply = unpack(socket.recv_multipart()[-1])
                if reply["seq"] != seq:
                    failures.append(f"{name}: reply {reply['seq']} to act {seq}")
                tally(reply)
        finally:
            socket.close(linger=0)

    with BridgeProcess(["--policy", str(model), "--log-level", "warning"]) as bridge:
        before = status(bridge.endpoint)
        with cpu_hogs(len(os.sched_getaffinity(0))):
            clients = [
                threading.Thread(target=client, args=(kind, bridge.endpoint)) for kind in (zmq.REQ, zmq.DEALER) * 50
            ]
            for client in clients:
                client.start()
            for client in clients:
                client.join()
            after = status(bridge.endpoint)
    sent = 50 * 10 + 50 * 20
    executed = after["counters"]["acts"] - before["counters"]["acts"]
    moved = after["actuator"]["commands_total"] - before["actuator"]["commands_total"]
    print(
        f"{sent} acts from 50 REQ + 50 DEALER clients (--max-peers {DEFAULT_MAX_PEERS}), a hog per core: "
        f"{answers['act']} answered with an action, {answers['BUSY']} BUSY, {answers['other']} other; "
        f"{executed} executed, {moved} setpoints; executed without a reply: {executed - answers['act']}"
    )
    assert not failures, failures[:5]
    assert answers["act"] + answers["BUSY"] == sent and answers["other"] == 0
    assert executed == moved == answers["act"]
    assert after["peers"]["replies_dropped_unread"] == 0
