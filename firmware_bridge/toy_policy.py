"""Build small random MLP policies that follow the airq ONNX contract.

For the bench and the tests only: needs the ``onnx`` package (host/dev extra),
which is imported inside the function so the bridge never depends on it.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np


def default_action_table(n_actions: int) -> list[list[float]]:
    """n setpoints [vx, vy, vz, yaw_rate]; the first is hover so action 0 is always safe."""
    rng = np.random.default_rng(n_actions)
    table = np.round(rng.uniform(-1.0, 1.0, size=(n_actions, 4)), 3)
    table[0] = 0.0
    return table.tolist()


def build_mlp_policy(
    obs_dim: int = 1032,
    hidden: int = 256,
    *,
    kind: str = "discrete",
    n_actions: int = 25,
    act_dim: int = 4,
    action_output: bool = True,
    action_table: list[list[float]] | None | str = "default",
    extra_metadata: dict[str, str] | None = None,
    seed: int = 0,
) -> bytes:
    """Serialized ONNX model: obs -> Gemm -> Relu -> Gemm -> (logits, ArgMax action) or Tanh box action.

    ``action_output=False`` gives a discrete model whose only output is the
    float logits (the bridge then argmaxes). IR version 10 / opset 17 because
    onnxruntime 1.31 and older refuse the onnx package's newer default IR version
    (the locked 1.32.0 takes it; a Pi may run an older onnxruntime).
    """
    # deferred: onnx: ~0.2 s to import, paid only where used
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    width = n_actions if kind == "discrete" else act_dim
    w1 = (rng.standard_normal((obs_dim, hidden)) / np.sqrt(obs_dim)).astype(np.float32)
    b1 = (rng.standard_normal(hidden) * 0.1).astype(np.float32)
    w2 = (rng.standard_normal((hidden, width)) / np.sqrt(hidden)).astype(np.float32)
    b2 = (rng.standard_normal(width) * 0.1).astype(np.float32)
    initializers = [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"))]

    nodes = [
        helper.make_node("Gemm", ["obs", "w1", "b1"], ["h1"]),
        helper.make_node("Relu", ["h1"], ["h1_relu"]),
    ]
    metadata: dict[str, Any] = {"airq.obs_dim": str(obs_dim), "airq.precision": "fp32", "airq.preset": "toy-mlp"}
    if kind == "discrete":
        logits_name = "logits"
        nodes.append(helper.make_node("Gemm", ["h1_relu", "w2", "b2"], [logits_name]))
        outputs = [helper.make_tensor_value_info(logits_name, TensorProto.FLOAT, ["batch", n_actions])]
        if action_output:
            nodes.append(helper.make_node("ArgMax", [logits_name], ["action"], axis=1, keepdims=0))
            outputs.insert(0, helper.make_tensor_value_info("action", TensorProto.INT64, ["batch"]))
        metadata["airq.action_space"] = f"discrete:{n_actions}"
        table = default_action_table(n_actions) if action_table == "default" else action_table
        if table is not None:
            metadata["airq.action_table"] = json.dumps(table)
    elif kind == "box":
        nodes.append(helper.make_node("Gemm", ["h1_relu", "w2", "b2"], ["pre_tanh"]))
        nodes.append(helper.make_node("Tanh", ["pre_tanh"], ["action"]))
        outputs = [helper.make_tensor_value_info("action", TensorProto.FLOAT, ["batch", act_dim])]
        metadata["airq.action_space"] = f"box:{act_dim}"
    else:
        raise ValueError(f"kind must be 'discrete' or 'box', not {kind!r}")
    metadata.update(extra_metadata or {})

    graph = helper.make_graph(
        nodes,
        "airq_toy_mlp",
        [helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["batch", obs_dim])],
        outputs,
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="airq.toy_policy")
    model.ir_version = 10
    helper.set_model_props(model, metadata)
    onnx.checker.check_model(model)
    return model.SerializeToString()
