"""``python -m quantize inspect MODEL.onnx``: interface, ops, weight bytes by type and all metadata."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from firmware_bridge.int8_kernels import int8_kernels
from quantize.model_io import QUANT_PREFIX, load_policy

# integer matmul ops: (input index of the weights, input index of the activations)
INTEGER_MATMULS = {
    "QGemm": (3, 0),
    "QLinearMatMul": (3, 0),
    "MatMulInteger": (1, 0),
    "DynamicQuantizeMatMul": (1, None),
    "MatMulIntegerToFloat": (1, 0),
}


def int8_scheme_from_weights(model: onnx.ModelProto) -> dict | None:
    """The integer scheme a file really computes with, read from its weights (not its metadata): for
    each integer matmul the weight type and largest |code|. uint8 activations x int8 weights beyond
    +-64 can saturate the AVX2 U8S8 kernel (firmware_bridge.int8_kernels); None for a float file."""
    inits = {t.name: t for t in model.graph.initializer}
    types = {v.name: v.type.tensor_type.elem_type for v in list(model.graph.input) + list(model.graph.value_info)}
    producers = {o: n for n in model.graph.node for o in n.output}
    largest, weight_types, act_types = 0, set(), set()

    def add_weights(codes: np.ndarray) -> None:
        nonlocal largest
        weight_types.add(codes.dtype.name)
        if codes.dtype == np.int8:
            largest = max(largest, int(np.abs(codes.astype(np.int16)).max(initial=0)))

    def activation_type(name: str) -> str:
        """uint8 unless the tensor is declared, or produced with a zero point, of another integer type."""
        if name in types:
            return onnx.helper.tensor_dtype_to_np_dtype(types[name]).name
        node = producers.get(name)
        zp = None
        if node is not None:
            zp_index = {"QuantizeLinear": 2, "QGemm": 8}.get(node.op_type)
            if zp_index is not None and len(node.input) > zp_index:
                zp = inits.get(node.input[zp_index])
        return onnx.helper.tensor_dtype_to_np_dtype(zp.data_type).name if zp is not None else "uint8"

    for node in model.graph.node:
        if node.op_type in INTEGER_MATMULS:
            w_index, a_index = INTEGER_MATMULS[node.op_type]
            w = inits.get(node.input[w_index]) if len(node.input) > w_index else None
            if w is None:
                continue
            add_weights(numpy_helper.to_array(w))
            # DynamicQuantizeMatMul quantizes its float input to uint8 itself
            act_types.add("uint8" if a_index is None else activation_type(node.input[a_index]))
        elif node.op_type == "DequantizeLinear" and node.input[0] in inits:
            # QDQ: weights reach a float Gemm/MatMul through DequantizeLinear; onnxruntime fuses them into its
            # integer kernels at load, and on x86 shifts int8 activations to uint8 first (measured: S8S8 QDQ gives
            # the same saturated logits as U8S8), so the activations count as uint8
            codes = numpy_helper.to_array(inits[node.input[0]])
            if codes.dtype in (np.int8, np.uint8) and codes.ndim == 2:
                add_weights(codes)
                act_types.add("uint8")
    if not weight_types:
        return None
    act = "s8" if act_types == {"int8"} else "u8"
    if weight_types == {"uint8"}:
        scheme = f"{act}u8"
    else:
        scheme = "s8s8" if act == "s8" else ("u8s7" if largest <= 64 else "u8s8")
    return {
        "scheme": scheme,
        "largest_weight_code": largest,
        "weight_types": sorted(weight_types),
        "activation_types": sorted(act_types),
    }


def describe(path: str | Path) -> dict:
    pm = load_policy(path)
    graph = pm.model.graph

    def shape(v: onnx.ValueInfoProto) -> str:
        t = v.type.tensor_type
        dims = [d.dim_param or str(d.dim_value) for d in t.shape.dim]
        return f"{onnx.helper.tensor_dtype_to_np_dtype(t.elem_type).name}[{', '.join(dims)}]"

    weight_bytes: Counter[str] = Counter()
    for t in graph.initializer:
        dtype = onnx.helper.tensor_dtype_to_np_dtype(t.data_type)
        count = 1
        for d in t.dims:
            count *= d
        weight_bytes[dtype.name] += count * dtype.itemsize
    return {
        "file": str(pm.path),
        "size_bytes": len(pm.data),
        "sha256": pm.sha256,
        "ir_version": pm.model.ir_version,
        "opsets": {o.domain or "ai.onnx": o.version for o in pm.model.opset_import},
        "inputs": {i.name: shape(i) for i in graph.input if i.name not in {t.name for t in graph.initializer}},
        "outputs": {o.name: shape(o) for o in graph.output},
        "ops": dict(Counter(n.op_type for n in graph.node)),
        "weight_bytes_by_type": dict(weight_bytes),
        "metadata": pm.metadata,
        "int8": int8_on_this_host(pm.model),
    }


def int8_on_this_host(model: onnx.ModelProto) -> dict | None:
    """The file's integer scheme, this host's int8 kernels (the probe) and whether they compute it exactly."""
    found = int8_scheme_from_weights(model)
    if found is None:
        return None
    kernels = int8_kernels()
    return found | {"exact_here": kernels.exact_for(found["scheme"]), "host_kernels": kernels.describe()}


def format_text(info: dict) -> str:
    lines = [
        f"{info['file']}: {info['size_bytes']:,} bytes, sha256 {info['sha256'][:16]}..., IR {info['ir_version']}, opsets {info['opsets']}",
        f"  inputs  {info['inputs']}",
        f"  outputs {info['outputs']}",
        f"  ops     {info['ops']}",
        f"  weights {', '.join(f'{k} {v:,} B' for k, v in info['weight_bytes_by_type'].items())}",
    ]
    if info.get("int8"):
        i8 = info["int8"]
        lines.append(
            f"  int8    scheme {i8['scheme']} (largest weight code {i8['largest_weight_code']}), "
            f"{'exact' if i8['exact_here'] else 'NOT exact'} on this host: {i8['host_kernels']}"
        )
    meta = info["metadata"]
    plain = {k: v for k, v in meta.items() if not k.startswith(QUANT_PREFIX)}
    quant = {k[len(QUANT_PREFIX) :]: v for k, v in meta.items() if k.startswith(QUANT_PREFIX)}
    lines.append("  metadata:")
    for k, v in plain.items():
        lines.append(f"    {k} = {v if len(v) <= 100 else v[:97] + '...'}")
    if quant:
        lines.append("  quantization:")
        for k, v in quant.items():
            if k == "layer_scales":
                continue
            lines.append(f"    {k} = {v}")
        if "layer_scales" in quant:
            lines.append("    layer scales (tensor: scale, zero point):")
            for name, entry in json.loads(quant["layer_scales"]).items():
                scale = entry.get(
                    "scale", f"{entry.get('scale_min')}..{entry.get('scale_max')} ({entry.get('channels')} ch)"
                )
                lines.append(f"      {name}: {scale}, zp {entry.get('zero_point', '-')} {entry.get('dtype', '')}")
    else:
        lines.append("  quantization: none (no airq.quant.* metadata)")
    return "\n".join(lines)
