"""A trial's acting network to ONNX (the airq policy contract: ``obs`` float32 [batch, obs_dim] -> ``action``,
``logits``), and its PTQ files through quantize.ptq (onnxruntime's quantizers).

Image policies (MinAtar, Atari) take the flat observation and reshape it inside the graph, so every file
keeps the contract's 2-D input. Static int8 quantizes Conv as well as Gemm/MatMul/Relu (the CNN policies) and
keeps the logits layer in float (quantize.ptq), in two schemes from the same calibration: ``int8`` with 8-bit
weights as the seed's int8 (s8s8: int8 activations x int8 weights in [-127, 127]) and ``int8-w7`` with 7-bit
weights (u8s7, airq's shipped scheme: uint8 activations x weights in [-64, 64]). Both compute the same integers
on AVX2, VNNI and Arm (firmware_bridge.int8_kernels); s8s8 has no fast x86 kernel, which a study of rewards
does not mind.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import onnx

from policies.export import actor_to_onnx_bytes, with_metadata
from quantize.model_io import load_policy, save_atomic, set_metadata
from quantize.options import StaticInt8Options
from quantize.ptq import convert_fp16, quantize_dynamic_int8, quantize_static_int8
from quarl.config import TrialSpec
from quarl.errors import QuarlError


def export_actor(actor, path: Path, spec: TrialSpec, entry) -> Path:
    """Write ``actor`` (quarl.actor.DeployedActor) as ONNX with its trial's metadata; checks onnxruntime gives
    the torch outputs on random observations before it returns."""
    # deferred: torch: seconds to import
    import torch

    meta = {
        "airq.env_id": spec.env_id,
        "airq.algo": spec.algo,
        "airq.seed": str(spec.seed),
        "airq.obs_dim": str(actor.obs_dim),
        "airq.obs_shape": ",".join(map(str, actor.obs_shape)),
        "airq.output": actor.output,
        "airq.hyperparams_source": entry.source,
        "airq.precision": "fp32",
    }
    model = onnx.load_from_string(with_metadata(actor_to_onnx_bytes(actor), meta))
    materialize_shared_initializers(model)
    out = save_atomic(model, path, size_key=None)
    obs = np.random.default_rng(0).random((64, actor.obs_dim), dtype=np.float32)
    # deferred: onnxruntime (via quantize.runtime): ~0.2 s to import, paid only where used
    from quantize.runtime import session

    got = session(out.read_bytes()).run(["logits"], {"obs": obs})[0]
    with torch.no_grad():
        want = actor(torch.as_tensor(obs))[1].numpy()
    if not np.allclose(got, want, rtol=1e-4, atol=1e-4):
        raise QuarlError(f"{path}: the ONNX export differs from the torch network (max {np.abs(got - want).max():.3g})")
    return out


def materialize_shared_initializers(model: onnx.ModelProto) -> None:
    """The exporter stores equal tensors once and feeds the duplicates through Identity nodes (e.g. two conv
    biases still at their zero init); onnxruntime's static quantizer needs every bias as an initializer."""
    inits = {t.name: t for t in model.graph.initializer}
    for node in list(model.graph.node):
        if node.op_type == "Identity" and node.input[0] in inits:
            copy = onnx.TensorProto()
            copy.CopyFrom(inits[node.input[0]])
            copy.name = node.output[0]
            model.graph.initializer.append(copy)
            model.graph.node.remove(node)


STATIC_SCHEMES = {"int8": "s8s8", "int8-w7": "u8s7"}  # static int8 targets -> quantize.options.INT8_SCHEMES
DYNAMIC_SCHEME = "u8s7"  # quantize_dynamic_int8's default: uint8 activations at run time need 7-bit weights


def quantize_files(fp32: Path, calibration_obs: np.ndarray, targets: tuple[str, ...], out_dir: Path) -> dict:
    """{target: (path, seconds to build)} for fp16, static int8 (8- and 7-bit weights) and dynamic int8."""
    src = load_policy(fp32)
    built = {}
    for target in targets:
        t0 = time.perf_counter()
        meta = {"airq.precision": target}
        if target == "fp16":
            model = convert_fp16(src)
        elif target in STATIC_SCHEMES:
            opts = StaticInt8Options(split_input=False, extra_op_types=("Conv",), scheme=STATIC_SCHEMES[target])
            model = quantize_static_int8(src, calibration_obs, opts)
            meta = {"airq.precision": "int8", "airq.quant.scheme": opts.scheme}
        elif target == "int8-dynamic":
            model = quantize_dynamic_int8(
                src, keep_last_layer_fp32=False, scheme=DYNAMIC_SCHEME
            )  # every layer's weights
            meta["airq.quant.scheme"] = DYNAMIC_SCHEME
        else:
            raise QuarlError(f"unknown PTQ target {target!r}")
        set_metadata(model, src.metadata | meta)
        path = save_atomic(model, out_dir / f"{target}.onnx")
        built[target] = (path, time.perf_counter() - t0)
    return built
