"""A cap on simultaneously connected TCP peers, which libzmq does not offer.

Every connection may hold a partly received frame (up to the socket's ZMQ_MAXMSGSIZE) and a few
queued messages (ZMQ_RCVHWM), so the device's memory is bounded only if the number of connections
is. A thread watches the ROUTER socket's monitor (ZMQ_EVENT_ACCEPTED / DISCONNECTED carry the
connection's file descriptor) and shuts down the newest connections beyond the cap; libzmq then
sees the connection end and frees it. Shutting down a duplicate of the descriptor affects the
connection itself but leaves libzmq's descriptor valid until libzmq closes it, so nothing it owns
is closed under it. A thread rather than the request loop, so excess connections are cut within
microseconds even while the loop is busy loading a model.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import TypedDict

import zmq
from zmq.utils.monitor import parse_monitor_message

log = logging.getLogger("firmware_bridge.peers")

_EVENTS = zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED | zmq.EVENT_CLOSED | zmq.EVENT_MONITOR_STOPPED


class MonitorEvent(TypedDict):
    """What _apply reads of a parsed monitor message (pyzmq's own TypedDict also has the endpoint)."""

    event: int
    value: int  # for ACCEPTED / DISCONNECTED / CLOSED: the connection's file descriptor


class PeerLimiter:
    def __init__(self, router: zmq.Socket, max_peers: int) -> None:
        self.max_peers = max_peers
        self.refused = 0
        self._live: OrderedDict[int, None] = OrderedDict()  # fd -> None, in accept order
        self._lock = threading.Lock()
        self._monitor = router.get_monitor_socket(_EVENTS)
        self._monitor.setsockopt(zmq.LINGER, 0)
        self._router = router
        self._thread = threading.Thread(target=self._run, name="airq-peer-limit", daemon=True)
        self._thread.start()

    @property
    def connected(self) -> int:
        with self._lock:
            return len(self._live)

    def _run(self) -> None:
        monitor = self._monitor
        try:
            while True:
                events = [parse_monitor_message(monitor.recv_multipart())]
                # Drain what is queued before deciding: a descriptor closed and reused by a newer
                # connection shows up as DISCONNECTED then ACCEPTED for the same number.
                while monitor.poll(0):
                    events.append(parse_monitor_message(monitor.recv_multipart()))
                if any(e["event"] == zmq.EVENT_MONITOR_STOPPED for e in events):
                    return
                self._apply(events)
        except zmq.ZMQError:  # the context or socket went away: the bridge is stopping
            return
        finally:
            monitor.close(linger=0)

    def _apply(self, events: Sequence[MonitorEvent]) -> None:
        with self._lock:
            for event in events:
                fd = event["value"]
                if event["event"] == zmq.EVENT_ACCEPTED:
                    self._live[fd] = None
                    self._live.move_to_end(fd)
                elif event["event"] in (zmq.EVENT_DISCONNECTED, zmq.EVENT_CLOSED):
                    self._live.pop(fd, None)
            excess = []
            while len(self._live) > self.max_peers:
                fd, _ = self._live.popitem(last=True)  # the newest: established peers keep flying
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
                "refused a connection: %d peers already connected (--max-peers); %d refused so far",
                self.max_peers,
                self.refused,
            )

    def stop(self) -> None:
        try:
            self._router.disable_monitor()
        except zmq.ZMQError:
            pass
        self._thread.join(timeout=2)
