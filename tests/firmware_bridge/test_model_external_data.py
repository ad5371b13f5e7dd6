"""An uploaded model must never make the bridge read a file: external data is refused before onnxruntime.

The exploit: a ~300-byte model whose one initializer lives in *external data* at a relative
path, graph Gather(weights, Cast(obs[:, 0])) -> logits. onnxruntime resolves the path against the
bridge's working directory, so each act returned bytes of that file as logits.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from bridge_helpers import RawClient
from onnx import TensorProto, helper

from firmware_bridge.model_check import (
    _CHILDREN,
    TENSOR_DATA_LOCATION,
    TENSOR_EXTERNAL_DATA,
    TENSOR_NAME,
    UnsafeModel,
    check_self_contained,
)
from firmware_bridge.protocol import PROTOCOL_VERSION, pack, sha256_hex

SECRET = b"airq-secret-7f3a9c1e" * 64  # 1280 bytes: 320 float32 "logits" rows of the exploit
ROWS, WIDTH = 16, 20  # 16 x 20 float32 = 1280 bytes


def _external(name: str, location: str, shape: list[int]) -> TensorProto:
    tensor = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=shape)
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", str(4 * int(np.prod(shape))))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    return tensor


def exploit_model(location: str = "secret.txt") -> bytes:
    """The issue's model: logits = weights[int(obs[0])], weights read from `location` by onnxruntime."""
    nodes = [
        helper.make_node("Slice", ["obs", "zero", "one", "one"], ["first"]),  # obs[:, 0:1]
        helper.make_node("Reshape", ["first", "flat"], ["first_flat"]),
        helper.make_node("Cast", ["first_flat"], ["index"], to=TensorProto.INT64),
        helper.make_node("Gather", ["weights", "index"], ["logits"], axis=0),
    ]
    graph = helper.make_graph(
        nodes,
        "leak",
        [helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", WIDTH])],
        initializer=[
            _external("weights", location, [ROWS, WIDTH]),
            helper.make_tensor("zero", TensorProto.INT64, [1], [0]),
            helper.make_tensor("one", TensorProto.INT64, [1], [1]),
            helper.make_tensor("flat", TensorProto.INT64, [1], [-1]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    helper.set_model_props(model, {"airq.obs_dim": "4"})
    return model.SerializeToString()


def _upload(client: RawClient, model: bytes, seq: int = 1) -> dict:
    return client.call(
        {
            "v": PROTOCOL_VERSION,
            "type": "load_policy",
            "seq": seq,
            "onnx": model,
            "sha256": sha256_hex(model),
            "name": "leak",
        }
    )


def test_the_exploit_really_reads_the_file_without_the_check(tmp_path, monkeypatch):
    # Proves the test model is the real exploit: onnxruntime alone, from memory, leaks the file.
    import onnxruntime as ort

    (tmp_path / "secret.txt").write_bytes(SECRET)
    monkeypatch.chdir(tmp_path)
    session = ort.InferenceSession(exploit_model(), providers=["CPUExecutionProvider"])
    logits = session.run(["logits"], {"obs": np.zeros((1, 4), np.float32)})[0]
    assert logits.tobytes() == SECRET[: 4 * WIDTH]


def test_bridge_refuses_external_data_and_leaks_nothing(tmp_path, monkeypatch, start_bridge, discrete_model_file, obs):
    (tmp_path / "secret.txt").write_bytes(SECRET)
    monkeypatch.chdir(tmp_path)  # the bridge process starts in the folder that holds the file
    bridge = start_bridge("--policy", str(discrete_model_file))
    client = RawClient(bridge.endpoint)
    try:
        reply = _upload(client, exploit_model())
        assert reply["type"] == "error" and reply["code"] == "BAD_POLICY", reply
        assert "external data" in reply["message"] and "secret.txt" in reply["message"]
        replies = [reply]
        # The previous policy keeps flying; whatever the acts return, never a byte of the file.
        for seq in range(2, 6):
            replies.append(
                client.call(
                    {
                        "v": PROTOCOL_VERSION,
                        "type": "act",
                        "seq": seq,
                        "obs": obs.tobytes(),
                        "shape": [obs.size],
                        "dtype": "<f4",
                    }
                )
            )
            assert replies[-1]["type"] == "act", replies[-1]
        replies.append(client.call({"v": PROTOCOL_VERSION, "type": "status", "seq": 9}))
        assert replies[-1]["policy"]["sha256"] != sha256_hex(exploit_model())
        wire = b"".join(pack(r) for r in replies)
        for start in range(0, len(SECRET) - 8, 4):
            assert SECRET[start : start + 8] not in wire
    finally:
        client.close()


@pytest.mark.parametrize("location", ["secret.txt", "../secret.txt", "/etc/os-release", "sub/x.bin"])
def test_checker_names_the_file_for_any_location(location):
    with pytest.raises(UnsafeModel, match=re.escape(f"file {location!r}")):
        check_self_contained(exploit_model(location))


def _model_with_constant(tensor: TensorProto, *, in_if_branch: bool = False) -> bytes:
    const = helper.make_node("Constant", [], ["c"], value=tensor)
    out = helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 4])
    if in_if_branch:
        branch = helper.make_graph(
            [const, helper.make_node("Identity", ["c"], ["logits_b"])],
            "branch",
            [],
            [helper.make_tensor_value_info("logits_b", TensorProto.FLOAT, [1, 4])],
        )
        nodes = [
            helper.make_node("ReduceSum", ["obs"], ["s"], keepdims=0),
            helper.make_node("Cast", ["s"], ["cond"], to=TensorProto.BOOL),
            helper.make_node("If", ["cond"], ["logits"], then_branch=branch, else_branch=branch),
        ]
    else:
        nodes = [const, helper.make_node("Add", ["c", "obs"], ["logits"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("obs", TensorProto.FLOAT, [1, 4])], [out])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_checker_finds_external_data_in_constants_and_subgraphs():
    external = _external("c", "data.bin", [1, 4])
    for model in (_model_with_constant(external), _model_with_constant(external, in_if_branch=True)):
        with pytest.raises(UnsafeModel, match="'data.bin'"):
            check_self_contained(model)
    # data_location EXTERNAL alone (no entries) is refused too: onnxruntime would still look for a file.
    bare = TensorProto(name="c", data_type=TensorProto.FLOAT, dims=[1, 4])
    bare.data_location = TensorProto.EXTERNAL
    with pytest.raises(UnsafeModel, match="external data"):
        check_self_contained(_model_with_constant(bare, in_if_branch=True))
    # A sparse initializer whose values are external.
    graph = onnx.parser.parse_graph("g (float[1,4] obs) => (float[1,4] logits) { logits = Identity(obs) }")
    sparse = helper.make_sparse_tensor(
        _external("sv", "vals.bin", [2]), helper.make_tensor("si", TensorProto.INT64, [2], [0, 3]), [4]
    )
    graph.sparse_initializer.append(sparse)
    with pytest.raises(UnsafeModel, match="'vals.bin'"):
        check_self_contained(helper.make_model(graph).SerializeToString())


def test_checker_accepts_every_shipped_model():
    models = sorted(Path(__file__).resolve().parents[2].glob("models/*.onnx"))
    assert len(models) >= 15
    for path in models:
        check_self_contained(path.read_bytes())
    check_self_contained(
        _model_with_constant(helper.make_tensor("c", TensorProto.FLOAT, [1, 4], [1, 2, 3, 4]), in_if_branch=True)
    )


@pytest.mark.parametrize("garbage", [b"\x0a\xff\xff\xff\xff\x0f", b"\x0b", b"\x3a\x05abc", b"\x00\x01", b"\x80" * 12])
def test_unparseable_bytes_are_refused(garbage):
    with pytest.raises(UnsafeModel, match="not a valid ONNX protobuf"):
        check_self_contained(garbage)


def test_truncated_model_is_refused():
    model = exploit_model()
    with pytest.raises(UnsafeModel):
        check_self_contained(model[: len(model) // 2])


def test_field_numbers_match_the_installed_onnx():
    fields = {
        "model": onnx.ModelProto,
        "graph": onnx.GraphProto,
        "node": onnx.NodeProto,
        "attribute": onnx.AttributeProto,
        "sparse_tensor": onnx.SparseTensorProto,
        "function": onnx.FunctionProto,
        "training_info": onnx.TrainingInfoProto,
    }
    kinds = {
        "graph": onnx.GraphProto,
        "node": onnx.NodeProto,
        "attribute": onnx.AttributeProto,
        "tensor": onnx.TensorProto,
        "sparse_tensor": onnx.SparseTensorProto,
        "function": onnx.FunctionProto,
        "training_info": onnx.TrainingInfoProto,
    }
    for kind, message in fields.items():
        by_number = message.DESCRIPTOR.fields_by_number
        for number, child in _CHILDREN[kind].items():
            assert by_number[number].message_type.full_name == kinds[child].DESCRIPTOR.full_name, (kind, number)
        # Every message-typed field that can hold a tensor or graph is walked.
        for number, field in by_number.items():
            if field.message_type is not None and field.message_type.full_name in {
                k.DESCRIPTOR.full_name for k in kinds.values()
            }:
                assert number in _CHILDREN[kind], f"{kind}.{field.name} ({number}) is not walked"
    tensor = onnx.TensorProto.DESCRIPTOR.fields_by_number
    assert tensor[TENSOR_EXTERNAL_DATA].name == "external_data"
    assert tensor[TENSOR_DATA_LOCATION].name == "data_location" and tensor[TENSOR_NAME].name == "name"
