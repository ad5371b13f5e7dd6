"""Post-training quantization of a policy ONNX file with onnxruntime.quantization.

* ``int8``: static int8, weights and activations, ranges calibrated (MinMax) on observations from
  seeded rollouts of the same policy. QOperator format (QGemm), signed int8 weights in the scheme's
  range (u8s7 by default: [-64, 64]), per output channel by default (``--no-per-channel``: per tensor),
  unsigned int8 activations. The first layer is split at the depth/state boundary first (exact fp32
  rewrite, quantize.split_input) so depth and state columns get their own scales. The last layer
  (logits) stays fp32: quantized (``--quantize-logits``), it tied the two largest logits exactly on
  0.26-3.05% of held-out observations of the five shipped policies and lowered agreement with fp32 by
  0.2-1.1 points, for a batch-1 latency within 3% (``python scripts/logit_ties.py``; figures, machine and
  versions in docs/quantize.md).
  Why QOperator, u8s7 and per-channel: see docs/quantize.md.
* ``int8-dynamic``: weights int8, activations quantized on the fly per call (the seed's TFLite
  "dynamic range" method, kept for comparison).
* ``fp16``: weights and compute in fp16, inputs/outputs kept fp32 (the file halves; this CPU runs
  it no faster).
"""

from __future__ import annotations

import copy
import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from onnx import numpy_helper

from nav_env.backends import backend_named, dynamics_for
from nav_env.config import ConfigError, load_level, observation_overrides_from_metadata, state_size_of
from quantize.errors import QuantizeError
from quantize.model_io import QUANT_PREFIX, PolicyModel, json_compact, load_policy, save_atomic, serialize, set_metadata
from quantize.options import INT8_SCHEMES, Int8Scheme, StaticInt8Options  # noqa: F401 - re-exported
from quantize.split_input import float_split_sum, split_first_layer

if TYPE_CHECKING:  # torch is imported only when distillation runs
    from quantize.distill import DistillOptions

TARGETS = ("int8", "int8-dynamic", "fp16")


LINEAR_OPS = ("Gemm", "MatMul")


def prepared_copy(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy the quantizer accepts: stale value_info removed (torch exports carry shapes that make
    quantize_dynamic fail with ShapeInferenceError, onnxruntime issue #25890) and every node named
    (nodes_to_exclude works by name)."""
    m = copy.deepcopy(model)
    del m.graph.value_info[:]
    used = {n.name for n in m.graph.node if n.name}
    for i, node in enumerate(m.graph.node):
        if not node.name:
            name = f"{node.op_type}_{i}"
            while name in used:
                name += "_"
            node.name = name
            used.add(name)
    return m


def logits_layer(model: onnx.ModelProto) -> str | None:
    """Name of the Gemm/MatMul that computes ``logits`` (walking back through Add/Identity)."""
    producer = {o: n for n in model.graph.node for o in n.output}
    name = "logits"
    for _ in range(8):
        node = producer.get(name)
        if node is None:
            return None
        if node.op_type in LINEAR_OPS:
            return node.name
        if node.op_type not in ("Add", "Identity", "Reshape", "Flatten"):
            return None
        inits = {t.name for t in model.graph.initializer}
        nxt = [i for i in node.input if i in producer and i not in inits]
        if not nxt:
            return None
        name = nxt[0]
    return None


def _run_quantizer(prepared: onnx.ModelProto, quantize) -> onnx.ModelProto:
    """onnxruntime's quantizers work on files: run one in a private temp dir, return the model."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # the quantizer logs "consider pre-processing" on the root logger
    try:
        with tempfile.TemporaryDirectory(prefix="airq-quant-") as tmp:
            src, dst = Path(tmp) / "fp32.onnx", Path(tmp) / "quant.onnx"
            onnx.save(prepared, src)
            quantize(str(src), str(dst))
            return onnx.load(str(dst))
    finally:
        root.setLevel(level)


def quantize_static_int8(src: PolicyModel, calibration_obs: np.ndarray, opts: StaticInt8Options) -> onnx.ModelProto:
    # deferred: onnxruntime: ~0.2 s to import, paid only where used
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    # deferred: onnxruntime (via quantize.calibration): ~0.2 s to import, paid only where used
    from quantize.calibration import ObservationReader

    if len(calibration_obs) == 0:
        raise QuantizeError("calibration produced no observations")
    prepared = prepared_copy(src.model)
    if opts.split_input:
        split_first_layer(prepared, src.obs_dim - state_size_of(src.metadata))
    last = logits_layer(prepared) if opts.keep_last_layer_fp32 else None
    fmt = {"qoperator": QuantFormat.QOperator, "qdq": QuantFormat.QDQ}[opts.quant_format]
    method = {"minmax": CalibrationMethod.MinMax, "percentile": CalibrationMethod.Percentile}[opts.calibrate_method]

    if opts.scheme not in INT8_SCHEMES:
        raise QuantizeError(f"int8 scheme must be one of {', '.join(INT8_SCHEMES)}, got {opts.scheme!r}")
    scheme = INT8_SCHEMES[opts.scheme]

    def run(a: str, b: str) -> None:
        quantize_static(
            a,
            b,
            ObservationReader(calibration_obs, equal_batches=opts.calibrate_method != "minmax"),
            quant_format=fmt,
            per_channel=opts.per_channel,
            activation_type=getattr(QuantType, scheme.activation_type),
            weight_type=getattr(QuantType, scheme.weight_type),
            reduce_range=scheme.reduce_range,
            op_types_to_quantize=list(LINEAR_OPS) + ["Relu", *opts.extra_op_types],
            nodes_to_exclude=[last] if last else None,
            calibrate_method=method,
            extra_options=dict(opts.extra),
        )

    out = _run_quantizer(prepared, run)
    if opts.use_float_split_sum:
        float_split_sum(out)
    out.metadata_props.extend(copy.deepcopy(src.model.metadata_props)) if not out.metadata_props else None
    return out


def quantize_dynamic_int8(
    src: PolicyModel, keep_last_layer_fp32: bool = False, scheme: str = "u8s7"
) -> onnx.ModelProto:
    # deferred: onnxruntime: ~0.2 s to import, paid only where used
    from onnxruntime.quantization import QuantType, quantize_dynamic

    if scheme not in ("u8s7", "u8s8"):
        raise QuantizeError(f"int8-dynamic takes --scheme u8s7 or u8s8 (uint8 activations at run time), got {scheme!r}")

    prepared = prepared_copy(src.model)
    last = logits_layer(prepared) if keep_last_layer_fp32 else None

    def run(a: str, b: str) -> None:
        quantize_dynamic(
            a,
            b,
            op_types_to_quantize=list(LINEAR_OPS),
            per_channel=False,
            weight_type=QuantType.QInt8,
            nodes_to_exclude=[last] if last else None,
            reduce_range=INT8_SCHEMES[scheme].reduce_range,
        )

    out = _run_quantizer(prepared, run)
    if not out.metadata_props:
        out.metadata_props.extend(copy.deepcopy(src.model.metadata_props))
    return out


def convert_fp16(src: PolicyModel) -> onnx.ModelProto:
    # deferred: onnxruntime: ~0.2 s to import, paid only where used
    from onnxruntime.transformers.float16 import convert_float_to_float16

    # keep_io_types: the contract's obs/logits stay float32; Cast nodes sit at the edges.
    out = convert_float_to_float16(prepared_copy(src.model), keep_io_types=True)
    topological_sort(out.graph)  # the converter appends its input Casts after their consumers
    return out


def topological_sort(graph: onnx.GraphProto) -> None:
    """Reorder nodes so each comes after the producers of its inputs (Kahn's algorithm, stable)."""
    available = {i.name for i in graph.input} | {t.name for t in graph.initializer} | {""}
    pending, ordered = list(graph.node), []
    while pending:
        ready = [n for n in pending if all(i in available for i in n.input)]
        if not ready:
            raise QuantizeError("the converted graph has a cycle or a dangling input")
        for n in ready:
            ordered.append(n)
            available.update(n.output)
        pending = [n for n in pending if n not in ready]
    nodes = [copy.deepcopy(n) for n in ordered]
    del graph.node[:]
    graph.node.extend(nodes)


def scales_summary(model: onnx.ModelProto) -> dict[str, dict]:
    """Per quantized tensor: scale (or min/max/count for per-channel) and zero point, from the
    initializers the quantizer wrote (names end in _scale / _zero_point)."""
    inits = {t.name: t for t in model.graph.initializer}
    summary: dict[str, dict] = {}
    for name, tensor in inits.items():
        if not name.endswith("_scale"):
            continue
        base = name[: -len("_scale")]
        scale = numpy_helper.to_array(tensor).astype(np.float64).ravel()
        entry: dict = (
            {"scale": float(f"{scale[0]:.6g}")}
            if scale.size == 1
            else {
                "scale_min": float(f"{scale.min():.6g}"),
                "scale_max": float(f"{scale.max():.6g}"),
                "channels": int(scale.size),
            }
        )
        zp = inits.get(base + "_zero_point")
        if zp is not None:
            z = numpy_helper.to_array(zp).ravel()
            entry["zero_point"] = int(z[0]) if z.size == 1 else f"{z.size} values"
            entry["dtype"] = onnx.helper.tensor_dtype_to_np_dtype(zp.data_type).name
        summary[base] = entry
    return summary


def quantization_metadata(
    src: PolicyModel, precision: str, method: str, bits: int, extra: dict, scales: dict | None
) -> dict[str, str]:
    values = {
        "airq.precision": precision,
        QUANT_PREFIX + "source_sha256": src.sha256,
        QUANT_PREFIX + "source_file": src.path.name,
        QUANT_PREFIX + "source_size_bytes": str(len(src.data)),
        QUANT_PREFIX + "method": method,
        QUANT_PREFIX + "bits": str(bits),
    }
    if scales is not None:
        values[QUANT_PREFIX + "layer_scales"] = json_compact(scales)
    values.update({QUANT_PREFIX + k: (v if isinstance(v, str) else json_compact(v)) for k, v in extra.items()})
    return values


def finish(out: onnx.ModelProto, src: PolicyModel, metadata: dict[str, str]) -> onnx.ModelProto:
    """Source metadata first (interface, env, training), then the precision and quantization keys."""
    del out.metadata_props[:]
    out.metadata_props.extend(copy.deepcopy(src.model.metadata_props))
    set_metadata(out, metadata)
    out.producer_name = "airq.quantize"
    onnx.checker.check_model(out)
    return out


@dataclass
class PtqReport:
    output: Path
    target: str
    size_bytes: int
    source_size_bytes: int
    calibration_samples: int
    heldout_samples: int
    heldout_agreement: float | None

    def line(self) -> str:
        agree = (
            f", held-out action agreement {self.heldout_agreement:.2%} over {self.heldout_samples} obs"
            if self.heldout_agreement is not None
            else ""
        )
        return (
            f"{self.output}: {self.target}, {self.size_bytes:,} bytes ({self.source_size_bytes / self.size_bytes:.2f}x smaller)"
            f"{agree}"
        )


def resolve_levels(levels: list[str] | None, metadata: dict[str, str]) -> list[str]:
    """Calibration levels: as given (several are pooled), else the model's own training level.
    Pooling default + hard did not help Policy II on hard: paired differences on hard over three
    calibration seeds were -0.6..-1.3 points calibrated on default and -0.6..-1.2 on default + hard
    (the spread between calibration seeds is as large as the effect)."""
    if levels:
        return list(dict.fromkeys(levels))
    return [metadata.get("airq.level") or "default"]


NOMINAL_DYNAMICS = "nominal"  # --dynamics nominal: the backend's own vehicle, whatever the model trained on


def calibration_dynamics(src: PolicyModel, backend: str, given: str | None) -> tuple[Any, str]:
    """The vehicle dynamics calibration and held-out rollouts fly, and its file ("" for the backend's own): ``given``
    (a dynamics TOML, or "nominal"), else the model's ``airq.dynamics``, the physics it trained on (its randomized
    ranges included): calibrating on a vehicle the policy never flew puts its activation ranges elsewhere."""
    path = given if given is not None else src.metadata.get("airq.dynamics", "")
    if not path or path == NOMINAL_DYNAMICS:
        return None, ""
    try:
        return dynamics_for(backend, path), str(path)
    except ConfigError as e:
        where = "--dynamics" if given is not None else f"{src.path}: airq.dynamics (the physics it trained on)"
        raise QuantizeError(f"{where}: {e}; pass --dynamics FILE or --dynamics nominal") from None


def collect_levels(
    act, cfgs: list, episodes: int, seed: int, max_samples: int, backend: str = "embedded", dynamics: Any = None
) -> np.ndarray:
    """``episodes`` seeded episodes on each level (on the simulator ``backend`` with vehicle ``dynamics``), pooled; a
    seeded subset of ``max_samples`` rows."""
    # deferred: onnxruntime (via quantize.calibration): ~0.2 s to import, paid only where used
    from quantize.calibration import collect_observations

    obs = np.concatenate(
        [collect_observations(act, cfg, episodes, seed, backend=backend, dynamics=dynamics) for cfg in cfgs]
    )
    if len(obs) > max_samples:
        obs = obs[np.sort(np.random.default_rng(seed).choice(len(obs), max_samples, replace=False))]
    return obs


def torch_version() -> str:
    # deferred: torch: seconds to import
    import torch

    return torch.__version__


def distill_model(
    out: onnx.ModelProto,
    src_session,
    act,
    cfgs: list,
    episodes: int,
    seed: int,
    max_samples: int,
    distill,
    weight_max: int,
    backend: str = "embedded",
    dynamics: Any = None,
) -> tuple[onnx.ModelProto, dict]:
    """quantize.distill on observations of ``episodes`` fp32 episodes per level (seeds seed + j), the
    fp32 source's logits as targets; DAgger rounds fly the int8 model being trained."""
    # deferred: onnxruntime, torch (via quantize.calibration, quantize.distill, quantize.runtime): ~0.2 s to import, paid only where used
    from quantize.calibration import collect_observations
    from quantize.distill import DAGGER_SEED, distill_static_int8
    from quantize.runtime import policy_fn, run_logits, session

    obs = collect_levels(act, cfgs, episodes, seed, max_samples, backend, dynamics)

    def teacher(x: np.ndarray) -> np.ndarray:
        return run_logits(src_session, x)[1]

    def rollout(model: onnx.ModelProto, r: int) -> np.ndarray:
        student = policy_fn(session(serialize(model)))
        return np.concatenate(
            [
                collect_observations(
                    student, cfg, distill.dagger_episodes, DAGGER_SEED + 10_000 * r, backend=backend, dynamics=dynamics
                )
                for cfg in cfgs
            ]
        )

    return distill_static_int8(out, teacher, obs, distill, rollout, weight_max)


def quantize_file(
    model_path: str | Path,
    target: str,
    output: str | Path,
    *,
    calibration_episodes: int = 100,
    seed: int | None = None,
    levels: list[str] | None = None,
    heldout_episodes: int = 20,
    max_calibration_samples: int = 20_000,
    options: StaticInt8Options | None = None,
    distill: DistillOptions | None = None,
    distill_episodes: int = 1000,
    max_distill_samples: int = 200_000,
    dynamics: str | None = None,
) -> PtqReport:
    """The ``ptq`` command: checks, calibrates (int8), quantizes, measures held-out action agreement
    against the source, writes metadata and saves atomically."""
    # deferred: onnxruntime (via quantize.calibration, quantize.runtime): ~0.2 s to import, paid only where used
    from quantize.calibration import CALIBRATION_SEED, HELDOUT_SEED
    from quantize.runtime import policy_fn, run_logits, session

    if target not in TARGETS:
        raise QuantizeError(f"--to must be one of {', '.join(TARGETS)}, got {target!r}")
    if calibration_episodes < 1:
        raise QuantizeError(f"--calibration-episodes must be >= 1, got {calibration_episodes}")
    if heldout_episodes < 0:
        raise QuantizeError(f"--heldout-episodes must be >= 0, got {heldout_episodes}")
    opts_in = options or StaticInt8Options()
    if (distill is not None or opts_in.float_split_sum) and target != "int8":
        raise QuantizeError("--distill-steps and --float-split-sum apply to --to int8 only")
    if opts_in.float_split_sum and (not opts_in.split_input or opts_in.quant_format != "qoperator"):
        raise QuantizeError("--float-split-sum needs the depth/state split and --format qoperator")
    if distill is not None:
        # deferred: torch (via quantize.distill): seconds to import
        from quantize.distill import DAGGER_SEED

        distill.check()
        if opts_in.quant_format != "qoperator":
            raise QuantizeError("--distill-steps needs --format qoperator (it trains the QGemm codes)")
        if distill_episodes < 1:
            raise QuantizeError(f"--distill-episodes must be >= 1, got {distill_episodes}")
        first = CALIBRATION_SEED if seed is None else seed
        spans = [
            ("distillation", first, first + distill_episodes),
            ("held-out", HELDOUT_SEED, HELDOUT_SEED + heldout_episodes),
        ]
        if distill.rounds > 1:
            spans.append(
                ("DAgger", DAGGER_SEED + 10_000, DAGGER_SEED + 10_000 * (distill.rounds - 1) + distill.dagger_episodes)
            )
            if distill.dagger_episodes > 10_000:
                raise QuantizeError("--distill-dagger-episodes must be <= 10000 (each round has 10,000 seeds)")
        for i, (na, a0, a1) in enumerate(spans):
            for nb, b0, b1 in spans[i + 1 :]:
                if a0 < b1 and b0 < a1:
                    raise QuantizeError(f"{na} seeds {a0}..{a1 - 1} overlap {nb} seeds {b0}..{b1 - 1}")
    # Peek at the metadata for the level before checking the input size against that level's env.
    probe = load_policy(model_path)
    level_names = resolve_levels(levels, probe.metadata)
    # the model's own camera size (a widened model: policies.widen), else the level's
    cfgs = [load_level(name, observation_overrides_from_metadata(probe.metadata) or None) for name in level_names]
    src = load_policy(model_path, expected_obs_dim=cfgs[0].obs_dim)
    for name, cfg in zip(level_names, cfgs):
        if cfg.obs_dim != src.obs_dim:
            raise QuantizeError(
                f"{src.path}: input size {src.obs_dim} does not match level {name!r}'s observation size {cfg.obs_dim}"
            )
    if src.metadata.get("airq.precision", "fp32") not in ("fp32", ""):
        raise QuantizeError(f"{src.path}: already {src.metadata['airq.precision']}; quantize the fp32 model")
    try:
        src_session = session(src.data)
    except Exception as e:
        raise QuantizeError(f"{src.path}: onnxruntime cannot load it: {str(e).splitlines()[0][:200]}") from None
    act = policy_fn(src_session)
    calib_seed = CALIBRATION_SEED if seed is None else seed
    # calibrate where the policy was trained to fly: the simulator its export recorded (docs/dynamics.md)
    try:
        backend = backend_named(src.metadata.get("airq.backend"))
    except ValueError as e:
        raise QuantizeError(f"{src.path}: airq.backend: {e}") from None
    if not backend.in_process:
        raise QuantizeError(f"{src.path}: trained in the {backend.name} backend, which cannot calibrate here")
    extra: dict = {"levels": ",".join(level_names)}
    if not backend.is_default:
        extra["backend"] = backend.name
    vehicle, dynamics_source = calibration_dynamics(src, backend.name, dynamics)
    if dynamics_source:
        extra["calibration_dynamics"] = dynamics_source
    if target == "int8":
        opts = opts_in
        obs = collect_levels(
            act, cfgs, calibration_episodes, calib_seed, max_calibration_samples, backend.name, vehicle
        )
        out = quantize_static_int8(src, obs, opts)
        if distill is not None:
            out, distill_summary = distill_model(
                out,
                src_session,
                act,
                cfgs,
                distill_episodes,
                calib_seed,
                max_distill_samples,
                distill,
                INT8_SCHEMES[opts.scheme].weight_max,
                backend.name,
                vehicle,
            )
        scheme = INT8_SCHEMES[opts.scheme]
        n_depth = src.obs_dim - state_size_of(src.metadata)  # where the first layer splits depth from state
        method = (
            f"onnxruntime static int8 {opts.quant_format.upper()}, scheme {opts.scheme}: {scheme.description}, "
            f"{'per-channel' if opts.per_channel else 'per-tensor'} weights, activations calibrated ({opts.calibrate_method})"
            f"{', first layer split depth/state' if opts.split_input else ''}"
            f"{', logits layer fp32' if opts.keep_last_layer_fp32 else ''}"
            f"{', split halves summed in float (QGemm float output)' if opts.use_float_split_sum else ''}"
        )
        if distill is not None:
            method += (
                f"; integer codes distilled toward the fp32 logits (straight-through, fixed scales; "
                f"{distill.steps} steps x {distill.rounds} round(s), seed {distill.seed})"
            )
        extra |= {
            "calibration_episodes": f"{calibration_episodes} per level",
            "calibration_seed": str(calib_seed),
            "calibration_samples": str(len(obs)),
            "format": opts.quant_format,
            "per_channel": str(opts.per_channel).lower(),
            "scheme": opts.scheme,
            "weight_type": scheme.weight_type[1:].lower(),
            "activation_type": scheme.activation_type[1:].lower(),
            "weight_range": f"[-{scheme.weight_max}, {scheme.weight_max}]"
            if scheme.weight_type == "QInt8"
            else "[0, 255]",
            "calibrate_method": opts.calibrate_method,
            "input_split": f"obs[:{n_depth}] | obs[{n_depth}:]" if opts.split_input else "none",
            "fp32_layers": json_compact([logits_layer(prepared_copy(src.model))] if opts.keep_last_layer_fp32 else []),
        }
        if opts.use_float_split_sum:  # only when used: keeps the other artifacts' metadata as it was
            extra["float_split_sum"] = "true"
        if distill is not None:
            extra |= {
                "distill": json_compact(
                    {
                        "episodes": f"{distill_episodes} per level",
                        "seed_first_episode": calib_seed,
                        "samples": distill_summary["samples"],
                        "steps": distill.steps,
                        "rounds": distill.rounds,
                        "dagger_episodes": f"{distill.dagger_episodes} per level" if distill.rounds > 1 else "0",
                        "dagger_seed": DAGGER_SEED if distill.rounds > 1 else None,
                        "lr_codes": distill.lr,
                        "margin": distill.margin,
                        "margin_weight": distill.margin_weight,
                        "batch": distill.batch,
                        "torch_seed": distill.seed,
                        "torch": torch_version(),
                        "weight_codes_changed": distill_summary["weight_codes_changed"],
                        "per_round": distill_summary["rounds"],
                    }
                )
            }
        bits, n_calib = 8, len(obs)
    elif target == "int8-dynamic":
        out = quantize_dynamic_int8(src, scheme=opts_in.scheme)
        weight_max = INT8_SCHEMES[opts_in.scheme].weight_max
        method = (
            f"onnxruntime dynamic int8: weights int8 in [-{weight_max}, {weight_max}] per-tensor, activations quantized "
            f"at run time (the seed's method)"
        )
        extra |= {
            "format": "qoperator",
            "per_channel": "false",
            "scheme": opts_in.scheme,
            "weight_type": "int8",
            "activation_type": "uint8 (dynamic)",
            "weight_range": f"[-{weight_max}, {weight_max}]",
            "calibration_episodes": "0",
        }
        bits, n_calib = 8, 0
    else:
        out = convert_fp16(src)
        method = "fp16 weights and compute, fp32 inputs/outputs (onnxruntime.transformers.float16, keep_io_types)"
        bits, n_calib = 16, 0
    agreement, n_held = None, 0
    if heldout_episodes > 0:
        try:
            q_session = session(serialize(out))
        except Exception as e:
            raise QuantizeError(
                f"the quantized model does not run in onnxruntime: {str(e).splitlines()[0][:200]}"
            ) from None
        per_level, same = {}, []
        for name, cfg in zip(level_names, cfgs):
            held = collect_levels(
                act, [cfg], heldout_episodes, HELDOUT_SEED, max_calibration_samples, backend.name, vehicle
            )
            q_actions, _ = run_logits(q_session, held)
            ref_actions, _ = run_logits(src_session, held)
            same.append(q_actions == ref_actions)
            per_level[name] = round(float(np.mean(same[-1])), 6)
        agreement, n_held = float(np.mean(np.concatenate(same))), sum(len(x) for x in same)
        extra |= {
            "heldout_agreement": f"{agreement:.6f}",
            "heldout_agreement_by_level": json_compact(per_level),
            "heldout_episodes": f"{heldout_episodes} per level",
            "heldout_seed": str(HELDOUT_SEED),
            "heldout_samples": str(n_held),
        }
    # deferred: onnxruntime: ~0.2 s to import, paid only where used
    import onnxruntime

    extra["onnxruntime"] = onnxruntime.__version__
    scales = scales_summary(out) if target != "fp16" else None
    precision = target
    finish(out, src, quantization_metadata(src, precision, method, bits, extra, scales))
    path = save_atomic(out, output)
    return PtqReport(path, target, path.stat().st_size, len(src.data), n_calib, n_held, agreement)
