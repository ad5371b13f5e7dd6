"""``python -m quantize inspect MODEL.onnx``: interface, ops, weight bytes by type and all metadata."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import onnx

from quantize.model_io import QUANT_PREFIX, load_policy


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
        "file": str(pm.path), "size_bytes": len(pm.data), "sha256": pm.sha256,
        "ir_version": pm.model.ir_version, "opsets": {o.domain or "ai.onnx": o.version for o in pm.model.opset_import},
        "inputs": {i.name: shape(i) for i in graph.input if i.name not in {t.name for t in graph.initializer}},
        "outputs": {o.name: shape(o) for o in graph.output},
        "ops": dict(Counter(n.op_type for n in graph.node)),
        "weight_bytes_by_type": dict(weight_bytes),
        "metadata": pm.metadata,
    }


def format_text(info: dict) -> str:
    lines = [
        f"{info['file']}: {info['size_bytes']:,} bytes, sha256 {info['sha256'][:16]}..., IR {info['ir_version']}, opsets {info['opsets']}",
        f"  inputs  {info['inputs']}",
        f"  outputs {info['outputs']}",
        f"  ops     {info['ops']}",
        f"  weights {', '.join(f'{k} {v:,} B' for k, v in info['weight_bytes_by_type'].items())}",
    ]
    meta = info["metadata"]
    plain = {k: v for k, v in meta.items() if not k.startswith(QUANT_PREFIX)}
    quant = {k[len(QUANT_PREFIX):]: v for k, v in meta.items() if k.startswith(QUANT_PREFIX)}
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
                scale = entry.get("scale", f"{entry.get('scale_min')}..{entry.get('scale_max')} ({entry.get('channels')} ch)")
                lines.append(f"      {name}: {scale}, zp {entry.get('zero_point', '-')} {entry.get('dtype', '')}")
    else:
        lines.append("  quantization: none (no airq.quant.* metadata)")
    return "\n".join(lines)
