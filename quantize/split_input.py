"""Split the first layer at the depth/state boundary of the observation (an exact fp32 rewrite,
applied before onnxruntime's quantizer).

The observation concatenates 1024 depth pixels in [0, 1] and 8 state features in [-1, 1], and a
trained first layer weighs them very differently: on Policy I the largest state-column weight is
0.98 (goal bearing), the largest depth-column weight 0.21. One per-tensor int8 scale for the whole
matrix (and one uint8 scale for the whole input) then spends most of the grid on 8 columns: depth
weights get ~5x coarser steps than they need, and held-out action agreement dropped to 97.7%
(measured here; per-output-channel scales do not help, the imbalance is across input columns).

    obs -> Slice[:1024] -> Gemm(W[:, :1024], b) --+
    obs -> Slice[1024:] -> Gemm(W[:, 1024:])    --+-> Add -> (rest of the network)

Each Gemm then gets its own weight and input scale. The extra ops cost about a microsecond.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from quantize.errors import QuantizeError

SPLIT_SUFFIX = "_split"


def split_first_layer(model: onnx.ModelProto, split_at: int) -> tuple[onnx.ModelProto, list[str]]:
    """Rewrite in place; returns (model, [depth Gemm name, state Gemm name]). Needs the first layer to
    be a Gemm (alpha = beta = 1, no transA) on ``obs`` with initializer weights, as torch exports it."""
    graph = model.graph
    users = [n for n in graph.node if "obs" in n.input]
    if len(users) != 1 or users[0].op_type != "Gemm":
        raise QuantizeError("cannot split the input layer: 'obs' does not feed exactly one Gemm")
    node = users[0]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if attrs.get("transA", 0) or attrs.get("alpha", 1.0) != 1.0 or attrs.get("beta", 1.0) != 1.0:
        raise QuantizeError("cannot split the input layer: Gemm with transA/alpha/beta")
    inits = {t.name: t for t in graph.initializer}
    if node.input[0] != "obs" or node.input[1] not in inits:
        raise QuantizeError("cannot split the input layer: weights are not an initializer")
    trans_b = int(attrs.get("transB", 0))
    w = numpy_helper.to_array(inits[node.input[1]])
    in_axis = 1 if trans_b else 0
    if not 0 < split_at < w.shape[in_axis]:
        raise QuantizeError(f"cannot split the input layer at {split_at} (input width {w.shape[in_axis]})")
    w_depth, w_state = np.split(w, [split_at], axis=in_axis)
    base = node.name or "input_layer"
    names = {
        k: f"{base}{SPLIT_SUFFIX}_{k}"
        for k in (
            "depth",
            "state",
            "w_depth",
            "w_state",
            "h_depth",
            "h_state",
            "starts0",
            "ends0",
            "starts1",
            "ends1",
            "axes",
        )
    }
    big = np.iinfo(np.int64).max
    new_inits = [
        numpy_helper.from_array(np.ascontiguousarray(w_depth), names["w_depth"]),
        numpy_helper.from_array(np.ascontiguousarray(w_state), names["w_state"]),
        numpy_helper.from_array(np.array([0], np.int64), names["starts0"]),
        numpy_helper.from_array(np.array([split_at], np.int64), names["ends0"]),
        numpy_helper.from_array(np.array([split_at], np.int64), names["starts1"]),
        numpy_helper.from_array(np.array([big], np.int64), names["ends1"]),
        numpy_helper.from_array(np.array([1], np.int64), names["axes"]),
    ]
    gemm_depth, gemm_state = f"{base}{SPLIT_SUFFIX}_depth_Gemm", f"{base}{SPLIT_SUFFIX}_state_Gemm"
    bias = list(node.input[2:3])
    new_nodes = [
        helper.make_node(
            "Slice",
            ["obs", names["starts0"], names["ends0"], names["axes"]],
            [names["depth"]],
            name=f"{base}{SPLIT_SUFFIX}_depth_Slice",
        ),
        helper.make_node(
            "Slice",
            ["obs", names["starts1"], names["ends1"], names["axes"]],
            [names["state"]],
            name=f"{base}{SPLIT_SUFFIX}_state_Slice",
        ),
        helper.make_node(
            "Gemm", [names["depth"], names["w_depth"]] + bias, [names["h_depth"]], name=gemm_depth, transB=trans_b
        ),
        helper.make_node(
            "Gemm", [names["state"], names["w_state"]], [names["h_state"]], name=gemm_state, transB=trans_b
        ),
        helper.make_node(
            "Add", [names["h_depth"], names["h_state"]], list(node.output), name=f"{base}{SPLIT_SUFFIX}_Add"
        ),
    ]
    position = list(graph.node).index(node)
    rest = [n for n in graph.node if n is not node]
    del graph.node[:]
    graph.node.extend(rest[:position] + new_nodes + rest[position:])
    graph.initializer.extend(new_inits)
    if not any(node.input[1] in n.input for n in graph.node):  # the old full matrix is now unused
        kept = [t for t in graph.initializer if t.name != node.input[1]]
        del graph.initializer[:]
        graph.initializer.extend(kept)
    return model, [gemm_depth, gemm_state]


def float_split_sum(model: onnx.ModelProto) -> list[str]:
    """After static quantization of a split model: let the two first-layer QGemms output float (their
    int32 accumulators times input scale x weight scale) into the Add, instead of requantizing each to
    uint8 and dequantizing again. onnxruntime's quantizer gives each half its own uint8 output range,
    calibrated on the pre-ReLU sums (on Policy I-hard [-15.5, 11.4] in steps of 0.106 for the depth
    half), a second rounding of the first layer that the ReLU output is then quantized after anyway.
    QGemm without y_scale / y_zero_point is onnxruntime's float-output form (the matmul stays int8 x
    uint8 -> int32). Rewrites in place; returns the names of the QGemms changed."""
    graph = model.graph
    users: dict[str, list[onnx.NodeProto]] = {}
    for n in graph.node:
        for i in n.input:
            users.setdefault(i, []).append(n)
    changed, dropped = [], set()
    for node in graph.node:
        if node.op_type != "QGemm" or SPLIT_SUFFIX not in node.name or len(node.input) < 9:
            continue
        after = users.get(node.output[0], [])
        if len(after) != 1 or after[0].op_type != "DequantizeLinear":
            continue
        dq = after[0]
        nxt = users.get(dq.output[0], [])
        if len(nxt) != 1 or nxt[0].op_type != "Add":
            continue
        dropped.add(dq.output[0])
        del node.input[7:]
        node.output[0] = dq.output[0]
        changed.append(node.name)
    if len(changed) != 2:
        raise QuantizeError(
            f"float split sum: expected the two split first-layer QGemms feeding one Add, found {len(changed)}"
        )
    kept = [n for n in graph.node if not (n.op_type == "DequantizeLinear" and n.output[0] in dropped)]
    del graph.node[:]
    graph.node.extend(kept)
    used = {i for n in graph.node for i in n.input}
    inits = [t for t in graph.initializer if t.name in used]
    del graph.initializer[:]
    graph.initializer.extend(inits)
    return changed
