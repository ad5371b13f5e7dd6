"""The bridge's request loop: one ZeroMQ ROUTER socket, one thread, one policy.

ROUTER (not REP) because it never gets stuck in a send/recv state machine and
serves several clients; whatever frames precede the payload (peer identity,
REQ's empty delimiter) are echoed back untouched, so REQ and DEALER clients
both work. Every request read from a live connection gets exactly one reply:
its answer, or a BUSY refusal if its peer is beyond --max-peers (firmware_bridge.peers),
in which case it never reaches dispatch.

The loop receives with a timeout (RCVTIMEO) instead of blocking forever so the
hold watchdog runs even when no messages arrive and SIGTERM is noticed quickly.
"""

from __future__ import annotations

import errno
import logging
import re
import signal
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import zmq

from firmware_bridge import __version__
from firmware_bridge.actuator import Actuator, HoldWatchdog, VehicleCommandError
from firmware_bridge.device import cpu_times_s, device_info, process_memory_bytes
from firmware_bridge.int8_kernels import saturation_warning
from firmware_bridge.keys import KeyFileError, allowed_client_keys, load_key_pair, load_public_key
from firmware_bridge.peers import ConnectionGate, PeerTable
from firmware_bridge.policy import Policy, load_policy
from firmware_bridge.protocol import (
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_MAX_MODEL_BYTES,
    DEFAULT_MAX_PEERS,
    HANDSHAKE_TIMEOUT_MS,
    HEARTBEAT_IVL_MS,
    HEARTBEAT_TIMEOUT_MS,
    HEARTBEAT_TTL_MS,
    PROTOCOL_VERSION,
    RCVHWM_MESSAGES,
    SNDHWM_MESSAGES,
    SUPPORTED_VERSIONS,
    TRANSPORT_SLACK_BYTES,
    ErrorCode,
    MsgType,
    ProtocolError,
    decode_observation,
    error_reply,
    is_sha256_hex,
    negotiate_version,
    ok_reply,
    optional_str,
    pack,
    peek_seq,
    unpack,
    validate_envelope,
    validate_vehicle_command,
)
from firmware_bridge.upload import UploadSlot

log = logging.getLogger("firmware_bridge")

# Log the first few errors of each code, then one in LOG_EVERY: a broken client
# sending bad observations at 100 Hz must not fill the SD card's journal.
LOG_FIRST_ERRORS = 10
LOG_EVERY = 1000


@dataclass(frozen=True)
class BridgeConfig:
    bind: str
    threads: int = 1
    hold_timeout_ms: int = 200
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    max_model_bytes: int = DEFAULT_MAX_MODEL_BYTES
    max_peers: int = DEFAULT_MAX_PEERS
    # CurveZMQ: the bridge's own key pair (NAME.key_secret) and a directory of allowed clients'
    # public keys (*.key). Both or neither; without them the bridge is unauthenticated.
    curve_secret_file: str | None = None
    curve_clients_dir: str | None = None

    @property
    def max_connections(self) -> int:
        # Room for as many refused peers (each told BUSY) and handshakes as there are admitted peers.
        return 2 * self.max_peers

    @property
    def authenticated(self) -> bool:
        return self.curve_secret_file is not None

    @property
    def poll_timeout_ms(self) -> int:
        # Several watchdog checks per hold period, but never busy-spin nor sleep >50 ms.
        return max(1, min(50, self.hold_timeout_ms // 4))


def display_endpoint(endpoint: str) -> str:
    """With ZMQ_IPV6 on, libzmq reports an IPv4 bind as tcp://[::ffff:127.0.0.1]:P; say tcp://127.0.0.1:P,
    the address the operator asked for (and one any client can connect to)."""
    match = re.match(r"^tcp://\[::ffff:(\d+\.\d+\.\d+\.\d+)\]:(\d+)$", endpoint)
    return f"tcp://{match.group(1)}:{match.group(2)}" if match else endpoint


def printable(text: str) -> str:
    """Client-chosen text that ends up in logs and replies: no newlines or control characters."""
    return "".join(c if c.isprintable() else "?" for c in text)


class Counters:
    """Plain attributes, not a dict: incremented on the hot path."""

    def __init__(self) -> None:
        self.requests = 0
        self.acts = 0
        self.errors = 0
        self.loads = 0
        self.resets = 0
        # Replies libzmq refused at the first try because the peer's pipe looked full; each was sent
        # after the socket processed its pending commands (BridgeServer.send_reply says why).
        self.replies_retried = 0
        # Replies not sent: the peer had SNDHWM replies unread (it does not read them) ...
        self.replies_dropped_unread = 0
        # ... or its connection closed between its request and the reply.
        self.replies_dropped_closed = 0
        self.errors_by_code: Counter[str] = Counter()
        self.episode = 0
        self.new_episode(time.monotonic_ns())

    def new_episode(self, now_ns: int) -> None:
        self.episode_acts = 0
        self.episode_errors = 0
        self.episode_holds = 0
        self.episode_started_ns = now_ns

    def episode_summary(self, now_ns: int) -> dict[str, Any]:
        return {
            "index": self.episode,
            "acts": self.episode_acts,
            "errors": self.episode_errors,
            "holds": self.episode_holds,
            "duration_s": (now_ns - self.episode_started_ns) / 1e9,
        }


class BridgeServer:
    def __init__(self, config: BridgeConfig, actuator: Actuator, context: zmq.Context | None = None) -> None:
        self.config = config
        self.actuator = actuator
        self.watchdog = HoldWatchdog(actuator, config.hold_timeout_ms * 1_000_000)
        self.policy: Policy | None = None
        self.counters = Counters()
        self.started_ns = time.monotonic_ns()
        self._stopping = False
        self._device_info = device_info(__version__)  # static: read /proc once, not per hello
        self._handlers: dict[str, Callable[[dict[str, Any], int, int], dict[str, Any]]] = {
            MsgType.HELLO: self._on_hello,
            MsgType.LOAD_POLICY: self._on_load_policy,
            MsgType.ACT: self._on_act,
            MsgType.STATUS: self._on_status,
            MsgType.RESET: self._on_reset,
            MsgType.VEHICLE: self._on_vehicle,
        }
        # A context of its own: the ZAP handler's address (inproc://zeromq.zap.01) is one per context.
        self._own_context = context is None
        self._context = context if context is not None else zmq.Context()
        if self._context.get(zmq.IO_THREADS) != 1:
            # The gate answers a handshake only once it has seen that connection's accept, which
            # libzmq orders so only within one I/O thread (firmware_bridge.peers).
            raise ValueError("the bridge's ZeroMQ context must have exactly one I/O thread")
        self.uploads = UploadSlot(config.max_model_bytes)
        self.gate: ConnectionGate | None = None
        self.socket = self._context.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        # The memory bound (docs/protocol.md section 6): each connection holds at most one partial
        # frame of MAXMSGSIZE and RCVHWM complete messages (libzmq stops reading a peer whose queue
        # is full), and the gate caps the connections.
        self.socket.setsockopt(zmq.MAXMSGSIZE, config.max_message_bytes + TRANSPORT_SLACK_BYTES)
        self.socket.setsockopt(zmq.RCVHWM, RCVHWM_MESSAGES)
        self.socket.setsockopt(zmq.SNDHWM, SNDHWM_MESSAGES)
        # A ROUTER drops a reply silently when it believes the peer's pipe is full or gone; MANDATORY
        # makes the send fail instead (EAGAIN, EHOSTUNREACH), so the bridge learns of it (send_reply).
        self.socket.setsockopt(zmq.ROUTER_MANDATORY, 1)
        # A connection that has not finished its ZMTP (or CurveZMQ) handshake in this time is dropped,
        # so a stranger cannot hold a connection slot for long.
        self.socket.setsockopt(zmq.HANDSHAKE_IVL, HANDSHAKE_TIMEOUT_MS)
        # ZMTP heartbeats: a peer that vanished without closing (power loss, a Wi-Fi drop) is closed
        # after HEARTBEAT_TIMEOUT_MS without traffic, which frees its peer slot (protocol.py has the why).
        self.socket.setsockopt(zmq.HEARTBEAT_IVL, HEARTBEAT_IVL_MS)
        self.socket.setsockopt(zmq.HEARTBEAT_TIMEOUT, HEARTBEAT_TIMEOUT_MS)
        self.socket.setsockopt(zmq.HEARTBEAT_TTL, HEARTBEAT_TTL_MS)
        self.socket.setsockopt(zmq.RCVTIMEO, config.poll_timeout_ms)
        self.socket.setsockopt(zmq.IPV6, 1)  # tcp://*:5555 then listens on IPv4 and IPv6
        try:
            client_keys = self._enable_curve() if config.authenticated else None
            self.gate = ConnectionGate(self.socket, self._context, config.max_connections, client_keys)
            self.socket.bind(config.bind)
        except BaseException:
            self.close_socket()
            raise
        self.peers = PeerTable(self.gate, config.max_peers)
        self.endpoint: str = display_endpoint(self.socket.getsockopt_string(zmq.LAST_ENDPOINT))
        if not config.authenticated:
            # Loud on purpose: anyone who can reach this port can upload a policy and fly the vehicle.
            log.warning(
                "UNAUTHENTICATED: no --curve-secret/--curve-clients given; ANY peer that reaches %s can "
                "load policies and command the actuator. Use CurveZMQ keys off the bench "
                "(python -m firmware_bridge.keys, docs/reliability.md).",
                self.endpoint,
            )

    def _enable_curve(self) -> frozenset[bytes]:
        """CurveZMQ: encrypt everything; returns the allowed clients' public keys (from curve_clients_dir).

        The connection gate (firmware_bridge.peers), the socket's ZAP handler, refuses unknown keys
        during the handshake, so their messages never reach the request loop.
        """
        config = self.config
        if config.curve_clients_dir is None:
            raise KeyFileError("--curve-secret needs --curve-clients (the directory of allowed client keys)")
        public, secret = load_key_pair(config.curve_secret_file or "")
        allowed = frozenset(load_public_key(path) for path in allowed_client_keys(config.curve_clients_dir))
        if not allowed:
            raise KeyFileError(f"no client keys (*.key) in {config.curve_clients_dir}: nobody could connect")
        self.socket.curve_secretkey = secret
        self.socket.curve_publickey = public
        self.socket.curve_server = True
        log.info(
            "CurveZMQ on: bridge key %s, %d allowed client key(s) from %s",
            public.decode(),
            len(allowed),
            config.curve_clients_dir,
        )
        return allowed

    # ------------------------------------------------------------------ loop

    def install_policy(self, policy: Policy) -> Policy | None:
        previous, self.policy = self.policy, policy
        self.counters.loads += 1
        log.info(
            "loaded policy %s sha256=%s size=%dB obs_dim=%d action_space=%s setpoints=%s in %.1f ms",
            policy.name or "(unnamed)",
            policy.sha256[:16],
            policy.size_bytes,
            policy.obs_dim,
            policy.action_space,
            policy.setpoint_mapping,
            policy.load_ns / 1e6,
        )
        warning = saturation_warning(policy.metadata)
        if warning:
            log.warning("policy %s: %s", policy.name or "(unnamed)", warning)
        return previous

    def request_stop(self, *_: Any) -> None:
        self._stopping = True

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self.request_stop)
        signal.signal(signal.SIGINT, self.request_stop)

    def serve_forever(self) -> None:
        sock = self.socket
        watchdog = self.watchdog
        counters = self.counters
        handle = self.handle_payload
        peers = self.peers
        monotonic_ns = time.monotonic_ns
        try:
            while not self._stopping:
                try:
                    # The routing id as a frame: ZMQ_SRCFD says which connection sent it, read only
                    # for a peer not yet admitted.
                    routing = sock.recv(copy=False)
                except zmq.Again:
                    if watchdog.tick(monotonic_ns()):
                        self._on_hold()
                    continue
                frames = [routing.bytes, *sock.recv_multipart()]
                recv_ns = monotonic_ns()
                # Last frame is the payload; anything before it is the routing envelope.
                if peers.is_admitted(frames[0]):
                    frames[-1] = handle(frames[-1], recv_ns)
                else:
                    verdict = peers.admit(frames[0], cast(int, routing.get(zmq.SRCFD)))
                    if verdict is None:  # read after its connection closed: nobody would get the reply
                        counters.requests += 1
                        continue
                    frames[-1] = handle(frames[-1], recv_ns) if verdict else self._busy_reply(frames[-1])
                self.send_reply(frames)
                if watchdog.tick(monotonic_ns()):
                    self._on_hold()
        finally:
            self.close()
        log.info("stopped after %d requests", counters.requests)

    def send_reply(self, frames: list[bytes]) -> bool:
        """Send one reply; True if libzmq took it. Never blocks the loop on a peer.

        libzmq's ROUTER decides "the peer's pipe is full" from the reader's count of messages taken,
        which the I/O thread posts to this socket as a command every SNDHWM/2 messages and the socket
        processes only when it waits, on every 100th receive, or on a send at least ~1 ms of CPU
        ticks after the last one (socket_base.cpp, process_commands' throttle). On a starved CPU the
        loop can go many request/reply rounds without either, so a client that has read every reply
        still looks SNDHWM replies behind and the reply would be dropped without a word. Reading
        ZMQ_EVENTS processes every pending command; after that the count is exact to SNDHWM/2, so a
        peer that waits for its replies always has room, and a send that still fails means the peer
        really holds SNDHWM replies unread: that reply is dropped, counted and logged.
        """
        sock, counters = self.socket, self.counters
        try:
            try:
                sock.send_multipart(frames, flags=zmq.NOBLOCK)
            except zmq.Again:
                sock.getsockopt(zmq.EVENTS)  # process the I/O thread's pending commands, then try again
                sock.send_multipart(frames, flags=zmq.NOBLOCK)
                counters.replies_retried += 1
        except zmq.Again:
            counters.replies_dropped_unread += 1
            n = counters.replies_dropped_unread
            if n <= LOG_FIRST_ERRORS or n % LOG_EVERY == 0:
                log.warning(
                    "reply dropped: the peer has %d replies unread (ZMQ_SNDHWM); %d dropped so far", SNDHWM_MESSAGES, n
                )
            return False
        except zmq.ZMQError as exc:
            if exc.errno != errno.EHOSTUNREACH:
                raise
            counters.replies_dropped_closed += 1  # its connection closed after its request was read
            return False
        return True

    def _busy_reply(self, payload: bytes) -> bytes:
        """The refusal of a request from a peer beyond --max-peers: never dispatched, one BUSY reply."""
        self.counters.requests += 1
        seq = self._seq_or_none(payload)
        return pack(
            self._error(
                seq,
                ErrorCode.BUSY,
                f"peer cap full: {self.config.max_peers} peers connected (--max-peers); "
                "this connection is served once one of them disconnects",
            )
        )

    def close_socket(self) -> None:
        if self.gate is not None:
            self.gate.stop()
            self.gate = None
        self.socket.close(linger=0)
        if self._own_context:
            self._context.term()

    def close(self) -> None:
        self.close_socket()
        self.actuator.close()

    def _on_hold(self, reason: str = "") -> None:
        self.counters.episode_holds += 1
        log.warning("%s: actuator holding (hover)", reason or f"no act for {self.config.hold_timeout_ms} ms")

    # ------------------------------------------------------------------ dispatch

    def handle_payload(self, payload: bytes, recv_ns: int) -> bytes:
        """One request payload in, one reply payload out; never raises."""
        self.counters.requests += 1
        seq: int | None = None
        try:
            if len(payload) > self.config.max_message_bytes:
                seq = self._seq_or_none(payload)
                raise ProtocolError(
                    ErrorCode.TOO_LARGE,
                    f"message is {len(payload)} bytes, limit is {self.config.max_message_bytes} (--max-message-bytes)",
                )
            message = unpack(payload)
            seq = peek_seq(message)
            msg_type, seq = validate_envelope(message)
            reply = self._handlers[msg_type](message, seq, recv_ns)
        except ProtocolError as exc:
            reply = self._error(seq, exc.code, exc.message)
        except Exception as exc:  # a bug or an onnxruntime runtime failure: report it, keep serving
            log.exception("internal error handling seq=%s", seq)
            reply = self._error(
                seq, ErrorCode.INTERNAL, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
            )
        return pack(reply)

    @staticmethod
    def _seq_or_none(payload: bytes) -> int | None:
        try:
            return peek_seq(unpack(payload))
        except ProtocolError:
            return None

    def _error(self, seq: int | None, code: str, message: str) -> dict[str, Any]:
        counters = self.counters
        counters.errors += 1
        counters.episode_errors += 1
        counters.errors_by_code[code] += 1
        n = counters.errors_by_code[code]
        if n <= LOG_FIRST_ERRORS or n % LOG_EVERY == 0:
            log.warning("error reply seq=%s %s: %s (%d of this code)", seq, code, message, n)
        extra = {"supported_versions": list(SUPPORTED_VERSIONS)} if code == ErrorCode.VERSION_MISMATCH else {}
        return error_reply(seq, code, message, **extra)

    # ------------------------------------------------------------------ handlers

    def _on_act(self, message: dict[str, Any], seq: int, recv_ns: int) -> dict[str, Any]:
        policy = self.policy
        if policy is None:
            raise ProtocolError(
                ErrorCode.NO_POLICY, "no policy loaded: send load_policy first (or start with --policy)"
            )
        dtype = message.get("dtype")
        if dtype is None and "dtype" in message:  # optional means absent: nil is not a dtype (section 4.3)
            raise ProtocolError(ErrorCode.BAD_OBSERVATION, "obs dtype is nil; leave it out or send '<f4'")
        obs = decode_observation(message.get("obs"), message.get("shape"), dtype, policy.obs_dim)
        link_error = self.actuator.link_error()
        if link_error is not None:  # a setpoint into a dead link would fly nothing: the host must know
            raise ProtocolError(ErrorCode.VEHICLE_LINK, link_error)
        start_ns = time.perf_counter_ns()
        action, setpoint, logits = policy.act(obs)
        infer_ns = time.perf_counter_ns() - start_ns
        if setpoint is not None:
            self.watchdog.command(setpoint, time.monotonic_ns())
        counters = self.counters
        counters.acts += 1
        counters.episode_acts += 1
        return {
            "v": PROTOCOL_VERSION,
            "type": MsgType.ACT,
            "seq": seq,
            "action": action,
            "setpoint": setpoint,
            "logits": logits,
            "infer_ns": infer_ns,
            "vehicle": self.actuator.vehicle(),
            "recv_ns": recv_ns,
            "send_ns": time.monotonic_ns(),
        }

    def _on_hello(self, message: dict[str, Any], seq: int, recv_ns: int) -> dict[str, Any]:
        version = negotiate_version(message)
        optional_str(message, "client")  # free text the bridge does not use, but typed as documented
        reply = ok_reply(
            MsgType.HELLO,
            seq,
            version=version,
            supported_versions=list(SUPPORTED_VERSIONS),
            bridge_version=__version__,
            device=self._device_info,
            max_message_bytes=self.config.max_message_bytes,
            max_model_bytes=self.config.max_model_bytes,
            max_peers=self.config.max_peers,
            max_connections=self.config.max_connections,
            heartbeat_ivl_ms=HEARTBEAT_IVL_MS,
            heartbeat_timeout_ms=HEARTBEAT_TIMEOUT_MS,
            hold_timeout_ms=self.config.hold_timeout_ms,
            threads=self.config.threads,
            actuator=self.actuator.name,
            policy=self.policy.summary() if self.policy else None,
            uptime_s=(recv_ns - self.started_ns) / 1e9,
        )
        reply["v"] = version
        return reply

    def _on_load_policy(self, message: dict[str, Any], seq: int, recv_ns: int) -> dict[str, Any]:
        onnx_bytes = message.get("onnx")
        if type(onnx_bytes) is not bytes:
            raise ProtocolError(ErrorCode.BAD_MESSAGE, "field 'onnx' must be msgpack bin (the model file's bytes)")
        declared_sha256 = message.get("sha256")
        if not is_sha256_hex(declared_sha256):
            raise ProtocolError(
                ErrorCode.BAD_MESSAGE, "field 'sha256' must be the model's sha256 as 64 lowercase hex digits"
            )
        name = optional_str(message, "name")
        if "size" in message or "offset" in message:  # one chunk of a model larger than a message
            size, offset = message.get("size"), message.get("offset")
            if (
                self.policy is not None
                and self.policy.sha256 == declared_sha256
                and type(size) is int
                and type(offset) is int
                and offset + len(onnx_bytes) == size == self.policy.size_bytes
            ):
                # The completing chunk again (its reply was lost): that model is already loaded.
                return ok_reply(MsgType.LOAD_POLICY, seq, received=size, replaced_sha256=None, **self.policy.summary())
            received, complete = self.uploads.add(sha256=declared_sha256, size=size, offset=offset, chunk=onnx_bytes)
            if complete is None:
                return ok_reply(MsgType.LOAD_POLICY, seq, received=received, size=size)
            onnx_bytes = complete
        # Loading blocks this loop (and so the watchdog) for as long as onnxruntime takes: hover
        # now rather than let the last setpoint fly on unwatched.
        if self.watchdog.hold_now(time.monotonic_ns()):
            self._on_hold("policy upload")
        # On any failure load_policy raises and self.policy is untouched: the previous policy keeps flying.
        policy = load_policy(
            onnx_bytes,
            expected_sha256=declared_sha256,
            max_bytes=self.config.max_model_bytes,
            threads=self.config.threads,
            name=printable(name[:128]),
        )
        previous = self.install_policy(policy)
        return ok_reply(
            MsgType.LOAD_POLICY,
            seq,
            received=len(onnx_bytes),
            replaced_sha256=previous.sha256 if previous else None,
            **policy.summary(),
        )

    def _on_status(self, message: dict[str, Any], seq: int, recv_ns: int) -> dict[str, Any]:
        rss, peak_rss = process_memory_bytes()
        cpu_user, cpu_sys = cpu_times_s()
        counters = self.counters
        policy = self.policy
        return ok_reply(
            MsgType.STATUS,
            seq,
            rss_bytes=rss,
            peak_rss_bytes=peak_rss,
            model_bytes=policy.size_bytes if policy else 0,
            model_rss_delta_bytes=policy.rss_delta_bytes if policy else None,
            cpu_user_s=cpu_user,
            cpu_sys_s=cpu_sys,
            uptime_s=(recv_ns - self.started_ns) / 1e9,
            counters={
                "requests": counters.requests,
                "acts": counters.acts,
                "errors": counters.errors,
                "holds": self.watchdog.holds,
                "loads": counters.loads,
                "resets": counters.resets,
            },
            errors_by_code=dict(counters.errors_by_code),
            episode=counters.episode_summary(recv_ns),
            actuator=self.actuator.stats(),
            policy=policy.summary() if policy else None,
            peers=self._peer_stats(),
        )

    def _peer_stats(self) -> dict[str, int]:
        gate = self.gate
        return {
            "connected": gate.connected if gate else 0,
            "admitted": self.peers.count,
            "max": self.config.max_peers,
            "max_connections": self.config.max_connections,
            "refused": gate.refused if gate else 0,
            "handshakes_refused": gate.handshakes_refused if gate else 0,
            "busy_replies": self.peers.busy_replies,
            "dropped_closed": self.peers.dropped_closed,
            "replies_retried": self.counters.replies_retried,
            "replies_dropped_unread": self.counters.replies_dropped_unread,
            "replies_dropped_closed": self.counters.replies_dropped_closed,
            "upload_staged_bytes": self.uploads.staged_bytes,
        }

    def _on_vehicle(self, message: dict[str, Any], seq: int, recv_ns: int) -> dict[str, Any]:
        command, args = validate_vehicle_command(message)
        # The command blocks this loop (and so the watchdog) until the autopilot answers: hover first rather
        # than let the last setpoint fly on unwatched.
        if self.watchdog.hold_now(time.monotonic_ns()):
            self._on_hold(f"vehicle command {command}")
        try:
            self.actuator.vehicle_command(command, args)
        except VehicleCommandError as exc:
            raise ProtocolError(ErrorCode.VEHICLE_REFUSED, str(exc)[:300]) from None
        log.info("vehicle command %s %s done", command, args or "")
        if command == "mode":
            self.watchdog.expect_command(time.monotonic_ns())
        return ok_reply(MsgType.VEHICLE, seq, command=command, vehicle=self.actuator.vehicle())

    def _on_reset(self, message: dict[str, Any], seq: int, recv_ns: int) -> dict[str, Any]:
        counters = self.counters
        previous = counters.episode_summary(recv_ns)
        self.watchdog.reset()
        self.watchdog.expect_command(recv_ns)
        counters.resets += 1
        counters.episode += 1
        counters.new_episode(recv_ns)
        return ok_reply(MsgType.RESET, seq, episode=counters.episode, previous_episode=previous)
