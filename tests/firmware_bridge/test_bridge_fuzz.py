"""Property test: whatever map a peer sends, the bridge answers with a protocol reply, never INTERNAL.

Runs BridgeServer.handle_payload in-process (real onnxruntime session, real bound ZeroMQ socket)
so hypothesis can try hundreds of messages quickly.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from firmware_bridge.actuator import MockFlightController
from firmware_bridge.policy import load_policy
from firmware_bridge.protocol import ErrorCode, MsgType, pack, unpack
from firmware_bridge.server import BridgeConfig, BridgeServer
from firmware_bridge.toy_policy import build_mlp_policy

DIM = 8


@pytest.fixture(scope="module")
def server() -> Iterator[BridgeServer]:
    bridge = BridgeServer(BridgeConfig(bind="tcp://127.0.0.1:*", max_message_bytes=1 << 20), MockFlightController())
    model = build_mlp_policy(DIM, 8, n_actions=4)
    bridge.install_policy(load_policy(model, expected_sha256=None, max_bytes=len(model)))
    yield bridge
    bridge.close()


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=True),
    st.text(max_size=12),
    st.binary(max_size=64),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
keys = st.sampled_from(["v", "type", "seq", "obs", "shape", "dtype", "onnx", "sha256", "name", "versions", "client"])
types = st.sampled_from(sorted(MsgType.REQUESTS) + ["error", "", "ACT"])
observations = st.builds(
    lambda xs: np.asarray(xs, "<f4").tobytes(), st.lists(st.floats(width=32), min_size=DIM, max_size=DIM)
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    fields=st.dictionaries(keys, values, max_size=6),
    msg_type=types,
    version=st.sampled_from([1, 1, 1, 0, 2, "1"]),
    seq=st.one_of(st.integers(min_value=0, max_value=2**32), st.none(), st.text(max_size=3)),
    obs=st.one_of(st.none(), observations),
    shape=st.sampled_from([None, [DIM], [1, DIM], [DIM, 1], [], "x"]),
)
def test_any_message_gets_a_protocol_reply(
    server: BridgeServer, fields: dict, msg_type: str, version: object, seq: object, obs: bytes | None, shape: object
) -> None:
    message = {**fields, "v": version, "type": msg_type, "seq": seq}
    if obs is not None:
        message["obs"] = obs
    if shape is not None:
        message["shape"] = shape
    reply = unpack(server.handle_payload(pack(message), 0))
    assert reply["type"] in MsgType.REQUESTS | {MsgType.ERROR}
    if reply["type"] == MsgType.ERROR:
        assert reply["code"] in ErrorCode.ALL - {ErrorCode.INTERNAL}, reply
        assert isinstance(reply["message"], str) and "\n" not in reply["message"]
    else:
        assert reply["type"] == msg_type and reply["seq"] == seq


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payload=st.binary(max_size=256))
def test_any_bytes_get_a_reply(server: BridgeServer, payload: bytes) -> None:
    reply = unpack(server.handle_payload(payload, 0))
    assert reply["type"] in MsgType.REQUESTS | {MsgType.ERROR}
    if reply["type"] == MsgType.ERROR:
        assert reply["code"] != ErrorCode.INTERNAL, reply


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    obs=st.one_of(observations, values),
    shape=st.one_of(st.sampled_from([[DIM], [1, DIM]]), values),
    dtype=st.one_of(st.sampled_from(["<f4", "float32"]), values),
)
def test_any_act_fields_get_act_or_bad_observation(
    server: BridgeServer, obs: object, shape: object, dtype: object
) -> None:
    reply = unpack(
        server.handle_payload(pack({"v": 1, "type": "act", "seq": 1, "obs": obs, "shape": shape, "dtype": dtype}), 0)
    )
    assert reply["type"] == MsgType.ACT or reply["code"] == ErrorCode.BAD_OBSERVATION, reply


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(onnx=st.one_of(st.binary(max_size=128), values), sha256=values, name=values)
def test_any_load_fields_get_a_policy_error(server: BridgeServer, onnx: object, sha256: object, name: object) -> None:
    message = {"v": 1, "type": "load_policy", "seq": 1, "onnx": onnx, "sha256": sha256, "name": name}
    reply = unpack(server.handle_payload(pack(message), 0))
    assert reply["type"] == MsgType.ERROR
    assert reply["code"] in {ErrorCode.BAD_MESSAGE, ErrorCode.HASH_MISMATCH, ErrorCode.BAD_POLICY}, reply
