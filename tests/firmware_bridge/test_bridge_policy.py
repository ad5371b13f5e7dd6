"""firmware_bridge.policy: real onnxruntime sessions on small generated models, in-process."""

from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import TensorProto, helper

from firmware_bridge.policy import Policy, PolicyLoadError, load_policy
from firmware_bridge.protocol import ErrorCode, sha256_hex
from firmware_bridge.toy_policy import build_mlp_policy, default_action_table

DIM = 32
LIMIT = 1 << 24


def load(model: bytes, **kwargs: object) -> Policy:
    return load_policy(model, expected_sha256=kwargs.pop("sha", sha256_hex(model)), max_bytes=LIMIT, **kwargs)  # type: ignore[arg-type]


def reject(model: bytes, code: str = ErrorCode.BAD_POLICY, **kwargs: object) -> str:
    with pytest.raises(PolicyLoadError) as info:
        load(model, **kwargs)
    assert info.value.code == code
    assert "\n" not in info.value.message
    return info.value.message


def obs2d(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((1, DIM)).astype(np.float32)


def test_discrete_policy_matches_its_own_outputs_and_table() -> None:
    model = build_mlp_policy(DIM, 16, n_actions=5, seed=3)
    policy = load(model, name="toy")
    assert (policy.obs_dim, policy.action_space, policy.input_name) == (DIM, "discrete:5", "obs")
    assert policy.output_names == ["action", "logits"]
    assert policy.setpoint_mapping == "action_table"
    assert policy.size_bytes == len(model) and policy.sha256 == sha256_hex(model)
    assert policy.metadata["airq.precision"] == "fp32"
    table = default_action_table(5)
    for seed in range(5):
        x = obs2d(seed)
        action, setpoint, logits = policy.act(x)
        ref_action, ref_logits = policy.session.run(["action", "logits"], {"obs": x})
        assert action == int(ref_action[0]) == int(np.argmax(ref_logits))
        assert setpoint == table[action]
        np.testing.assert_array_equal(np.frombuffer(logits, "<f4"), ref_logits[0])


def test_logits_only_model_is_argmaxed() -> None:
    with_action = load(build_mlp_policy(DIM, 16, n_actions=6, seed=4))
    logits_only = load(build_mlp_policy(DIM, 16, n_actions=6, seed=4, action_output=False))
    assert logits_only.argmax_output and logits_only.output_names == ["logits"]
    for seed in range(5):
        assert logits_only.act(obs2d(seed))[0] == with_action.act(obs2d(seed))[0]


def test_box_policy_drives_setpoint_directly() -> None:
    policy = load(build_mlp_policy(DIM, 16, kind="box", act_dim=4))
    action, setpoint, logits = policy.act(obs2d())
    assert policy.action_space == "box:4" and policy.setpoint_mapping == "box"
    assert isinstance(action, list) and len(action) == 4 and setpoint == action and logits is None
    assert all(-1.0 <= a <= 1.0 for a in action)  # tanh head


def test_box_of_other_width_and_discrete_without_table_have_no_setpoint() -> None:
    box3 = load(build_mlp_policy(DIM, 16, kind="box", act_dim=3))
    assert box3.setpoint_mapping == "none" and box3.act(obs2d())[1] is None
    no_table = load(build_mlp_policy(DIM, 16, n_actions=5, action_table=None))
    assert no_table.setpoint_mapping == "none" and no_table.act(obs2d())[1] is None


def test_rss_delta_and_load_time_are_measured() -> None:
    policy = load(build_mlp_policy(DIM, 16))
    assert policy.load_ns > 0
    assert policy.rss_delta_bytes is not None


def test_hash_mismatch() -> None:
    model = build_mlp_policy(DIM, 16)
    message = reject(model, ErrorCode.HASH_MISMATCH, sha="0" * 64)
    assert sha256_hex(model) in message


def test_too_large() -> None:
    model = build_mlp_policy(DIM, 16)
    with pytest.raises(PolicyLoadError) as info:
        load_policy(model, expected_sha256=None, max_bytes=len(model) - 1)
    assert info.value.code == ErrorCode.TOO_LARGE


@pytest.mark.parametrize(
    "model",
    [b"", b"this is not an onnx file", build_mlp_policy(DIM, 16)[:-200], build_mlp_policy(DIM, 16)[:100]],
    ids=["empty", "text", "truncated-tail", "truncated-head"],
)
def test_not_a_model(model: bytes) -> None:
    reject(model)


def _graph_model(inputs: list, outputs: list, nodes: list, metadata: dict[str, str] | None = None) -> bytes:
    model = helper.make_model(
        helper.make_graph(nodes, "g", inputs, outputs), opset_imports=[helper.make_opsetid("", 17)]
    )
    model.ir_version = 10
    helper.set_model_props(model, metadata or {})
    return model.SerializeToString()


def test_two_inputs_rejected() -> None:
    a = helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["batch", DIM])
    b = helper.make_tensor_value_info("extra", TensorProto.FLOAT, ["batch", DIM])
    out = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", DIM])
    assert "exactly 1 input" in reject(
        _graph_model([a, b], [out], [helper.make_node("Add", ["obs", "extra"], ["logits"])])
    )


def test_integer_input_rejected() -> None:
    a = helper.make_tensor_value_info("obs", TensorProto.INT64, ["batch", DIM])
    out = helper.make_tensor_value_info("logits", TensorProto.INT64, ["batch", DIM])
    assert "must be float32" in reject(_graph_model([a], [out], [helper.make_node("Identity", ["obs"], ["logits"])]))


def test_dynamic_width_needs_metadata() -> None:
    a = helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["batch", "width"])
    out = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "width"])
    nodes = [helper.make_node("Identity", ["obs"], ["logits"])]
    assert "obs_dim unknown" in reject(_graph_model([a], [out], nodes))
    policy = load(_graph_model([a], [out], nodes, {"airq.obs_dim": "6", "airq.action_space": "discrete:6"}))
    assert policy.obs_dim == 6 and policy.act(np.eye(1, 6, 4, dtype=np.float32))[0] == 4


@pytest.mark.parametrize(
    ("metadata", "fragment"),
    [
        ({"airq.obs_dim": str(DIM + 1)}, "disagrees with metadata airq.obs_dim"),
        ({"airq.obs_dim": "many"}, "not an integer"),
        ({"airq.action_space": "box:4"}, "describe a discrete policy"),
        ({"airq.action_space": "discrete:7"}, "disagrees with metadata airq.action_space"),
        ({"airq.action_space": "cont"}, "airq.action_space"),
        ({"airq.action_table": "[[0, 0, 0, 0]]"}, "list of 25 setpoints"),
        ({"airq.action_table": "{not json"}, "not valid JSON"),
        ({"airq.action_table": json.dumps([[0, 0, 0]] * 25)}, "airq.action_table[0]"),
        ({"airq.action_table": json.dumps([[0, 0, 0, "x"]] * 25)}, "finite numbers"),
    ],
)
def test_bad_metadata_rejected(metadata: dict[str, str], fragment: str) -> None:
    assert fragment in reject(build_mlp_policy(DIM, 16, extra_metadata=metadata))


def test_outputs_without_action_and_several_floats_rejected() -> None:
    a = helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["batch", DIM])
    o1 = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", DIM])
    o2 = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", DIM])
    nodes = [helper.make_node("Identity", ["obs"], ["x"]), helper.make_node("Relu", ["obs"], ["y"])]
    assert "no 'action' output" in reject(_graph_model([a], [o1, o2], nodes))


def test_policy_file_loads_like_its_bytes(discrete_model: bytes, discrete_model_file) -> None:
    # serve --policy hands onnxruntime the path (so the bridge never holds the file's bytes): the
    # loaded policy must be the very one the same bytes give over the wire.
    from firmware_bridge.policy import load_policy, load_policy_file
    from firmware_bridge.protocol import sha256_hex

    from_file = load_policy_file(str(discrete_model_file))
    from_bytes = load_policy(discrete_model, expected_sha256=None, max_bytes=len(discrete_model))
    assert from_file.sha256 == from_bytes.sha256 == sha256_hex(discrete_model)
    assert from_file.size_bytes == len(discrete_model)
    x = np.random.default_rng(0).standard_normal((1, from_file.obs_dim)).astype(np.float32)
    assert from_file.act(x)[0] == from_bytes.act(x)[0]
