"""The bridge's request loop: one ZeroMQ ROUTER socket, one thread, one policy.

ROUTER (not REP) because it never gets stuck in a send/recv state machine and
answers any number of clients; whatever frames precede the payload (peer
identity, REQ's empty delimiter) are echoed back untouched, so REQ and DEALER
clients both work. Every parseable-or-not message gets exactly one reply.

The loop receives with a timeout (RCVTIMEO) instead of blocking forever so the
hold watchdog runs even when no messages arrive and SIGTERM is noticed quickly.
"""

from __future__ import annotations

import logging
import re
import signal
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import zmq
from zmq.auth.thread import ThreadAuthenticator

from firmware_bridge import __version__
from firmware_bridge.actuator import Actuator, HoldWatchdog
from firmware_bridge.device import cpu_times_s, device_info, process_memory_bytes
from firmware_bridge.int8_kernels import saturation_warning
from firmware_bridge.keys import KeyFileError, allowed_client_keys, load_key_pair
from firmware_bridge.peers import PeerLimiter
from firmware_bridge.policy import Policy, load_policy
from firmware_bridge.protocol import (
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_MAX_MODEL_BYTES,
    DEFAULT_MAX_PEERS,
    HANDSHAKE_TIMEOUT_MS,
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
        }
        self._context = context or zmq.Context.instance()
        self.authenticator: ThreadAuthenticator | None = None
        self.uploads = UploadSlot(config.max_model_bytes)
        self.peer_limiter: PeerLimiter | None = None
        self.socket = self._context.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        # The memory bound (docs/protocol.md section 6): each connection holds at most one partial
        # frame of MAXMSGSIZE and RCVHWM complete messages (libzmq stops reading a peer whose queue
        # is full), and the limiter caps the connections.
        self.socket.setsockopt(zmq.MAXMSGSIZE, config.max_message_bytes + TRANSPORT_SLACK_BYTES)
        self.socket.setsockopt(zmq.RCVHWM, RCVHWM_MESSAGES)
        self.socket.setsockopt(zmq.SNDHWM, SNDHWM_MESSAGES)
        # A connection that has not finished its ZMTP (or CurveZMQ) handshake in this time is dropped,
        # so a stranger cannot hold one of the --max-peers slots for long.
        self.socket.setsockopt(zmq.HANDSHAKE_IVL, HANDSHAKE_TIMEOUT_MS)
        self.socket.setsockopt(zmq.RCVTIMEO, config.poll_timeout_ms)
        self.socket.setsockopt(zmq.IPV6, 1)  # tcp://*:5555 then listens on IPv4 and IPv6
        try:
            if config.authenticated:
                self._enable_curve()
            self.peer_limiter = PeerLimiter(self.socket, config.max_peers)
            self.socket.bind(config.bind)
        except BaseException:
            self.close_socket()
            raise
        self.endpoint: str = display_endpoint(self.socket.getsockopt_string(zmq.LAST_ENDPOINT))
        if not config.authenticated:
            # Loud on purpose: anyone who can reach this port can upload a policy and fly the vehicle.
            log.warning(
                "UNAUTHENTICATED: no --curve-secret/--curve-clients given; ANY peer that reaches %s can "
                "load policies and command the actuator. Use CurveZMQ keys off the bench "
                "(python -m firmware_bridge.keys, docs/reliability.md).",
                self.endpoint,
            )

    def _enable_curve(self) -> None:
        """CurveZMQ: encrypt everything and admit only clients whose public key is in curve_clients_dir.

        The ZAP handler (pyzmq's ThreadAuthenticator) runs in a thread of this process and rejects
        unknown keys during the handshake, so their messages never reach the request loop.
        """
        config = self.config
        if config.curve_clients_dir is None:
            raise KeyFileError("--curve-secret needs --curve-clients (the directory of allowed client keys)")
        public, secret = load_key_pair(config.curve_secret_file or "")
        allowed = allowed_client_keys(config.curve_clients_dir)
        if not allowed:
            raise KeyFileError(f"no client keys (*.key) in {config.curve_clients_dir}: nobody could connect")
        self.authenticator = ThreadAuthenticator(self._context, log=logging.getLogger("firmware_bridge.auth"))
        self.authenticator.start()
        self.authenticator.configure_curve(domain="*", location=config.curve_clients_dir)
        self.socket.curve_secretkey = secret
        self.socket.curve_publickey = public
        self.socket.curve_server = True
        log.info(
            "CurveZMQ on: bridge key %s, %d allowed client key(s) from %s",
            public.decode(),
            len(allowed),
            config.curve_clients_dir,
        )

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
        monotonic_ns = time.monotonic_ns
        try:
            while not self._stopping:
                try:
                    frames = sock.recv_multipart()
                except zmq.Again:
                    if watchdog.tick(monotonic_ns()):
                        self._on_hold()
                    continue
                recv_ns = monotonic_ns()
                # Last frame is the payload; anything before it is the routing envelope.
                frames[-1] = handle(frames[-1], recv_ns)
                sock.send_multipart(frames)
                if watchdog.tick(monotonic_ns()):
                    self._on_hold()
        finally:
            self.close()
        log.info("stopped after %d requests", counters.requests)

    def close_socket(self) -> None:
        if self.peer_limiter is not None:
            self.peer_limiter.stop()
            self.peer_limiter = None
        self.socket.close(linger=0)
        if self.authenticator is not None:
            self.authenticator.stop()
            self.authenticator = None

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
                seq = self._seq_of_oversize(payload)
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
    def _seq_of_oversize(payload: bytes) -> int | None:
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
        limiter = self.peer_limiter
        return {
            "connected": limiter.connected if limiter else 0,
            "max": self.config.max_peers,
            "refused": limiter.refused if limiter else 0,
            "upload_staged_bytes": self.uploads.staged_bytes,
        }

    def _on_reset(self, message: dict[str, Any], seq: int, recv_ns: int) -> dict[str, Any]:
        counters = self.counters
        previous = counters.episode_summary(recv_ns)
        self.watchdog.reset()
        counters.resets += 1
        counters.episode += 1
        counters.new_episode(recv_ns)
        return ok_reply(MsgType.RESET, seq, episode=counters.episode, previous_episode=previous)
