"""firmware_bridge.protocol: pure encode/decode/validation, no sockets."""

from __future__ import annotations

import subprocess
import sys

import msgpack
import numpy as np
import pytest

from firmware_bridge.protocol import (
    PROTOCOL_VERSION,
    ErrorCode,
    MsgType,
    ProtocolError,
    act_request,
    decode_observation,
    encode_observation,
    error_reply,
    negotiate_version,
    pack,
    parse_action_space,
    parse_tcp_endpoint,
    unpack,
    validate_envelope,
)

DIM = 8


def test_observation_round_trip_is_exact_and_zero_copy() -> None:
    obs = np.arange(DIM, dtype=np.float64) / 3  # float64 in: cast to float32 on the wire
    data, shape = encode_observation(obs)
    assert shape == [DIM] and len(data) == DIM * 4
    decoded = decode_observation(data, shape, "<f4", DIM)
    assert decoded.shape == (1, DIM) and decoded.dtype == np.float32
    np.testing.assert_array_equal(decoded[0], obs.astype(np.float32))
    assert not decoded.flags.owndata  # a view on the received bytes, not a copy


def test_wire_format_is_little_endian_float32() -> None:
    data, _ = encode_observation(np.array([1.0, -2.0], dtype=">f8"))
    assert data == np.array([1.0, -2.0], dtype="<f4").tobytes() == b"\x00\x00\x80?\x00\x00\x00\xc0"


def test_batch_of_one_shape_accepted() -> None:
    data, _ = encode_observation(np.zeros((1, DIM), np.float32))
    assert decode_observation(data, [1, DIM], None, DIM).shape == (1, DIM)


@pytest.mark.parametrize(
    ("data", "shape", "dtype", "fragment"),
    [
        (b"\x00" * (DIM * 4 - 4), [DIM], "<f4", "expects 32"),
        (b"\x00" * (DIM * 8), [DIM], None, "float64 data?"),
        (b"\x00" * (DIM * 4), [2, DIM // 2], "<f4", "shape"),
        (b"\x00" * (DIM * 4), [DIM, 1], "<f4", "shape"),
        (b"\x00" * (DIM * 4), "8", "<f4", "shape"),
        (b"\x00" * (DIM * 4), [DIM], "float64", "dtype"),
        ([0.0] * DIM, [DIM], "<f4", "must be msgpack bin"),
    ],
)
def test_bad_observation_rejected(data: object, shape: object, dtype: object, fragment: str) -> None:
    with pytest.raises(ProtocolError) as info:
        decode_observation(data, shape, dtype, DIM)
    assert info.value.code == ErrorCode.BAD_OBSERVATION
    assert fragment in info.value.message


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_observation_rejected_with_index(bad: float) -> None:
    obs = np.zeros(DIM, np.float32)
    obs[5] = bad
    with pytest.raises(ProtocolError, match="first at index 5") as info:
        decode_observation(obs.tobytes(), [DIM], None, DIM)
    assert info.value.code == ErrorCode.BAD_OBSERVATION


def test_huge_finite_values_are_not_mistaken_for_inf() -> None:
    obs = np.full(DIM, np.finfo(np.float32).max, np.float32)  # a float32 sum would overflow
    assert decode_observation(obs.tobytes(), [DIM], None, DIM).shape == (1, DIM)


@pytest.mark.parametrize("index", [0, 1, 7, 8, 15, 16, 515, 1024, 1030, 1031])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_found_anywhere_in_a_full_size_observation(index: int, bad: float) -> None:
    """The finiteness check at the policies' real width (a BLAS dot: unrolled blocks and a tail)."""
    dim = 1032
    rng = np.random.default_rng(index)
    obs = (rng.standard_normal(dim) * 1e30).astype(np.float32)
    obs[::97] = np.finfo(np.float32).max  # huge finite values around must not hide or fake anything
    assert decode_observation(obs.tobytes(), [dim], None, dim).shape == (1, dim)
    obs[index] = bad
    with pytest.raises(ProtocolError, match=f"first at index {index}"):
        decode_observation(obs.tobytes(), [1, dim], "<f4", dim)


@pytest.mark.parametrize("payload", [b"", b"\xc1", b"\x93\x01", pack({"a": 1}) + b"trailing"])
def test_unpack_rejects_malformed_msgpack(payload: bytes) -> None:
    with pytest.raises(ProtocolError) as info:
        unpack(payload)
    assert info.value.code == ErrorCode.BAD_MESSAGE


def test_unpack_rejects_non_map() -> None:
    with pytest.raises(ProtocolError, match="must be a msgpack map"):
        unpack(msgpack.packb([1, 2, 3]))


@pytest.mark.parametrize(
    ("message", "code"),
    [
        ({"v": 1, "type": "act"}, ErrorCode.BAD_MESSAGE),
        ({"v": 1, "type": "act", "seq": -1}, ErrorCode.BAD_MESSAGE),
        ({"v": 1, "type": 5, "seq": 1}, ErrorCode.BAD_MESSAGE),
        ({"type": "act", "seq": 1}, ErrorCode.BAD_MESSAGE),
        ({"v": 99, "type": "act", "seq": 1}, ErrorCode.VERSION_MISMATCH),
        ({"v": 1, "type": "fly", "seq": 1}, ErrorCode.UNKNOWN_TYPE),
        ({"v": 1, "type": "error", "seq": 1}, ErrorCode.UNKNOWN_TYPE),
    ],
)
def test_envelope_validation(message: dict, code: str) -> None:
    with pytest.raises(ProtocolError) as info:
        validate_envelope(message)
    assert info.value.code == code


def test_hello_negotiates_highest_common_version_at_any_v() -> None:
    assert validate_envelope({"v": 7, "type": "hello", "seq": 3}) == ("hello", 3)
    assert negotiate_version({"v": 7, "versions": [7, PROTOCOL_VERSION, 0]}) == PROTOCOL_VERSION
    with pytest.raises(ProtocolError) as info:
        negotiate_version({"v": 7, "versions": [7, 8]})
    assert info.value.code == ErrorCode.VERSION_MISMATCH


def test_request_and_error_shapes() -> None:
    message = unpack(pack(act_request(12, np.zeros(DIM, np.float32))))
    assert message["v"] == PROTOCOL_VERSION and message["type"] == MsgType.ACT and message["seq"] == 12
    assert isinstance(message["obs"], bytes)  # bin, not str
    error = error_reply(12, ErrorCode.NO_POLICY, "none loaded")
    assert set(error) == {"v", "type", "seq", "code", "message"}


@pytest.mark.parametrize(("text", "parsed"), [("discrete:25", ("discrete", 25)), ("box:4", ("box", 4))])
def test_parse_action_space(text: str, parsed: tuple[str, int]) -> None:
    assert parse_action_space(text) == parsed


@pytest.mark.parametrize("text", ["discrete", "box:0", "box:-1", "multi:3", "discrete:2.5"])
def test_parse_action_space_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_action_space(text)


def test_parse_tcp_endpoint() -> None:
    assert parse_tcp_endpoint("tcp://raspberrypi.local:5555") == ("raspberrypi.local", 5555)
    assert parse_tcp_endpoint("tcp://[::1]:5555") == ("[::1]", 5555)
    assert parse_tcp_endpoint("tcp://127.0.0.1:*", allow_wildcard_port=True) == ("127.0.0.1", None)
    for bad in ("foo", "tcp://host", "udp://host:1", "tcp://host:0", "tcp://host:99999", "tcp://127.0.0.1:*"):
        with pytest.raises(ValueError):
            parse_tcp_endpoint(bad)


def test_device_package_imports_only_device_dependencies() -> None:
    """On the Pi only numpy/onnxruntime/pyzmq/msgpack exist, and the host imports the protocol without onnxruntime.

    Whitelist, not blacklist: after importing the four dependencies, importing every runtime
    module of the bridge may add nothing but stdlib modules and firmware_bridge itself.
    """
    script = """
import sys
import firmware_bridge.protocol
assert 'onnxruntime' not in sys.modules and 'zmq' not in sys.modules, 'protocol imports too much'
import msgpack, numpy, onnxruntime, zmq, zmq.utils.monitor
before = {m.split('.')[0] for m in sys.modules}
import firmware_bridge.serve, firmware_bridge.server, firmware_bridge.policy, firmware_bridge.actuator
import firmware_bridge.device, firmware_bridge.launcher, firmware_bridge.systemd, firmware_bridge.bench
import firmware_bridge.client
import firmware_bridge.toy_policy
added = {m.split('.')[0] for m in sys.modules} - before - set(sys.stdlib_module_names) - {'firmware_bridge'}
assert not added, sorted(added)
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
