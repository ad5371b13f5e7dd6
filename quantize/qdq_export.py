"""Int8 QDQ ONNX of an 8-bit FakeQuantActor: the exact integers QAT trained with.

Each weight is stored as its seed-formula code (floor or round(W/delta) + z, in [0, 255], as trained)
with its zero point z, as uint8 (the u8u8 scheme): QAT's asymmetric grid uses all 256 codes, and
full-range int8 weights saturate onnxruntime's AVX2 U8S8 kernel on x86 without VNNI (docs/quantize.md,
"Int8 that computes the same on every CPU"), while uint8 x uint8 is exact on every CPU. Activations get QuantizeLinear/DequantizeLinear with the frozen (delta, z) as
uint8. Biases are int32 with scale input_scale * weight_scale (what onnxruntime's QDQ fusion expects).
onnxruntime fuses DQ -> Gemm -> Q into integer QGemm at load time. The graph is built from the
trained modules rather than by rewriting an fp32 export, because onnxruntime's quantizer would pick
its own (symmetric) weight grid, not the one QAT trained on.
"""

from __future__ import annotations

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

from quantize.fakequant import ActivationQuant, FakeQuantActor, QuantLinear, fake_quant_weight, weight_params

OPSET = 17


def qdq_bytes_and_scales(actor: FakeQuantActor) -> tuple[onnx.ModelProto, dict]:
    if actor.bits != 8:
        raise ValueError("the int8 QDQ export needs an 8-bit actor")
    inits: list[TensorProto] = []
    nodes: list[onnx.NodeProto] = []
    scales: dict[str, dict] = {}

    def const(name: str, array: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(array, name))
        return name

    def qdq_activation(x: str, q: ActivationQuant, tag: str) -> tuple[str, float]:
        p = q.params()
        s = const(f"{tag}_scale", np.array(p.delta, np.float32))
        z = const(f"{tag}_zero_point", np.array(p.zero_point, np.uint8))
        nodes.append(helper.make_node("QuantizeLinear", [x, s, z], [f"{tag}_q"], name=f"{tag}_Q"))
        nodes.append(helper.make_node("DequantizeLinear", [f"{tag}_q", s, z], [f"{tag}_dq"], name=f"{tag}_DQ"))
        scales[tag] = {"scale": float(f"{p.delta:.6g}"), "zero_point": p.zero_point, "dtype": "uint8"}
        return f"{tag}_dq", p.delta

    def linear(x: str, x_scale: float, ql: QuantLinear, tag: str, out: str) -> None:
        p = weight_params(ql.linear.weight, 8)
        # codes from torch's own fake-quantized weights, so the file holds exactly what QAT computed
        with torch.no_grad():
            w_hat = fake_quant_weight(ql.linear.weight, 8, actor.rounding).double().numpy()
        codes = np.clip(np.rint(w_hat / p.delta) + p.zero_point, 0, 255).astype(np.uint8)
        wq = const(f"{tag}_weight_quantized", codes)
        ws = const(f"{tag}_weight_scale", np.array(p.delta, np.float32))
        wz = const(f"{tag}_weight_zero_point", np.array(p.zero_point, np.uint8))
        nodes.append(helper.make_node("DequantizeLinear", [wq, ws, wz], [f"{tag}_weight_dq"], name=f"{tag}_weight_DQ"))
        bias_scale = np.float32(x_scale) * np.float32(p.delta)
        b = ql.linear.bias.detach().double().numpy() if ql.linear.bias is not None else np.zeros(codes.shape[0])
        bq = const(f"{tag}_bias_quantized", np.rint(b / float(bias_scale)).astype(np.int32))
        bs = const(f"{tag}_bias_scale", np.array(bias_scale, np.float32))
        bz = const(f"{tag}_bias_zero_point", np.array(0, np.int32))
        nodes.append(helper.make_node("DequantizeLinear", [bq, bs, bz], [f"{tag}_bias_dq"], name=f"{tag}_bias_DQ"))
        nodes.append(
            helper.make_node("Gemm", [x, f"{tag}_weight_dq", f"{tag}_bias_dq"], [out], name=f"{tag}_Gemm", transB=1)
        )
        scales[f"{tag}.weight"] = {"scale": float(f"{p.delta:.6g}"), "zero_point": p.zero_point, "dtype": "uint8"}

    body = actor.body
    if body.input_quant is None:
        raise ValueError("the QDQ export needs activation quantizers (QAT / PTQ with activations)")
    x, x_scale = qdq_activation("obs", body.input_quant, "obs")
    layer = 0
    mods = list(body.layers)
    i = 0
    while i < len(mods):
        m = mods[i]
        if isinstance(m, QuantLinear):
            tag = f"layer{layer}"
            linear(x, x_scale, m, tag, f"{tag}_out")
            x = f"{tag}_out"
            layer += 1
        elif isinstance(m, torch.nn.ReLU):
            nodes.append(helper.make_node("Relu", [x], [f"{x}_relu"], name=f"{x}_Relu"))
            x = f"{x}_relu"
        elif isinstance(m, ActivationQuant):
            x, x_scale = qdq_activation(x, m, f"act{layer}")
        i += 1
    linear(x, x_scale, actor.head, "head", "logits")
    nodes.append(helper.make_node("ArgMax", ["logits"], ["action"], name="ArgMax", axis=1, keepdims=0))
    n_actions = actor.head.linear.out_features
    graph = helper.make_graph(
        nodes,
        "airq_qat_int8_qdq",
        [helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["batch", actor.obs_dim])],
        [
            helper.make_tensor_value_info("action", TensorProto.INT64, ["batch"]),
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", n_actions]),
        ],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="airq.quantize")
    model.ir_version = 10  # onnxruntime <= 1.31 rejects the onnx package's default (newer) IR
    onnx.checker.check_model(model)
    return model, scales
