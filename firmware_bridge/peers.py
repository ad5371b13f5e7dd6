"""Who may talk to the bridge, and who may fly it (docs/protocol.md sections 1 and 6).

Three layers, each closing what the one below leaves open:

1. **Connections** (:class:`ConnectionGate`, a thread). Every TCP connection may hold a partly
   received frame (up to ZMQ_MAXMSGSIZE) and RCVHWM queued messages, so the device's memory is
   bounded only if the number of connections is; libzmq has no such cap. The gate watches the
   ROUTER socket's monitor (ZMQ_EVENT_ACCEPTED / DISCONNECTED carry the connection's file
   descriptor) and shuts down the newest connections beyond ``max_connections``. Shutting down a
   duplicate of the descriptor ends the connection but leaves libzmq's descriptor valid until
   libzmq closes it, so nothing libzmq owns is closed under it.

   A shutdown does not stop libzmq from reading what the kernel has already buffered, so a shed
   connection could still finish its handshake and deliver requests. The gate is therefore also the
   socket's ZAP handler (RFC 27): libzmq asks it about every handshake, NULL mechanism included
   (the socket sets a ZAP domain), and no message of a connection reaches the socket before the
   answer. The gate cannot tell which connection a ZAP request belongs to, so while any shed
   connection is still open it holds every request unanswered; once they have closed it answers
   the held ones, and an answer meant for a shed connection reaches nobody. One thread serves both
   the monitor and ZAP so that, when it answers, it has seen the accept of every connection that can
   be asking: with the context's single I/O thread, libzmq emits a connection's accept event before
   that connection can reach ZAP. With CurveZMQ keys the gate also admits only the allowed client
   keys (ZAP 400 otherwise).

2. **Peers** (:class:`PeerTable`, in the request loop). A peer is one connection (one ROUTER
   routing id). The first ``max_peers`` peers are admitted, first come first served; a request from
   any other peer gets one BUSY error reply and never reaches dispatch. Admission is retried at each
   request of a refused peer, so it is served as soon as a slot frees. An admitted peer keeps its
   slot for as long as its connection lives: newcomers never evict it, however long it idles.

3. **Liveness**: ZMTP heartbeats (server.py) make libzmq close a connection whose peer has gone
   silent, which the monitor reports; the peer table binds each peer to its connection (the
   descriptor the message came from, ZMQ_SRCFD, and the gate's serial number for that
   descriptor's current connection) and frees the slot once that connection is gone. A request
   that arrives on a connection already closed is dropped: nobody would receive its reply.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import TypedDict

import zmq
from zmq.utils import z85
from zmq.utils.monitor import parse_monitor_message

log = logging.getLogger("firmware_bridge.peers")

_EVENTS = zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED | zmq.EVENT_CLOSED | zmq.EVENT_MONITOR_STOPPED
ZAP_ENDPOINT = "inproc://zeromq.zap.01"  # fixed by RFC 27: libzmq sends every ZAP request here
ZAP_DOMAIN = b"airq"
# A shed connection that libzmq has not reported closed after this long is forgotten: its handshake
# interval (HANDSHAKE_TIMEOUT_MS) has closed it by then, so the gate must not stay shut on a lost event.
SHED_FORGET_NS = 10_000_000_000


class MonitorEvent(TypedDict):
    """What the gate reads of a parsed monitor message (pyzmq's own TypedDict also has the endpoint)."""

    event: int
    value: int  # for ACCEPTED / DISCONNECTED / CLOSED: the connection's file descriptor


class ConnectionGate:
    """The connection cap and the ZAP handler, in one thread (see the module docstring)."""

    def __init__(
        self,
        router: zmq.Socket,
        context: zmq.Context,
        max_connections: int,
        curve_client_keys: frozenset[bytes] | None = None,
        *,
        pause_s: float = 0.0,
    ) -> None:
        self.max_connections = max_connections
        # Test hook: the gate's thread stops this long between its two reads (the ZAP requests, the monitor)
        # and after answering, as a thread descheduled there would (tests/firmware_bridge/test_peer_table.py).
        self.pause_s = pause_s
        self.refused = 0  # connections shed by the cap
        self.handshakes_refused = 0  # ZAP refusals: unknown CurveZMQ keys
        self._curve_client_keys = curve_client_keys  # z85 public keys; None: NULL mechanism, no keys
        # fd -> serial of the connection on it, in accept order; serials never repeat, fds do.
        self._live: OrderedDict[int, int] = OrderedDict()
        self._live_serials: set[int] = set()
        self._next_serial = 1
        self._closing: dict[int, int] = {}  # fd of a shed connection -> monotonic ns it was shed
        self._lock = threading.Lock()
        self._zap = context.socket(zmq.ROUTER)  # not REP: requests are held while shed connections close
        self._zap.setsockopt(zmq.LINGER, 0)
        self._zap.bind(ZAP_ENDPOINT)
        router.setsockopt(zmq.ZAP_DOMAIN, ZAP_DOMAIN)
        self._monitor = router.get_monitor_socket(_EVENTS)
        self._monitor.setsockopt(zmq.LINGER, 0)
        self._router = router
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="airq-connection-gate", daemon=True)
        self._thread.start()

    # -------------------------------------------------------------- read by the request loop

    @property
    def connected(self) -> int:
        with self._lock:
            return len(self._live)

    def serial_of(self, fd: int) -> int | None:
        """The serial of the live connection on ``fd``, or None if no live connection has it."""
        with self._lock:
            return self._live.get(fd)

    def is_live(self, serial: int) -> bool:
        return serial in self._live_serials  # one set lookup (atomic under the GIL): on the act path

    # -------------------------------------------------------------- the thread

    def _run(self) -> None:
        monitor, zap = self._monitor, self._zap
        poller = zmq.Poller()
        poller.register(monitor, zmq.POLLIN)
        poller.register(zap, zmq.POLLIN)
        held: list[list[bytes]] = []  # ZAP requests waiting for the shed connections to close
        try:
            while not self._stop.is_set():
                poller.poll(5 if held else 100)
                # ZAP requests first, then the monitor: libzmq emits a connection's accept (and, before
                # that, the disconnect of whatever held its descriptor before) ahead of its ZAP request,
                # so the drain after the read has applied the accept of every held handshake, however
                # late this thread runs. Read the other way round, a handshake whose accept came after
                # the drain would be answered first, and its first request would find its descriptor
                # unknown or still bound to the connection that had it before.
                while zap.poll(0):
                    held.append(zap.recv_multipart())
                if self.pause_s:
                    time.sleep(self.pause_s)
                if not self._drain_monitor():
                    return
                # Each held handshake is either a connection within the cap or a shed one; answered only
                # once no shed connection is still open, a shed one's answer reaches nobody.
                if held and not self._shed_still_open():
                    for request in held:
                        self._answer_zap(request)
                    held.clear()
                    if self.pause_s:
                        time.sleep(self.pause_s)
        except zmq.ZMQError:  # the context or socket went away: the bridge is stopping
            return
        finally:
            monitor.close(linger=0)
            zap.close(linger=0)

    def _shed_still_open(self) -> bool:
        with self._lock:
            now = time.monotonic_ns()
            for fd in [fd for fd, shed_ns in self._closing.items() if now - shed_ns > SHED_FORGET_NS]:
                del self._closing[fd]
            return bool(self._closing)

    def _drain_monitor(self) -> bool:
        """Apply every queued monitor event; False once the monitor has stopped."""
        events: list[MonitorEvent] = []
        while self._monitor.poll(0):
            events.append(parse_monitor_message(self._monitor.recv_multipart()))  # type: ignore[arg-type]
        if any(e["event"] == zmq.EVENT_MONITOR_STOPPED for e in events):
            return False
        if events:
            self._apply(events)
        return True

    def _apply(self, events: Sequence[MonitorEvent]) -> None:
        now = time.monotonic_ns()
        excess = []
        with self._lock:
            # The whole batch first: a descriptor closed and reused by a newer connection shows up
            # as DISCONNECTED then ACCEPTED for the same number.
            for event in events:
                fd = event["value"]
                if event["event"] == zmq.EVENT_ACCEPTED:
                    serial, self._next_serial = self._next_serial, self._next_serial + 1
                    self._live[fd] = serial
                    self._live_serials.add(serial)
                elif event["event"] in (zmq.EVENT_DISCONNECTED, zmq.EVENT_CLOSED):
                    serial_or_none = self._live.pop(fd, None)
                    if serial_or_none is not None:
                        self._live_serials.discard(serial_or_none)
                    self._closing.pop(fd, None)
            while len(self._live) > self.max_connections:
                fd, serial = self._live.popitem(last=True)  # the newest: established peers keep flying
                self._live_serials.discard(serial)
                self._closing[fd] = now
                excess.append(fd)
        for fd in excess:
            self._shed(fd)

    def _shed(self, fd: int) -> None:
        try:
            duplicate = socket.socket(fileno=os.dup(fd))
        except OSError:
            return  # already closed by libzmq
        try:
            duplicate.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        finally:
            duplicate.close()
        self.refused += 1
        if self.refused <= 10 or self.refused % 1000 == 0:
            log.warning(
                "refused a connection: %d connections already open (twice --max-peers); %d refused so far",
                self.max_connections,
                self.refused,
            )

    def _answer_zap(self, request: list[bytes]) -> None:
        """RFC 27, over a ROUTER: [routing id, b"", version, request id, domain, address, identity,
        mechanism, credentials...] in; [routing id, b"", version, request id, status, text, user id,
        metadata] out."""
        if len(request) < 8:
            return  # not a ZAP request libzmq would send: nothing waits for an answer
        envelope, (version, request_id, _domain, address, _identity, mechanism) = request[:2], request[2:8]
        credentials = request[8:]
        if self._curve_client_keys is not None and not (
            mechanism == b"CURVE" and credentials and z85.encode(credentials[0]) in self._curve_client_keys
        ):
            status, text = b"400", b"client key not allowed"
            self.handshakes_refused += 1
            log.warning(
                "refused a handshake from %s: its CurveZMQ key is not allowed", address.decode(errors="replace")
            )
        else:
            status, text = b"200", b"OK"
        self._zap.send_multipart([*envelope, version, request_id, status, text, b"", b""])

    def stop(self) -> None:
        self._stop.set()
        try:
            self._router.disable_monitor()
        except zmq.ZMQError:
            pass
        self._thread.join(timeout=2)


class PeerTable:
    """Admission of peers (routing ids) by the request loop; single-threaded (the loop's thread)."""

    def __init__(self, gate: ConnectionGate, max_peers: int) -> None:
        self.gate = gate
        self.max_peers = max_peers
        self.admitted: dict[bytes, int] = {}  # routing id -> the gate's serial of its connection
        self.busy_replies = 0  # requests refused with BUSY
        self.dropped_closed = 0  # requests read after their connection had closed: not dispatched

    def is_admitted(self, routing_id: bytes) -> bool:
        """The act path's check: an admitted peer whose connection still lives."""
        serial = self.admitted.get(routing_id)
        return serial is not None and self.gate.is_live(serial)

    def admit(self, routing_id: bytes, fd: int) -> bool | None:
        """For a request from a peer that is not admitted (is_admitted False): True if it is admitted
        now, False if it is refused (reply BUSY), None if its connection is gone (drop the request).

        ``fd``: the descriptor the request was read from (ZMQ_SRCFD of its first frame).
        """
        self.admitted.pop(routing_id, None)  # its connection closed: a reused routing id starts afresh
        serial = self.gate.serial_of(fd)
        if serial is None:
            self.dropped_closed += 1
            return None
        self._forget_dead()
        for other_id, other_serial in list(self.admitted.items()):
            if other_serial == serial:  # one connection, two routing ids: the older one's connection is gone
                del self.admitted[other_id]
        if len(self.admitted) >= self.max_peers:
            self.busy_replies += 1
            return False
        self.admitted[routing_id] = serial
        return True

    def _forget_dead(self) -> None:
        is_live = self.gate.is_live
        for routing_id in [rid for rid, serial in self.admitted.items() if not is_live(serial)]:
            del self.admitted[routing_id]

    @property
    def count(self) -> int:
        self._forget_dead()
        return len(self.admitted)
