"""airq bridge wire protocol, version 1 (see docs/protocol.md for the normative text).

Every message is ONE msgpack map in the last ZeroMQ frame. Requests carry
``v`` (protocol version), ``type`` and ``seq``; the reply echoes ``seq`` and has
either the request's ``type`` (success) or ``type == "error"`` with ``code`` and
``message``.

This module is shared by the bridge (firmware_bridge.server) and its client
(firmware_bridge.client), so it only depends on numpy and msgpack: no onnxruntime, no zmq.
"""

from __future__ import annotations

import hashlib
import math
import re
import warnings
from typing import Any, TypeGuard

import msgpack
import numpy as np

PROTOCOL_VERSION = 1
# Versions this build can speak; hello negotiates the highest common one.
SUPPORTED_VERSIONS: tuple[int, ...] = (1,)

DEFAULT_PORT = 5555
# Limits that bound the device's memory whatever peers send (docs/protocol.md section 6).
# A message carries an act (4 KiB for 1032 observations) or one chunk of a policy upload.
DEFAULT_MAX_MESSAGE_BYTES = 256 * 1024
# A whole policy, assembled from chunks in one staging buffer for the whole device.
DEFAULT_MAX_MODEL_BYTES = 64 * 1024 * 1024
# Peers (connections) served at once; a request from any other peer gets a BUSY reply, and TCP
# connections beyond twice this many are closed at once (firmware_bridge.peers).
DEFAULT_MAX_PEERS = 32
# Complete messages libzmq queues per connection before it stops reading that peer, and replies it
# queues for a peer that does not read them (ROUTER drops further replies to it).
RCVHWM_MESSAGES = 2
SNDHWM_MESSAGES = 16
HANDSHAKE_TIMEOUT_MS = 5000
# ZMTP heartbeats, on the bridge and in the reference client (docs/protocol.md section 6). Each side
# sends a PING after HEARTBEAT_IVL_MS without traffic and closes the connection when nothing at all has
# arrived HEARTBEAT_TIMEOUT_MS after a PING (TTL: what it asks the other side to allow). So a peer that
# vanished without closing (a Pi losing power, a Wi-Fi drop) is gone 4-5 s after its last traffic, while
# a live peer is never dropped unless its round trip exceeds 4 s: Wi-Fi retransmission and roaming
# stalls stay well below that, and the control loop's own deadline (a fraction of its 0.1 s period)
# already flies the fail-safe long before.
HEARTBEAT_IVL_MS = 1000
HEARTBEAT_TIMEOUT_MS = 4000
HEARTBEAT_TTL_MS = 4000
# Messages up to this much over --max-message-bytes are still read and answered
# TOO_LARGE (the common "slightly too big" mistake); anything larger is cut
# off by ZeroMQ itself (ZMQ_MAXMSGSIZE), which drops the connection without a reply.
TRANSPORT_SLACK_BYTES = 64 * 1024

# Observations travel as raw little-endian float32 bytes, never as msgpack arrays:
# one memcpy on each side instead of 1032 float objects.
OBS_WIRE_DTYPE = np.dtype("<f4")
OBS_DTYPE_NAMES = frozenset({"<f4", "float32"})
# seq is a msgpack unsigned integer: 0 .. 2**64 - 1.
SEQ_MAX = 2**64 - 1
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")

# Setpoints given to the flight controller: [vx, vy, vz, yaw_rate] in m/s, m/s, m/s, rad/s.
SETPOINT_FIELDS = ("vx", "vy", "vz", "yaw_rate")
SETPOINT_DIM = len(SETPOINT_FIELDS)


class MsgType:
    HELLO = "hello"
    LOAD_POLICY = "load_policy"
    ACT = "act"
    STATUS = "status"
    RESET = "reset"
    VEHICLE = "vehicle"
    ERROR = "error"  # replies only

    REQUESTS = frozenset({HELLO, LOAD_POLICY, ACT, STATUS, RESET, VEHICLE})


class ErrorCode:
    BAD_MESSAGE = "BAD_MESSAGE"  # not msgpack, not a map, missing/ill-typed envelope or field
    UNKNOWN_TYPE = "UNKNOWN_TYPE"  # "type" is not a request this version knows
    VERSION_MISMATCH = "VERSION_MISMATCH"  # "v" (or hello "versions") not supported
    BAD_OBSERVATION = "BAD_OBSERVATION"  # wrong size/shape/dtype, NaN or Inf
    NO_POLICY = "NO_POLICY"  # act before any policy was loaded
    BAD_POLICY = "BAD_POLICY"  # bytes are not a usable ONNX policy (previous one stays)
    HASH_MISMATCH = "HASH_MISMATCH"  # sha256 of the uploaded bytes != declared sha256
    TOO_LARGE = "TOO_LARGE"  # message over max_message_bytes, or a model over max_model_bytes
    INTERNAL = "INTERNAL"  # bug or runtime failure on the device; the bridge keeps serving
    BUSY = "BUSY"  # --max-peers other peers are connected: this one is not served (nothing executed)
    VEHICLE_LINK = "VEHICLE_LINK"  # the flight controller's link is lost: the act's setpoint was not sent
    VEHICLE_REFUSED = "VEHICLE_REFUSED"  # a vehicle command refused (by the autopilot, or no vehicle behind)

    ALL = frozenset(
        {
            BAD_MESSAGE,
            UNKNOWN_TYPE,
            VERSION_MISMATCH,
            BAD_OBSERVATION,
            NO_POLICY,
            BAD_POLICY,
            HASH_MISMATCH,
            TOO_LARGE,
            INTERNAL,
            BUSY,
            VEHICLE_LINK,
            VEHICLE_REFUSED,
        }
    )


class ProtocolError(Exception):
    """A request or reply that breaks the protocol; ``code`` is an ErrorCode value."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


# --------------------------------------------------------------------------- framing


def pack(message: dict[str, Any]) -> bytes:
    # use_bin_type keeps bytes (obs, onnx) as msgpack bin and str as str: other
    # languages' msgpack libraries rely on that distinction.
    return msgpack.packb(message, use_bin_type=True)


def unpack(payload: bytes) -> dict[str, Any]:
    """Decode one message; raise ProtocolError(BAD_MESSAGE) for anything that isn't a msgpack map
    with distinct string keys."""
    try:
        # strict_map_key=False: an int key is valid msgpack, refused below with a message that says so.
        message = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises several unrelated types (ExtraData, FormatError, ValueError...)
        raise ProtocolError(ErrorCode.BAD_MESSAGE, f"payload is not valid msgpack ({type(exc).__name__})") from None
    if not isinstance(message, dict):
        raise ProtocolError(ErrorCode.BAD_MESSAGE, f"message must be a msgpack map, got {wire_type(message)}")
    for key in message:
        if type(key) is not str:
            raise ProtocolError(ErrorCode.BAD_MESSAGE, f"map keys must be strings, got a {wire_type(key)} key")
    if _map_entries(payload) != len(message):
        raise ProtocolError(ErrorCode.BAD_MESSAGE, "message map has a duplicate key")
    return message


def _map_entries(payload: bytes) -> int:
    """The entry count in the top-level map's header: more than the decoded dict's keys means a key
    was repeated (msgpack keeps the last silently). O(1): the header is the first 1, 3 or 5 bytes."""
    first = payload[0]
    if first & 0xF0 == 0x80:  # fixmap
        return first & 0x0F
    if first == 0xDE:  # map 16
        return int.from_bytes(payload[1:3], "big")
    return int.from_bytes(payload[1:5], "big")  # map 32 (0xdf): unpack already proved it is a map


def valid_seq(value: Any) -> TypeGuard[int]:
    return type(value) is int and 0 <= value <= SEQ_MAX


def peek_seq(message: dict[str, Any]) -> int | None:
    """The seq of a (possibly invalid) request if it is a valid seq, so even error replies can be
    matched; anything else (negative, float, str) is answered with seq nil."""
    seq = message.get("seq")
    return seq if valid_seq(seq) else None


def validate_envelope(message: dict[str, Any]) -> tuple[str, int]:
    """Check v/type/seq of a request; return (type, seq).

    hello is accepted at any integer ``v`` because it is where versions are negotiated;
    every other request must carry a supported ``v``. ``v`` is an integer in every version.
    """
    seq = message.get("seq")
    if not valid_seq(seq):
        raise ProtocolError(ErrorCode.BAD_MESSAGE, "field 'seq' must be an integer 0 .. 2**64-1")
    msg_type = message.get("type")
    if type(msg_type) is not str:
        raise ProtocolError(ErrorCode.BAD_MESSAGE, "field 'type' must be a string")
    version = message.get("v")
    if type(version) is not int:
        raise ProtocolError(ErrorCode.BAD_MESSAGE, "field 'v' (protocol version) must be an integer")
    if msg_type != MsgType.HELLO and version not in SUPPORTED_VERSIONS:
        raise ProtocolError(
            ErrorCode.VERSION_MISMATCH,
            f"protocol version {version} not supported; this bridge speaks {list(SUPPORTED_VERSIONS)}",
        )
    if msg_type not in MsgType.REQUESTS:
        raise ProtocolError(
            ErrorCode.UNKNOWN_TYPE,
            f"unknown message type {msg_type[:64]!r}; expected one of {sorted(MsgType.REQUESTS)}",
        )
    return msg_type, seq


def negotiate_version(message: dict[str, Any]) -> int:
    """Pick the highest version both sides speak from a hello's ``versions`` (default: its ``v``)."""
    offered = message.get("versions", [message.get("v")])
    if type(offered) is not list or not all(type(v) is int for v in offered):
        got = (
            wire_type(offered)
            if type(offered) is not list
            else ("an array holding a " + next(wire_type(v) for v in offered if type(v) is not int))
        )
        raise ProtocolError(ErrorCode.BAD_MESSAGE, f"hello field 'versions' must be an array of ints, got {got}")
    common = set(offered) & set(SUPPORTED_VERSIONS)
    if not common:
        raise ProtocolError(
            ErrorCode.VERSION_MISMATCH,
            f"no common protocol version: client offers {offered[:16]}, bridge speaks {list(SUPPORTED_VERSIONS)}",
        )
    return max(common)


# The msgpack type a peer sent, in the words docs/protocol.md uses: a firmware writer knows nil and
# bin, not Python's NoneType and bytes.
_WIRE_TYPES: dict[type, str] = {
    type(None): "nil",
    bool: "bool",
    int: "int",
    float: "float",
    str: "str",
    bytes: "bin",
    list: "array",
    dict: "map",
}


def wire_type(value: Any) -> str:
    return _WIRE_TYPES.get(type(value), type(value).__name__)


def optional_str(message: dict[str, Any], name: str) -> str:
    """An optional str field: absent gives "", present must be a str. nil is not "absent": the doc
    marks where nil is allowed ("or nil"), and a typo'd encoder should hear about it, not be guessed at."""
    value = message.get(name, "")
    if type(value) is not str:
        raise ProtocolError(ErrorCode.BAD_MESSAGE, f"field {name!r} must be a str if present, got {wire_type(value)}")
    return value


# --------------------------------------------------------------------------- requests


def request(msg_type: str, seq: int, **fields: Any) -> dict[str, Any]:
    return {"v": PROTOCOL_VERSION, "type": msg_type, "seq": seq, **fields}


def hello_request(seq: int, client: str = "") -> dict[str, Any]:
    return request(MsgType.HELLO, seq, versions=list(SUPPORTED_VERSIONS), client=client)


def load_policy_request(seq: int, onnx_bytes: bytes, name: str = "") -> dict[str, Any]:
    return request(MsgType.LOAD_POLICY, seq, onnx=onnx_bytes, sha256=sha256_hex(onnx_bytes), name=name)


def act_request(seq: int, obs: np.ndarray) -> dict[str, Any]:
    data, shape = encode_observation(obs)
    return request(MsgType.ACT, seq, obs=data, shape=shape, dtype="<f4")


def status_request(seq: int) -> dict[str, Any]:
    return request(MsgType.STATUS, seq)


def reset_request(seq: int) -> dict[str, Any]:
    return request(MsgType.RESET, seq)


# The vehicle commands a ``vehicle`` request may carry, and the fields each needs (docs/protocol.md 4.6).
VEHICLE_COMMANDS: dict[str, tuple[str, ...]] = {
    "arm": (),
    "disarm": (),
    "takeoff": ("altitude_m",),
    "mode": ("mode",),
}
MAX_TAKEOFF_ALTITUDE_M = 120.0  # the usual legal ceiling for small drones; a typo of 500 m is refused


def vehicle_request(seq: int, command: str, **fields: Any) -> dict[str, Any]:
    return request(MsgType.VEHICLE, seq, command=command, **fields)


def validate_vehicle_command(message: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The command of a ``vehicle`` request and its arguments; ProtocolError (BAD_MESSAGE) naming what is wrong."""
    command = message.get("command")
    if type(command) is not str or command not in VEHICLE_COMMANDS:
        raise ProtocolError(
            ErrorCode.BAD_MESSAGE,
            f"vehicle 'command' must be one of {', '.join(VEHICLE_COMMANDS)}, got {wire_type(command)} {command!r}"[
                :300
            ],
        )
    args: dict[str, Any] = {}
    if command == "takeoff":
        alt: Any = message.get("altitude_m")
        if type(alt) not in (int, float) or not math.isfinite(alt) or not 0.5 <= alt <= MAX_TAKEOFF_ALTITUDE_M:
            bad = f"{alt!r}"[:80]
            raise ProtocolError(
                ErrorCode.BAD_MESSAGE,
                f"takeoff 'altitude_m' must be a number of metres in 0.5..{MAX_TAKEOFF_ALTITUDE_M:g}, got {bad}",
            )
        args["altitude_m"] = float(alt)
    elif command == "mode":
        mode = message.get("mode")
        if type(mode) is not str or not mode or len(mode) > 32 or not mode.replace("_", "").isalnum():
            raise ProtocolError(
                ErrorCode.BAD_MESSAGE, f"mode 'mode' must be a flight mode's name such as GUIDED, got {mode!r}"[:300]
            )
        args["mode"] = mode.upper()
    return command, args


# --------------------------------------------------------------------------- replies


def ok_reply(msg_type: str, seq: int | None, **fields: Any) -> dict[str, Any]:
    return {"v": PROTOCOL_VERSION, "type": msg_type, "seq": seq, **fields}


def error_reply(seq: int | None, code: str, message: str, **extra: Any) -> dict[str, Any]:
    # The error envelope {v, type, seq, code, message} is frozen across protocol
    # versions so an old client can always read why a new bridge refused it.
    return {"v": PROTOCOL_VERSION, "type": MsgType.ERROR, "seq": seq, "code": code, "message": message, **extra}


# --------------------------------------------------------------------------- observations


def encode_observation(obs: np.ndarray) -> tuple[bytes, list[int]]:
    """Observation -> (raw little-endian float32 bytes, shape). Casts other float dtypes."""
    array = np.ascontiguousarray(obs, dtype=OBS_WIRE_DTYPE)
    return array.tobytes(), list(array.shape)


_ZEROS: dict[int, np.ndarray] = {}  # obs_dim -> zero vector for the finiteness check
# Inf * 0 sets the FPU's "invalid" flag, which numpy reports as a RuntimeWarning: for the check below
# that is the expected outcome (a BAD_OBSERVATION reply follows), not news for the log. np.errstate
# would silence it too, but costs more than the whole check on every act.
warnings.filterwarnings("ignore", "invalid value encountered in dot", RuntimeWarning, r"firmware_bridge\.protocol$")


def decode_observation(data: Any, shape: Any, dtype: Any, obs_dim: int) -> np.ndarray:
    """Validate an act's obs fields and return a (1, obs_dim) float32 view (no copy).

    Hot path: the happy case costs one frombuffer and one dot product with zeros.
    That is exact for detecting NaN/Inf: IEEE 754 makes every finite x * 0 a zero
    (so the sum is 0, whatever the magnitudes: nothing can overflow) while
    NaN * 0 and Inf * 0 are NaN, which propagates through the sum. It runs in
    the BLAS kernel, several times faster than a float64 sum or isfinite().all().
    """
    if type(data) is not bytes:
        raise ProtocolError(
            ErrorCode.BAD_OBSERVATION,
            f"field 'obs' must be msgpack bin (raw float32 bytes), got {wire_type(data)}"
            + (" (missing?)" if data is None else ""),
        )
    if dtype is not None and (type(dtype) is not str or dtype not in OBS_DTYPE_NAMES):
        raise ProtocolError(
            ErrorCode.BAD_OBSERVATION,
            f"obs dtype {dtype!r:.32} not supported; send '<f4' or 'float32' (little-endian float32)",
        )
    expected_bytes = obs_dim * 4
    if len(data) != expected_bytes:
        hint = " (float64 data? send float32)" if len(data) == obs_dim * 8 else ""
        raise ProtocolError(
            ErrorCode.BAD_OBSERVATION,
            f"obs has {len(data)} bytes, policy expects {expected_bytes} ({obs_dim} float32 values){hint}",
        )
    # type checks too: [1032.0] and [True, 1032] compare equal to the right shapes in Python.
    if (shape != [obs_dim] and shape != [1, obs_dim]) or any(type(d) is not int for d in shape):
        # !r: a str shape could carry a newline, and an error reply is one line.
        raise ProtocolError(
            ErrorCode.BAD_OBSERVATION, f"obs shape {shape!r:.64} invalid; expected [{obs_dim}] or [1, {obs_dim}] (ints)"
        )
    values = np.frombuffer(data, dtype=OBS_WIRE_DTYPE)
    zeros = _ZEROS.get(obs_dim)
    if zeros is None:
        zeros = _ZEROS[obs_dim] = np.zeros(obs_dim, dtype=OBS_WIRE_DTYPE)
    if not math.isfinite(values.dot(zeros)):
        bad = np.flatnonzero(~np.isfinite(values))
        raise ProtocolError(
            ErrorCode.BAD_OBSERVATION,
            f"obs contains {bad.size} NaN/Inf value(s), first at index {int(bad[0])}",
        )
    return values.reshape(1, obs_dim)


def decode_float32_bytes(data: bytes | None) -> np.ndarray | None:
    return None if data is None else np.frombuffer(data, dtype=OBS_WIRE_DTYPE)


# --------------------------------------------------------------------------- misc helpers


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def is_sha256_hex(text: Any) -> TypeGuard[str]:
    """64 lowercase hex digits, as docs/protocol.md section 4.2 writes a sha256."""
    return type(text) is str and _SHA256_RE.match(text) is not None


_ACTION_SPACE_RE = re.compile(r"^(discrete|box):([1-9][0-9]*)$")


def parse_action_space(text: str) -> tuple[str, int]:
    """'discrete:25' -> ('discrete', 25); 'box:4' -> ('box', 4). Raises ValueError."""
    match = _ACTION_SPACE_RE.match(text.strip())
    if not match:
        raise ValueError(f"action space {text[:64]!r} is not 'discrete:N' or 'box:N'")
    return match.group(1), int(match.group(2))


_TCP_ENDPOINT_RE = re.compile(r"^tcp://(\[[0-9a-fA-F:.]+\]|[^:/\[\]\s]+):(\*|[0-9]{1,5})$")


def parse_tcp_endpoint(endpoint: str, *, allow_wildcard_port: bool = False) -> tuple[str, int | None]:
    """'tcp://host:port' -> (host, port). Port None means '*' (bind to an ephemeral port).

    ZeroMQ itself silently wraps ports > 65535 (tcp://x:99999 binds to 34463),
    so we validate here rather than trust zmq to refuse bad input.
    """
    match = _TCP_ENDPOINT_RE.match(endpoint)
    if not match:
        raise ValueError(f"endpoint {endpoint!r} is not of the form tcp://HOST:PORT")
    host, port_text = match.group(1), match.group(2)
    if port_text == "*":
        if not allow_wildcard_port:
            raise ValueError(f"endpoint {endpoint!r} needs an explicit port")
        return host, None
    port = int(port_text)
    if not 1 <= port <= 65535:
        raise ValueError(f"endpoint {endpoint!r} has port {port} outside 1-65535")
    return host, port
