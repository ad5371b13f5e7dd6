"""The client for the airq firmware bridge (protocol: docs/protocol.md): the one implementation.

The host's control loop (hil.loop, hil.run) uses it, and so do the device-side tools
(``firmware_bridge.bench``, the launcher's readiness probe) - which is why it lives in
firmware_bridge and, like the rest of the package, imports only the stdlib, numpy, pyzmq and msgpack
(through firmware_bridge.protocol and firmware_bridge.keys).

Reliability is "Lazy Pirate" from the ZeroMQ guide: send, poll for the reply
with a timeout, and on timeout close and reopen the socket and resend, up to
``retries`` times; then give up with :class:`BridgeUnreachable`. Every request
carries a ``seq`` and replies with another seq (a late answer to an earlier
request) are discarded. Not thread-safe: one client per thread, like the
ZeroMQ socket inside it.

Retried requests may execute twice on the bridge. That is harmless for every
message type: act/load_policy/status/hello are idempotent for the same input,
and a doubled reset only starts one more (empty) episode.

Inside the control loop :meth:`BridgeClient.act_within` is used instead: one
attempt with a hard deadline (the control period), ``None`` on a miss, no
retry - a late action is a wrong action; the loop applies its fail-safe and
sends the *next* observation. The socket is ZMQ_IMMEDIATE, so while the bridge
is down requests are refused at once instead of queueing up and being replayed
as a burst of stale acts when it comes back.

At most one request is in flight on a connection: a request whose predecessor on the same socket is
still unanswered first waits (within its own deadline) for that late reply, and is not sent if it
does not come - an act then misses, a Lazy Pirate attempt reopens the socket. So a stalled link never
piles up requests that the bridge would execute as a burst of stale acts once it delivers them; and
no connection holds more requests than the bridge's receive queue takes (``ZMQ_RCVHWM`` 2). That
matters beyond staleness: libzmq 4.3.5 aborts the bridge's whole process (``Assertion failed:
!_io_error (src/stream_engine_base.cpp:310)``) when a connection whose input it stopped because
requests were queued behind a full receive queue is closed by its peer and the ZMTP heartbeat timer
fires before the bridge's thread has read them - which is what a Lazy Pirate reconnect after a
stall did to the bridge on a loaded machine (docs/reliability.md, "A stall under load").

When the client gives up (:class:`BridgeUnreachable`), it asks the bridge for its ``status`` over a
fresh connection within ``status_probe_s`` and says in the same line what the bridge reports (requests
received, BUSY replies, requests and replies dropped) or that no status could be read either.

With a :class:`~firmware_bridge.keys.ClientCurve` the connection is CurveZMQ:
encrypted, and only completed if the bridge proves it holds the expected key.

Waiting for a reply: for the first ``spin_us`` microseconds after a request the client checks the
socket without blocking (yielding the CPU between checks), and only then blocks in poll(). A reply
that lands while the thread is asleep must first wake it, and on a VM an idle vCPU that halted
takes tens of microseconds to wake - several such wake-ups (this thread, ZeroMQ's I/O threads on
both ends) were most of the bridge's overhead in the closed loop. Checking keeps this core awake
and the reply is picked up within a few microseconds. The yield hands the core to any other runnable
thread (the bridge, ZeroMQ's I/O threads), so the spin only uses CPU nobody else wants; when a yield
shows that another thread did want it (a contended CPU), the client stops spinning and blocks, for
that wait and, backing off, for the next ones. Nor does it spin while acts typically take longer
than ``spin_us`` (moving average of their round trips). The last sub-millisecond of a deadline is waited the
same way, since poll() only waits in whole milliseconds.
"""

from __future__ import annotations

import ipaddress
import os
import socket as pysocket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar, cast

import numpy as np
import zmq
from zmq.utils.monitor import recv_monitor_message

from firmware_bridge.keys import ClientCurve
from firmware_bridge.protocol import (
    HEARTBEAT_IVL_MS,
    HEARTBEAT_TIMEOUT_MS,
    HEARTBEAT_TTL_MS,
    PROTOCOL_VERSION,
    SUPPORTED_VERSIONS,
    ErrorCode,
    MsgType,
    ProtocolError,
    decode_float32_bytes,
    encode_observation,
    pack,
    parse_tcp_endpoint,
    request,
    sha256_hex,
    unpack,
)

CLIENT_NAME = "airq-hil-client"
# How long to wait for a reply by checking without blocking before sleeping in poll() (see above).
# Covers the round trip of a small policy (~100-300 us here) with margin; 0 = always block. While acts
# typically take longer than this (a big policy), the client does not spin at all: spinning through
# the device's inference only takes CPU from it (in one A/B run on the 2-core VM Policy III fp32's
# inference took 40% longer while the client spun).
DEFAULT_SPIN_US = 1000.0
# One check-and-yield takes a few microseconds; a gap this long means the yield handed this core to
# another thread for a time slice (about 1.5 ms on the 2-core test VM; short blips of ~25 us, e.g. the
# bridge or ZeroMQ's I/O thread getting the core, are not contention): the CPU is contended, and there
# spinning loses (each yield can wait out another thread's slice, while a blocked thread is woken
# promptly). Such a wait stops spinning, and so do the next 1, 2, 4 ... SPIN_BACKOFF_MAX waits while it
# keeps happening; each uncontended spin halves the backoff.
CONTENDED_GAP_NS = 200_000
SPIN_BACKOFF_MAX = 256
_POLLIN = zmq.POLLIN
_EVENTS = zmq.EVENTS  # an int option; pyzmq types every getsockopt() as int | bytes, hence cast(int, ...) below
_sched_yield = getattr(os, "sched_yield", lambda: None)
Parsed = TypeVar("Parsed")


class BridgeError(Exception):
    """Anything that went wrong talking to the bridge. ``str()`` is one line naming the endpoint."""

    def __init__(self, endpoint: str, message: str) -> None:
        super().__init__(message)
        self.endpoint = endpoint


class BridgeUnresolvable(BridgeError):
    """The endpoint's hostname does not resolve."""


class BridgeUnreachable(BridgeError):
    """No reply within the timeout after all retries (bridge down, wrong port, network)."""


class BridgeProtocolError(BridgeError):
    """The reply does not follow the protocol (not msgpack, wrong type, wrong version)."""


# A vehicle command waits on the bridge for the autopilot's acknowledgement (5 s at most) and, for a mode change,
# for the heartbeat that shows the new mode.
VEHICLE_COMMAND_TIMEOUT_S = 12.0

# Room a load_policy request needs beside its chunk of model bytes (msgpack keys, sha256, name, ints).
UPLOAD_ENVELOPE_BYTES = 1024

# How long a client that gave up waits for the bridge's status over a fresh connection, to say what the bridge
# reports (status_from). Short: it is added to the give-up; a bridge that answers status at all does within
# milliseconds when idle, and within about a second when it is busy with a long request or a starved CPU.
STATUS_PROBE_S = 1.0


class BridgeRefused(BridgeError):
    """The bridge answered with an error reply; ``code`` is a protocol ErrorCode."""

    def __init__(self, endpoint: str, code: str, detail: str, request_type: str) -> None:
        super().__init__(endpoint, f"bridge at {endpoint} refused {request_type}: {code}: {detail}")
        self.code = code
        self.detail = detail
        self.request_type = request_type


class BridgeBusy(BridgeRefused):
    """BUSY: the bridge already serves --max-peers other peers; the request was not executed.
    The connection stays open and is served once a slot frees (docs/protocol.md section 6)."""

    def __init__(self, endpoint: str, detail: str, request_type: str) -> None:
        super().__init__(endpoint, ErrorCode.BUSY, detail, request_type)


def refusal(endpoint: str, reply: dict[str, Any], request_type: str) -> BridgeRefused:
    """The exception for an error reply: BridgeBusy for BUSY, BridgeRefused for any other code."""
    code, detail = str(reply.get("code")), str(reply.get("message"))
    if code == ErrorCode.BUSY:
        return BridgeBusy(endpoint, detail, request_type)
    return BridgeRefused(endpoint, code, detail, request_type)


@dataclass(frozen=True, slots=True)
class ActResult:
    action: int | list[float]
    setpoint: list[float] | None  # [vx, vy, vz, yaw_rate] given to the actuator, None if not mapped
    infer_ns: int  # device: onnxruntime run time
    rtt_ns: int  # host: send to reply, this attempt
    seq: int
    recv_ns: int  # device time.monotonic_ns() when the request arrived
    send_ns: int  # device time.monotonic_ns() just before the reply was packed
    logits: np.ndarray | None  # float32 [n_actions] for discrete policies that export logits
    vehicle: dict[str, Any] | None = None  # the autopilot's state (autopilot, mode, armed, link_ok), None: mock

    @property
    def overhead_ns(self) -> int:
        """Round trip minus device inference: transport + (de)serialisation + bridge code."""
        return self.rtt_ns - self.infer_ns


class ReplyFieldError(ValueError):
    """A reply lacks a field the client reads, or holds it with another type than docs/protocol.md gives."""


def required_field(reply: dict[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    """``reply[key]``, which must be there and of ``kind`` (a bool is not an int here)."""
    if key not in reply:
        raise ReplyFieldError(f"lacks field {key!r}")
    return optional_field(reply, key, kind)


def optional_field(reply: dict[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    """``reply[key]`` if present and not nil (else None), of ``kind``."""
    value = reply.get(key)
    if value is not None and (not isinstance(value, kind) or (isinstance(value, bool) and kind is int)):
        raise ReplyFieldError(f"has field {key!r} of type {type(value).__name__}")
    return value


@dataclass(frozen=True, slots=True)
class PolicyInfo:
    """A policy loaded on the bridge: load_policy's reply, and the ``policy`` of hello (docs/protocol.md 4.2).
    The fields are what the host reads; ``reply`` is the map as the bridge sent it, for logs that keep it whole."""

    sha256: str
    size_bytes: int
    obs_dim: int
    action_space: str  # "discrete:N" or "box:N"
    name: str  # "" if the bridge sent none
    load_time_ns: int | None
    rss_delta_bytes: int | None  # None: the bridge could not measure it
    metadata: dict[str, str]  # the model's metadata_props, {} if none
    replaced_sha256: str | None  # the policy this upload replaced (load_policy only; None in hello)
    reply: dict[str, Any]

    @classmethod
    def from_reply(cls, reply: dict[str, Any]) -> PolicyInfo:
        """Parse the bridge's map; ReplyFieldError if sha256, size_bytes, obs_dim or action_space is missing, or a field is
        of the wrong type."""
        return cls(
            sha256=required_field(reply, "sha256", str),
            size_bytes=required_field(reply, "size_bytes", int),
            obs_dim=required_field(reply, "obs_dim", int),
            action_space=required_field(reply, "action_space", str),
            name=optional_field(reply, "name", str) or "",
            load_time_ns=optional_field(reply, "load_time_ns", int),
            rss_delta_bytes=optional_field(reply, "rss_delta_bytes", int),
            metadata=optional_field(reply, "metadata", dict) or {},
            replaced_sha256=optional_field(reply, "replaced_sha256", str),
            reply=reply,
        )

    def to_json(self) -> dict[str, Any]:
        """The reply as the bridge sent it (run.jsonl's ``policy_loaded`` event logs it so)."""
        return self.reply


@dataclass(frozen=True, slots=True)
class HelloReply:
    """The bridge's answer to hello (docs/protocol.md 4.1): the fields the host reads, and ``reply``, the map as
    the bridge sent it."""

    version: int  # the negotiated protocol version, one of SUPPORTED_VERSIONS
    bridge_version: str | None
    device: dict[str, Any] | None  # hostname, board, cores, int8_kernels, ...: reports copy it whole
    threads: int | None  # onnxruntime intra-op threads
    actuator: str | None  # the actuator kind, e.g. "mock"
    max_message_bytes: int | None  # None: the bridge states no limit
    max_model_bytes: int | None  # None: a bridge older than chunked uploads, whose limit is max_message_bytes
    policy: PolicyInfo | None  # the loaded policy, None if none is
    reply: dict[str, Any]

    @classmethod
    def from_reply(cls, reply: dict[str, Any]) -> HelloReply:
        """Parse the bridge's map; ReplyFieldError if ``version`` is missing, a field is of the wrong type or the
        ``policy`` lacks a field PolicyInfo needs."""
        policy = optional_field(reply, "policy", dict)
        try:
            info = None if policy is None else PolicyInfo.from_reply(policy)
        except ReplyFieldError as exc:
            raise ReplyFieldError(f"has a 'policy' that {exc}") from None
        return cls(
            version=required_field(reply, "version", int),
            bridge_version=optional_field(reply, "bridge_version", str),
            device=optional_field(reply, "device", dict),
            threads=optional_field(reply, "threads", int),
            actuator=optional_field(reply, "actuator", str),
            max_message_bytes=optional_field(reply, "max_message_bytes", int),
            max_model_bytes=optional_field(reply, "max_model_bytes", int),
            policy=info,
            reply=reply,
        )

    def to_json(self) -> dict[str, Any]:
        """The reply as the bridge sent it."""
        return self.reply


@dataclass(frozen=True, slots=True)
class BridgeStatus:
    """The bridge's answer to status (docs/protocol.md 4.4): the fields the host reads, and ``reply``, the map as
    the bridge sent it (the episode's counters, CPU time, ...). A figure the bridge does not report is None, or an
    empty map."""

    rss_bytes: int | None
    peak_rss_bytes: int | None
    model_rss_delta_bytes: int | None  # the loaded policy's share of rss_bytes, measured around its load
    uptime_s: float | None
    counters: dict[str, int]  # since the bridge started: requests, acts, errors, holds, loads, resets
    peers: dict[str, int]  # the peer table: admitted, max, busy_replies, replies_dropped_unread, ...
    actuator: dict[str, Any]  # section 7: kind; a MAVLink actuator's link_ok, autopilot, mode, armed, ...
    reply: dict[str, Any]

    @classmethod
    def from_reply(cls, reply: dict[str, Any]) -> BridgeStatus:
        """Parse the bridge's map; ReplyFieldError if a field is of the wrong type."""
        return cls(
            rss_bytes=optional_field(reply, "rss_bytes", int),
            peak_rss_bytes=optional_field(reply, "peak_rss_bytes", int),
            model_rss_delta_bytes=optional_field(reply, "model_rss_delta_bytes", int),
            uptime_s=optional_field(reply, "uptime_s", (int, float)),
            counters=optional_field(reply, "counters", dict) or {},
            peers=optional_field(reply, "peers", dict) or {},
            actuator=optional_field(reply, "actuator", dict) or {},
            reply=reply,
        )

    def describe(self) -> str:
        """The request counts in one clause: what was received, answered BUSY, dropped and why (a figure an older
        bridge does not report is left out)."""
        counters, peers = self.counters, self.peers
        parts = [
            f"{counters.get('requests', '?')} requests received (this one included), {counters.get('acts', '?')} acts"
        ]
        for key, text in (
            ("busy_replies", "BUSY replies (peer cap full)"),
            ("replies_dropped_unread", "replies dropped to a peer that did not read them (replies_dropped_unread)"),
            ("dropped_closed", "requests dropped because their connection had closed (dropped_closed)"),
            (
                "replies_dropped_closed",
                "replies dropped because their connection closed first (replies_dropped_closed)",
            ),
        ):
            if key in peers:
                parts.append(f"{peers[key]} {text}")
        if "admitted" in peers and "max" in peers:
            parts.append(f"{peers['admitted']} of {peers['max']} peers admitted")
        if self.uptime_s is not None:
            parts.append(f"up {self.uptime_s:.1f} s")
        return ", ".join(parts)


def resolve_host(host: str, port: int, timeout_s: float) -> None:
    """Raise OSError/TimeoutError if ``host`` doesn't resolve within timeout_s.

    ZeroMQ's connect() accepts any hostname and retries resolution forever in
    the background, so an unresolvable name would otherwise look like a plain
    timeout. getaddrinfo runs in a daemon thread because a broken resolver can
    block it far longer than we are willing to wait.
    """
    if host.startswith("["):
        return
    try:
        ipaddress.ip_address(host)
        return
    except ValueError:
        pass
    outcome: list[BaseException | None] = []

    def lookup() -> None:
        try:
            pysocket.getaddrinfo(host, port, type=pysocket.SOCK_STREAM)
            outcome.append(None)
        except OSError as exc:
            outcome.append(exc)

    worker = threading.Thread(target=lookup, name=f"resolve-{host}", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if not outcome:
        raise TimeoutError(f"name lookup took more than {timeout_s:.1f} s")
    if outcome[0] is not None:
        raise outcome[0]


class BridgeClient:
    def __init__(
        self,
        endpoint: str,
        timeout_s: float = 1.0,
        retries: int = 2,
        *,
        load_timeout_s: float = 30.0,
        resolve_timeout_s: float = 2.0,
        context: zmq.Context | None = None,
        curve: ClientCurve | None = None,
        spin_us: float = DEFAULT_SPIN_US,
        client_name: str = CLIENT_NAME,
        status_probe_s: float = STATUS_PROBE_S,
    ) -> None:
        if timeout_s <= 0 or load_timeout_s <= 0 or retries < 0:
            raise ValueError("timeouts must be positive and retries >= 0")
        if not status_probe_s >= 0:  # also refuses NaN
            raise ValueError(f"status_probe_s must be >= 0 seconds (0: no probe), got {status_probe_s!r}")
        if not spin_us >= 0:  # also refuses NaN
            raise ValueError(f"spin_us must be >= 0 microseconds, got {spin_us!r}")
        try:
            host, port = parse_tcp_endpoint(endpoint)
        except ValueError as exc:
            raise BridgeError(endpoint, f"bad bridge endpoint: {exc}") from None
        try:
            resolve_host(host, port or 0, resolve_timeout_s)
        except (OSError, TimeoutError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise BridgeUnresolvable(
                endpoint, f"cannot resolve host {host!r} of bridge endpoint {endpoint}: {reason}"
            ) from None
        self.endpoint = endpoint
        self.timeout_s = timeout_s
        self.retries_per_request = retries
        self.load_timeout_s = load_timeout_s
        self.curve = curve
        self.client_name = client_name  # sent in hello (free text; the bridge does not use it)
        # On giving up, the bound for reading the bridge's status over a fresh connection (0: do not ask). A caller
        # that retries BridgeUnreachable itself (hil.loop.ControlLink) turns it off and asks once when it gives up.
        self.status_probe_s = status_probe_s
        self._probing = False  # this client is a status probe: give up at once when the connection is refused
        self.spin_ns = int(spin_us * 1000)
        self.spin_waits = 0  # waits that started by spinning
        self.spin_backoffs = 0  # waits whose spin stopped because the CPU was contended
        self.act_rtt_ewma_ns = 0.0  # typical act round trip (moving average over ~8 acts)
        self._spin_skip = 0  # coming waits that block at once (contention backoff)
        self._spin_backoff = 1
        self.hello_reply: HelloReply | None = None
        self._seq = 0
        self._context = context or zmq.Context.instance()
        self._socket: zmq.Socket | None = None
        self._monitor: zmq.Socket | None = None
        # Connection state of the current socket, from its monitor; read to explain a timeout.
        self._connected = False
        self._connect_refused = False
        self._handshake_failed = False
        self._handshake_refusal = 0  # the ZAP status of a refused handshake (400: key not allowed)
        self._lost_since_ns = 0  # when the connection dropped with no reconnect attempt answered since
        self._reconnect_scheduled = False  # a disconnect's own CONNECT_RETRIED event is still to come
        self._in_flight: int | None = None  # seq of the request sent on this socket and not answered yet
        # Reliability counters, reported by hil.run.
        self.connections = 0  # TCP connections made, over all sockets: a change means "maybe a new bridge"
        self.disconnects = 0
        self.retries = 0  # requests re-sent after a timeout (Lazy Pirate)
        self.reconnects = 0  # sockets closed and reopened
        self.stale_replies = 0  # late replies to earlier requests, discarded by seq
        self.withheld = 0  # requests not sent because the one before them on this connection was still unanswered
        self._open()

    # ------------------------------------------------------------------ socket lifecycle

    def _open(self) -> None:
        sock = self._context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)  # a closed client must not hang the process on unsent requests
        sock.setsockopt(zmq.RECONNECT_IVL, 100)
        sock.setsockopt(zmq.RECONNECT_IVL_MAX, 1000)
        sock.setsockopt(zmq.IPV6, 1)  # so tcp://[::1]:5555 and AAAA-only names work too
        # Queue only on finished connections: nothing piles up while the bridge is away.
        sock.setsockopt(zmq.IMMEDIATE, 1)
        # ZMTP heartbeats (protocol.py): a bridge that vanished without closing the connection (power
        # loss, a Wi-Fi drop) is noticed within seconds, and then sends fail at once (IMMEDIATE).
        sock.setsockopt(zmq.HEARTBEAT_IVL, HEARTBEAT_IVL_MS)
        sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, HEARTBEAT_TIMEOUT_MS)
        sock.setsockopt(zmq.HEARTBEAT_TTL, HEARTBEAT_TTL_MS)
        if self.curve is not None:
            self.curve.apply(sock)
        # The monitor tells us *why* there was no reply (refused, silent, handshake failed) and
        # when the connection changed (a restarted bridge may have lost the policy).
        self._monitor = sock.get_monitor_socket(
            zmq.EVENT_CONNECTED
            | zmq.EVENT_CONNECT_RETRIED
            | zmq.EVENT_DISCONNECTED
            | zmq.EVENT_HANDSHAKE_FAILED_AUTH
            | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
            | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
        )
        self._connected = False
        self._connect_refused = False
        self._handshake_failed = False
        self._handshake_refusal = 0
        self._reconnect_scheduled = False
        self._in_flight = None  # a new connection: nothing of ours is queued on it
        sock.connect(self.endpoint)  # _lost_since_ns carries over: a fresh socket has not answered yet
        self._socket = sock

    def reconnect(self) -> None:
        """Lazy Pirate's remedy: drop the socket (and whatever it had queued) and connect afresh."""
        if self._socket is None:
            raise BridgeError(self.endpoint, f"client for {self.endpoint} is closed")
        self._drain_monitor()
        self._close_socket()
        self._open()
        self.reconnects += 1

    def _close_socket(self) -> None:
        if self._socket is not None:
            self._socket.disable_monitor()
            self._socket.close(linger=0)
            self._socket = None
        if self._monitor is not None:
            self._monitor.close(linger=0)
            self._monitor = None

    def _drain_monitor(self) -> None:
        # EVENTS, not poll(0): called twice per act, and poll builds a Poller each time
        while self._monitor is not None and cast(int, self._monitor.getsockopt(_EVENTS)) & _POLLIN:
            message = recv_monitor_message(self._monitor)
            event = message["event"]
            if event == zmq.EVENT_CONNECTED:
                self._connected, self._connect_refused, self._lost_since_ns = True, False, 0
                self._handshake_failed, self._handshake_refusal = False, 0
                self.connections += 1
            elif event == zmq.EVENT_DISCONNECTED:
                self._connected = False
                # A request in flight went with the connection: the bridge routes its reply to that connection,
                # so none can come over the next one, and nothing should wait for it.
                self._in_flight = None
                self._lost_since_ns = time.monotonic_ns()
                self._reconnect_scheduled = True
                self.disconnects += 1
            elif event == zmq.EVENT_CONNECT_RETRIED:
                if self._reconnect_scheduled:
                    # libzmq reports the reconnect it schedules after every disconnect this way too.
                    self._reconnect_scheduled = False
                else:  # a connect attempt failed: the host answered (refused), so the link is up
                    self._connect_refused, self._lost_since_ns = True, 0
            else:  # one of the handshake failures
                self._handshake_failed = True
                if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
                    self._handshake_refusal = int(message["value"])

    @property
    def connected(self) -> bool:
        """Whether the current socket has a TCP connection (as far as its monitor has said)."""
        self._drain_monitor()
        return self._connected

    def connection_count(self) -> int:
        """TCP connections made so far; if it changed since the policy was verified, verify again."""
        self._drain_monitor()
        return self.connections

    def close(self) -> None:
        self._close_socket()

    def __enter__(self) -> BridgeClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # ------------------------------------------------------------------ request/reply

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _send_by(self, payload: bytes, seq: int, deadline_ns: int, *, fail_fast: bool = False) -> bool:
        """Send once a connection can take it; False if none could before the deadline.

        One request in flight per connection (module docstring): if the previous request on this socket is
        still unanswered, wait for its late reply until the deadline first; if it does not come, this request
        is withheld (False).

        With ZMQ_IMMEDIATE a DEALER has no pipe until a connection is up, so a send right after
        connect() (or while the bridge is down) raises Again; POLLOUT says when one is ready.
        ``fail_fast``: give up at once if the monitor says there is no TCP connection (the bridge
        died or the link dropped) - waiting out the deadline would only delay the fail-safe.
        """
        sock = self._socket
        assert sock is not None
        if self._in_flight is not None:
            self._drain_monitor()  # a disconnect since the request went out clears it
        if self._in_flight is not None and not self._late_reply_by(deadline_ns):
            self.withheld += 1
            return False
        while True:
            try:
                # Empty first frame: the REQ-style envelope.
                sock.send_multipart([b"", payload], flags=zmq.NOBLOCK)
                self._in_flight = seq
                return True
            except zmq.Again:
                if fail_fast and not self.connected:
                    return False
                if self._probing and not self.connected and self._connect_refused:
                    return False  # a status probe gives up as soon as the connection is refused
                remaining_ms = (deadline_ns - time.perf_counter_ns()) // 1_000_000
                if remaining_ms <= 0:
                    return False
                # a probe looks at the monitor again every 20 ms; anyone else waits for a pipe in one poll
                if not sock.poll(min(remaining_ms, 20) if self._probing else remaining_ms, zmq.POLLOUT):
                    if not self._probing:
                        return False

    def _late_reply_by(self, deadline_ns: int) -> bool:
        """Wait until the deadline for the reply to the request in flight on this socket; True once it came (a late
        reply, its caller gave up on it: counted as stale and dropped) or the connection that carried it dropped."""
        sock = self._socket
        assert sock is not None
        while self._in_flight is not None:
            remaining_ms = (deadline_ns - time.perf_counter_ns()) // 1_000_000
            # in slices, to see a disconnect (which drops the request in flight) without waiting out the deadline
            if not sock.poll(min(max(remaining_ms, 0), 50)):
                self._drain_monitor()
                if remaining_ms <= 0 and self._in_flight is not None:
                    return False
                continue
            reply = self._read_reply(sock.recv_multipart())
            reply_seq = reply.get("seq")
            if reply_seq == self._in_flight or (reply_seq is None and reply.get("type") == MsgType.ERROR):
                self._in_flight = None
            self.stale_replies += 1
        return True

    def _read_reply(self, frames: list[bytes]) -> dict[str, Any]:
        try:
            return unpack(frames[-1])
        except ProtocolError as exc:
            raise BridgeProtocolError(
                self.endpoint, f"bridge at {self.endpoint} sent an unreadable reply: {exc.message}"
            ) from None

    def _reply_by(self, seq: int, sent_ns: int, deadline_ns: int) -> tuple[dict[str, Any], int] | None:
        """The reply to ``seq`` if it arrives before the deadline; stale replies are dropped."""
        sock = self._socket
        assert sock is not None
        clock = time.perf_counter_ns
        # Check without blocking until spin_end, and again in the last millisecond before the deadline.
        spin_ns = self.spin_ns
        if self._spin_skip:
            self._spin_skip -= 1
            spin_ns = 0
        elif self.act_rtt_ewma_ns > spin_ns:
            spin_ns = 0  # replies usually come after the spin would end: spinning would only take CPU
        elif spin_ns:
            self.spin_waits += 1
        spin_end = min(sent_ns + spin_ns, deadline_ns)
        block_end = deadline_ns - 1_000_000
        last = clock()
        while (now := clock()) < deadline_ns:
            if now < spin_end or now >= block_end:
                if now - last > CONTENDED_GAP_NS and now < spin_end:
                    spin_end = now  # another thread had this core: block from here on (see CONTENDED_GAP_NS)
                    self._spin_contended()
                last = now
                if not cast(int, sock.getsockopt(_EVENTS)) & _POLLIN:
                    _sched_yield()
                    continue
                if now < spin_end and self._spin_backoff > 1:
                    self._spin_backoff //= 2  # answered within an uncontended spin: ease the backoff
            elif not sock.poll(max(1, (block_end - now) // 1_000_000)):  # whole ms, ends by the deadline
                continue
            frames = sock.recv_multipart()
            rtt_ns = clock() - sent_ns
            reply = self._read_reply(frames)
            reply_seq = reply.get("seq")
            # seq None = the bridge could not read our seq; with one request in flight it is ours.
            if reply_seq == seq or (reply_seq is None and reply.get("type") == MsgType.ERROR):
                self._in_flight = None
                if sent_ns + rtt_ns > deadline_ns:
                    # poll() waits in whole milliseconds, so a reply can land after a sub-millisecond
                    # deadline: it is late all the same, and a late action must not be applied
                    self.stale_replies += 1
                    return None
                return reply, rtt_ns
            self.stale_replies += 1  # a late reply to an earlier request; keep waiting for ours
        return None

    def _spin_contended(self) -> None:
        self.spin_backoffs += 1
        self._spin_skip = self._spin_backoff
        self._spin_backoff = min(2 * self._spin_backoff, SPIN_BACKOFF_MAX)

    def _roundtrip(self, msg_type: str, seq: int, payload: bytes, timeout_s: float) -> tuple[dict[str, Any], int]:
        """Lazy Pirate: (reply, round-trip ns of the answered attempt) or BridgeUnreachable."""
        if self._socket is None:
            raise BridgeError(self.endpoint, f"client for {self.endpoint} is closed")
        attempts = 1 + self.retries_per_request
        for attempt in range(attempts):
            if attempt:
                self.retries += 1
            sent_ns = time.perf_counter_ns()
            deadline_ns = sent_ns + int(timeout_s * 1e9)
            if self._send_by(payload, seq, deadline_ns):
                answered = self._reply_by(seq, sent_ns, deadline_ns)
                if answered is not None:
                    return answered
            self._drain_monitor()
            if attempt + 1 < attempts:
                # A fresh socket drops requests queued on a dead connection (Lazy Pirate).
                self.reconnect()
        self._drain_monitor()
        why = self._why_no_reply()
        # A CurveZMQ refusal would refuse a new connection the same way: no status to ask for.
        says = "" if self._handshake_failed or not self.status_probe_s else f"; {self.status_from()}"
        raise BridgeUnreachable(
            self.endpoint,
            f"no reply from bridge at {self.endpoint} to {msg_type} after {attempts} attempt(s) "
            f"of {timeout_s:g} s: {why}{says}",
        )

    def status_from(self, timeout_s: float | None = None) -> str:
        """What the bridge says about itself, asked over a fresh connection (this one's may be the problem) within
        ``timeout_s`` (default ``status_probe_s``): one clause for an error line, or that no status could be read."""
        bound = self.status_probe_s if timeout_s is None else timeout_s
        try:
            probe = BridgeClient(
                self.endpoint,
                timeout_s=max(bound, 1e-3),
                retries=0,
                context=self._context,
                curve=self.curve,
                spin_us=0,
                client_name=f"{self.client_name} (status probe)",
                status_probe_s=0,
            )
        except BridgeError as exc:
            return f"no status could be read either ({exc})"
        probe._probing = True
        try:
            with probe:
                return f"the bridge is alive; its status over a new connection says: {probe.status().describe()}"
        except BridgeBusy:
            return "the bridge is alive but answers a new connection BUSY: its peer cap (--max-peers) is full"
        except BridgeUnreachable:
            probe._drain_monitor()
            return f"no status could be read over a new connection within {bound:g} s either: {probe._why_no_reply()}"
        except BridgeError as exc:
            return f"no status could be read over a new connection either: {exc}"

    def _why_no_reply(self) -> str:
        if self._handshake_refusal == 400:
            return "the bridge refused this host's CurveZMQ key (not among its allowed clients)"
        if self._handshake_failed and self.curve is None:
            return (
                "the bridge closed the connection during the handshake: its connection cap (twice --max-peers) "
                "is full, or it is not an airq bridge"
            )
        if self._handshake_failed or (self.curve is not None and self._connected):
            return (
                "CurveZMQ handshake did not complete (the bridge's key is not the one given, this host's key "
                "is not among the bridge's allowed clients, or the bridge runs without keys)"
            )
        if self._lost_since_ns:
            return (
                f"heartbeat lost: the connection dropped and nothing has answered since "
                f"(the bridge stopped answering ZMTP heartbeats for {HEARTBEAT_TIMEOUT_MS / 1000:g} s, or "
                "the link went down: Wi-Fi, power?)"
            )
        if self._connected:
            return "TCP connection was made but the bridge did not answer (busy, or not an airq bridge?)"
        if self._connect_refused:
            return "connection refused (nothing listening on that port - is the bridge running?)"
        return "no TCP connection could be made (host down, wrong address or firewalled?)"

    def _call(self, msg_type: str, timeout_s: float | None = None, **fields: Any) -> tuple[dict[str, Any], int]:
        seq = self._next_seq()
        payload = pack(request(msg_type, seq, **fields))
        reply, rtt_ns = self._roundtrip(msg_type, seq, payload, timeout_s or self.timeout_s)
        reply_type = reply.get("type")
        if reply_type == MsgType.ERROR:
            raise refusal(self.endpoint, reply, msg_type)
        if reply_type != msg_type:
            raise BridgeProtocolError(
                self.endpoint, f"bridge at {self.endpoint} answered {msg_type} with type {reply_type!r}"
            )
        return reply, rtt_ns

    # ------------------------------------------------------------------ API

    def hello(self, timeout_s: float | None = None) -> HelloReply:
        """Negotiate the protocol version; returns device info, limits and the loaded policy.
        ``timeout_s``: per attempt, instead of the client's (a caller with a deadline bounds the retries)."""
        reply, _ = self._call(MsgType.HELLO, timeout_s, versions=list(SUPPORTED_VERSIONS), client=self.client_name)
        if reply.get("version") not in SUPPORTED_VERSIONS:
            raise BridgeProtocolError(
                self.endpoint, f"bridge at {self.endpoint} chose unsupported protocol version {reply.get('version')!r}"
            )
        self.hello_reply = self._parsed(HelloReply.from_reply, reply, MsgType.HELLO)
        return self.hello_reply

    def _parsed(self, parse: Callable[[dict[str, Any]], Parsed], reply: dict[str, Any], request_type: str) -> Parsed:
        """``parse(reply)``, a reply without a field the client reads being a BridgeProtocolError."""
        try:
            return parse(reply)
        except ReplyFieldError as exc:
            raise BridgeProtocolError(
                self.endpoint, f"bridge at {self.endpoint} answered {request_type} with a reply that {exc}"
            ) from None

    def reliability_counters(self) -> dict[str, int]:
        self._drain_monitor()
        return {
            "retries": self.retries,
            "reconnects": self.reconnects,
            "stale_replies": self.stale_replies,
            "connections": self.connections,
            "disconnects": self.disconnects,
        }

    def load_policy(self, path_or_bytes: str | Path | bytes, name: str | None = None) -> PolicyInfo:
        """Upload an ONNX policy; returns its summary (sha256, obs_dim, action space, load time...)."""
        if isinstance(path_or_bytes, bytes):
            onnx_bytes, label = path_or_bytes, name or ""
        else:
            path = Path(path_or_bytes)
            try:
                onnx_bytes = path.read_bytes()
            except OSError as exc:
                raise BridgeError(self.endpoint, f"cannot read policy {path}: {exc.strerror or exc}") from None
            label = name or path.name
        hello = self.hello_reply or self.hello()
        message_limit = hello.max_message_bytes
        # A bridge older than chunked uploads reports no max_model_bytes: its message limit is the model's.
        model_limit = message_limit if hello.max_model_bytes is None else hello.max_model_bytes
        if model_limit is not None and len(onnx_bytes) > model_limit:
            # Checked here too: past the bridge's transport limit it could only drop the connection.
            raise BridgeRefused(
                self.endpoint,
                ErrorCode.TOO_LARGE,
                f"policy is {len(onnx_bytes)} bytes, bridge limit is {model_limit}",
                MsgType.LOAD_POLICY,
            )
        digest = sha256_hex(onnx_bytes)
        if message_limit is None or len(onnx_bytes) + UPLOAD_ENVELOPE_BYTES <= message_limit:
            reply, _ = self._call(MsgType.LOAD_POLICY, self.load_timeout_s, onnx=onnx_bytes, sha256=digest, name=label)
        else:
            reply = self._upload_in_chunks(onnx_bytes, digest, label, message_limit - UPLOAD_ENVELOPE_BYTES)
        return self._parsed(PolicyInfo.from_reply, reply, MsgType.LOAD_POLICY)

    def _upload_in_chunks(self, onnx_bytes: bytes, digest: str, label: str, chunk_bytes: int) -> dict[str, Any]:
        """docs/protocol.md 4.2: chunks in order; the last one's reply is the loaded policy's summary.
        Each chunk is an ordinary request (Lazy Pirate resends are acknowledged by the bridge)."""
        size = len(onnx_bytes)
        for attempt in (1, 2):  # once more from the start if another upload replaced ours on the bridge
            try:
                offset = 0
                while True:
                    end = min(size, offset + chunk_bytes)
                    last = end == size
                    reply, _ = self._call(
                        MsgType.LOAD_POLICY,
                        self.load_timeout_s if last else self.timeout_s,
                        onnx=onnx_bytes[offset:end],
                        sha256=digest,
                        name=label,
                        size=size,
                        offset=offset,
                    )
                    if last:
                        return reply
                    offset = end
            except BridgeRefused as exc:
                if attempt == 2 or exc.code != ErrorCode.BAD_MESSAGE or "from offset 0" not in str(exc):
                    raise
        raise AssertionError("unreachable")

    def act(self, obs: np.ndarray) -> ActResult:
        """One observation ([obs_dim] or [1, obs_dim], cast to float32) -> action from the device."""
        data, shape = encode_observation(obs)
        seq = self._next_seq()
        payload = pack(
            {"v": PROTOCOL_VERSION, "type": MsgType.ACT, "seq": seq, "obs": data, "shape": shape, "dtype": "<f4"}
        )
        reply, rtt_ns = self._roundtrip(MsgType.ACT, seq, payload, self.timeout_s)
        return self._act_result(reply, rtt_ns, seq)

    def _act_result(self, reply: dict[str, Any], rtt_ns: int, seq: int) -> ActResult:
        self.act_rtt_ewma_ns += (rtt_ns - self.act_rtt_ewma_ns) / 8
        if reply.get("type") != MsgType.ACT:
            if reply.get("type") == MsgType.ERROR:
                raise refusal(self.endpoint, reply, MsgType.ACT)
            raise BridgeProtocolError(
                self.endpoint, f"bridge at {self.endpoint} answered act with type {reply.get('type')!r}"
            )
        return ActResult(
            action=reply["action"],
            setpoint=reply.get("setpoint"),
            infer_ns=reply["infer_ns"],
            rtt_ns=rtt_ns,
            seq=seq,
            recv_ns=reply["recv_ns"],
            send_ns=reply["send_ns"],
            logits=decode_float32_bytes(reply.get("logits")),
            vehicle=reply.get("vehicle"),
        )

    def act_within(self, obs: np.ndarray, timeout_s: float) -> ActResult | None:
        """One act with a hard deadline and no retry: the result, or None if it missed.

        For the control loop: a missed act is not retried (its observation is already old);
        its reply, should it still come, is discarded by seq at the next call. Error replies
        still raise BridgeRefused (e.g. NO_POLICY from a restarted bridge).
        """
        if self._socket is None:
            raise BridgeError(self.endpoint, f"client for {self.endpoint} is closed")
        data, shape = encode_observation(obs)
        seq = self._next_seq()
        payload = pack(
            {"v": PROTOCOL_VERSION, "type": MsgType.ACT, "seq": seq, "obs": data, "shape": shape, "dtype": "<f4"}
        )
        sent_ns = time.perf_counter_ns()
        deadline_ns = sent_ns + int(timeout_s * 1e9)
        if not self._send_by(payload, seq, deadline_ns, fail_fast=True):
            return None
        answered = self._reply_by(seq, sent_ns, deadline_ns)
        if answered is None:
            return None
        return self._act_result(answered[0], answered[1], seq)

    def status(self, timeout_s: float | None = None) -> BridgeStatus:
        """Memory, CPU, counters, actuator statistics. ``timeout_s``: per attempt, as for hello()."""
        return self._parsed(BridgeStatus.from_reply, self._call(MsgType.STATUS, timeout_s)[0], MsgType.STATUS)

    def reset(self, timeout_s: float | None = None) -> dict[str, Any]:
        """New episode: actuator to hover, per-episode counters cleared; returns the finished episode's summary.
        ``timeout_s``: per attempt, as for hello()."""
        return self._call(MsgType.RESET, timeout_s)[0]

    def vehicle(self, command: str, timeout_s: float = VEHICLE_COMMAND_TIMEOUT_S, **fields: Any) -> dict[str, Any]:
        """One vehicle command (``arm``, ``disarm``, ``takeoff`` with ``altitude_m``, ``mode`` with ``mode``): the
        reply (``vehicle``: the autopilot's state after it). BridgeRefused VEHICLE_REFUSED if the autopilot refused.
        The bridge waits for the autopilot's answer, so each attempt waits ``timeout_s``."""
        return self._call(MsgType.VEHICLE, timeout_s, command=command, **fields)[0]

    @property
    def attempts_per_request(self) -> int:
        """How many times a request is sent (Lazy Pirate) before BridgeUnreachable."""
        return 1 + self.retries_per_request
