"""Weight versions as ONNX bytes for ActorQ's actors: an ONNX template built once, new weights written into it.

An fp32 learner publishes a new weight version (``actorq.nets.actor_weights``: ``{name: float32 array}``)
every so often; each actor needs it as an onnxruntime model. Exporting the torch network and running
``quantize_static`` again for every version costs seconds (about 8.5 s for the 37.9M-parameter
ActorQ MLP). Here the graph is made once per run and only the numbers change:

* ``Int8Template``: the template is quantize's own static-int8 recipe, ``quantize.ptq.quantize_static_int8``
  (onnxruntime ``quantize_static``: QOperator ``QGemm``s, first layer split at the depth/state boundary,
  logits layer fp32, scheme u8s7; by default per-tensor without the float split sum, the recipe of the
  shipped ``models/policy3_int8.onnx``), calibrated on observations with the first weight version. For each
  new version every QGemm's weight is re-quantized with numpy exactly as onnxruntime's quantizer does it
  (per tensor: ``compute_data_quant_params`` for the scale and zero point, then onnxruntime's rounding and
  clipping; the int32 bias at input scale x weight scale, with the quantizer's weight-scale increase when
  that bias would overflow int32) and written into the template's initializers; the fp32 logits layer is
  copied. The activation scales and zero points stay those of the calibration: "stale activation scales".
  On building, the template re-quantizes its own weights and checks that it gets the quantizer's
  initializers back byte for byte (``verify``): the numpy path is the recipe, not an approximation of it.
* ``Fp32Template``: ``policies.export``'s fp32 graph, the weights copied in. Same interface, so fp32 and
  int8 actors share one code path (ActorQ's fp32 baseline).

``build(weights, version)`` returns a ``ModelVersion``: the ONNX bytes, the version number (also in the
file's metadata, ``airq.actorq.weight_version``) and the time it took (``BuildTiming``). A template is
changed in place by each build: use one per thread (a learner's broadcaster has one).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper
from torch import nn

from actorq.errors import ActorQError
from actorq.nets import Weights, actor_weights, as_actor
from actorq.versions import PRECISIONS, VERSION_KEY, BuildTiming, ModelVersion, Precision
from nav_env.config import N_STATE_FEATURES
from policies.actor import DiscreteActor
from policies.export import actor_to_onnx_bytes
from quantize.model_io import PolicyModel, serialize, set_metadata
from quantize.options import INT8_SCHEMES, StaticInt8Options
from quantize.ptq import prepared_copy, quantize_static_int8
from quantize.split_input import split_first_layer

CALIBRATION_KEY = "airq.actorq.activation_scales"
QUANT_SUFFIX = "_quantized"  # onnxruntime's name for a quantized initializer (TENSOR_NAME_QUANT_SUFFIX)


def default_int8_options() -> StaticInt8Options:
    """The recipe of the shipped Policy III int8 file (models/policy3_int8.md: ``--no-per-channel
    --no-float-split-sum``): u8s7, per-tensor weights, first layer split depth/state, logits fp32. Per-tensor
    is what large networks ship with (docs/quantize.md: per-channel costs Policy III 5.5x instead of 6.8x)."""
    return StaticInt8Options(per_channel=False, float_split_sum=False)


@dataclass(frozen=True)
class TemplateInfo:
    """How a template was made (once per run)."""

    precision: Precision
    recipe: str
    calibration_samples: int  # 0 for fp32
    calibrated_version: int  # the weight version whose activations set the int8 scales
    export_s: float  # torch -> fp32 ONNX (policies.export.actor_to_onnx_bytes)
    quantize_s: float  # quantize_static with calibration (0 for fp32)
    verify_s: float  # re-quantizing the template's own weights and comparing (0 if not verified)
    tensors: int  # initializers rewritten per version
    parameters: int


@dataclass(frozen=True)
class _Source:
    """Where a graph initializer's fp32 values come from in a weight version: a parameter, or a slice of
    one along an axis (the two halves of the split first layer)."""

    param: str
    axis: int | None = None
    start: int = 0
    stop: int | None = None

    def take(self, weights: Weights) -> np.ndarray:
        array = weights[self.param]
        if self.axis is not None:
            index = [slice(None)] * array.ndim
            index[self.axis] = slice(self.start, self.stop)
            array = array[tuple(index)]
        return np.ascontiguousarray(array, dtype=np.float32)


@dataclass
class _FloatSlot:
    source: _Source
    tensor: onnx.TensorProto


@dataclass
class _QGemmSlot:
    node: str
    weight: _Source
    weight_q: onnx.TensorProto
    weight_scale: onnx.TensorProto
    weight_zero_point: onnx.TensorProto
    input_scale: np.ndarray  # the calibrated (stale) scale of the QGemm's input
    bias: _Source | None
    bias_q: onnx.TensorProto | None
    beta: float


@dataclass(frozen=True)
class WeightRecipe:
    """How onnxruntime's quantizer quantized the weights of a template (from its options)."""

    qtype: int  # onnx.TensorProto.INT8 or UINT8
    symmetric: bool
    reduce_range: bool
    min_real_range: float | None

    @classmethod
    def of(cls, options: StaticInt8Options) -> WeightRecipe:
        if options.scheme not in INT8_SCHEMES:
            raise ActorQError(f"int8 scheme must be one of {', '.join(INT8_SCHEMES)}, got {options.scheme!r}")
        scheme = INT8_SCHEMES[options.scheme]
        qtype = {"QInt8": onnx.TensorProto.INT8, "QUInt8": onnx.TensorProto.UINT8}[scheme.weight_type]
        extra = dict(options.extra)
        # onnxruntime's defaults (base_quantizer.is_weight_symmetric): signed weights symmetric, unsigned not
        symmetric = bool(extra.get("WeightSymmetric", qtype == onnx.TensorProto.INT8))
        min_range = extra.get("MinimumRealRange")
        return cls(qtype, symmetric, scheme.reduce_range, None if min_range is None else float(min_range))


def quantize_weight(w: np.ndarray, recipe: WeightRecipe) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(zero point, scale, integer codes) of one weight tensor, per tensor, as onnxruntime's quantizer makes
    them (``quantize_data``): its own ``compute_data_quant_params`` for the parameters, its rounding
    (float32 division, round half to even, plus the zero point, clipped to the type) for the codes."""
    # deferred: onnxruntime: ~0.2 s to import, paid only where used
    from onnxruntime.quantization.quant_utils import compute_data_quant_params

    w = np.ascontiguousarray(w, dtype=np.float32)
    zero_point, scale = compute_data_quant_params(
        w.reshape(-1), recipe.qtype, recipe.symmetric, recipe.reduce_range, recipe.min_real_range
    )
    return zero_point, scale, weight_codes(w, scale, zero_point, recipe.qtype)


def weight_codes(w: np.ndarray, scale: np.ndarray, zero_point: np.ndarray, qtype: int) -> np.ndarray:
    """onnxruntime's ``quantize_nparray`` for integer types, without its temporary copies:
    clip(round(w / scale) + zero_point) in float32, then the integer type."""
    dtype = helper.tensor_dtype_to_np_dtype(qtype)
    info = np.iinfo(dtype)
    q = np.divide(w, np.asarray(scale, dtype=np.float32), dtype=np.float32)
    np.round(q, out=q)
    if np.any(zero_point):
        q += zero_point
    np.clip(q, info.min, info.max, out=q)
    return q.astype(dtype)


INT32 = np.iinfo(np.int32)


def bias_weight_scale(bias: np.ndarray, input_scale: np.ndarray, weight_scale: np.ndarray) -> np.ndarray | None:
    """onnxruntime's per-tensor ``_adjust_weight_scale_for_int32_bias``: the larger weight scale its quantizer
    takes when input scale x weight scale would put the int32 bias out of range, else None."""
    rmin = np.minimum(bias.min(), np.array(0, dtype=np.float64))
    rmax = np.maximum(bias.max(), np.array(0, dtype=np.float64))
    absmax = np.maximum(np.abs(rmin), np.abs(rmax))
    qrange = np.array(INT32.max, dtype=np.float64) - np.array(INT32.min + 1, dtype=np.float64)
    smallest = 1.0001 * (2.0 * absmax) / qrange
    candidate = np.float64(input_scale.item()) * np.float64(weight_scale.item())
    if 0.0 < candidate < smallest:
        return np.array(np.float64(weight_scale.item()) * (smallest / candidate), dtype=weight_scale.dtype)
    return None


def quantize_bias(bias: np.ndarray, input_scale: np.ndarray, weight_scale: np.ndarray, beta: float) -> np.ndarray:
    """onnxruntime's ``quantize_bias_static_impl``: int32 codes of the bias at scale input x weight x beta."""
    bias_scale = input_scale * weight_scale * beta
    q = np.asarray(bias, dtype=np.float64) / np.asarray(bias_scale, dtype=np.float64)
    q = np.clip(q.round(), np.float64(INT32.min), np.float64(INT32.max))
    return q.astype(np.int32)


def _write(tensor: onnx.TensorProto, array: np.ndarray) -> None:
    """New values into an initializer, in the field it already uses (so the same values give the same bytes)."""
    if helper.tensor_dtype_to_np_dtype(tensor.data_type) != array.dtype:
        raise ActorQError(
            f"{tensor.name}: {array.dtype} values for a {helper.tensor_dtype_to_np_dtype(tensor.data_type)} tensor"
        )
    if int(np.prod(tensor.dims)) != array.size:
        raise ActorQError(f"{tensor.name}: {array.shape} values for a tensor of shape {tuple(tensor.dims)}")
    if tensor.HasField("raw_data"):
        tensor.raw_data = np.ascontiguousarray(array).tobytes()
    elif len(tensor.float_data):
        tensor.float_data[:] = array.ravel().tolist()
    elif len(tensor.int32_data):
        tensor.int32_data[:] = array.ravel().astype(np.int64).tolist()
    else:
        raise ActorQError(f"{tensor.name}: initializer without data")


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _version_entry(model: onnx.ModelProto) -> onnx.StringStringEntryProto:
    for entry in model.metadata_props:
        if entry.key == VERSION_KEY:
            return entry
    entry = model.metadata_props.add()
    entry.key, entry.value = VERSION_KEY, ""
    return entry


def _check_weights(weights: Weights, shapes: dict[str, tuple[int, ...]]) -> None:
    missing, extra = sorted(set(shapes) - set(weights)), sorted(set(weights) - set(shapes))
    if missing or extra:
        raise ActorQError(f"weight version does not fit the template: missing {missing}, unexpected {extra}")
    for name, shape in shapes.items():
        got = np.shape(weights[name])
        if got != shape:
            raise ActorQError(f"weight version: {name} has shape {got}, the template {shape}")


def _contract_metadata(obs_dim: int, n_actions: int, precision: str) -> dict[str, str]:
    return {"airq.obs_dim": str(obs_dim), "airq.action_space": f"discrete:{n_actions}", "airq.precision": precision}


def _export(actor: DiscreteActor) -> tuple[onnx.ModelProto, bytes, float]:
    t0 = time.perf_counter()
    data = actor_to_onnx_bytes(actor)
    model = onnx.load_from_string(data)
    return model, data, time.perf_counter() - t0


class _Template:
    """What both templates share: the graph, the version tag and the fp32 initializers copied per version."""

    precision: Precision

    def __init__(self, model: onnx.ModelProto, shapes: dict[str, tuple[int, ...]], floats: list[_FloatSlot]):
        self._model = model
        self._shapes = shapes
        self._floats = floats
        self._version = _version_entry(model)
        self.info: TemplateInfo

    @property
    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        return dict(self._shapes)

    def build(self, weights: Weights, version: int) -> ModelVersion:
        """The weight version as ONNX bytes for the actors, tagged ``version``."""
        if isinstance(version, bool) or not isinstance(version, int | np.integer) or version < 0:
            raise ActorQError(f"a weight version is an integer >= 0, got {version!r}")
        _check_weights(weights, self._shapes)
        t0 = time.perf_counter()
        for slot in self._floats:
            _write(slot.tensor, slot.source.take(weights))
        self._write_quantized(weights)
        self._version.value = str(int(version))
        t1 = time.perf_counter()
        data = serialize(self._model)
        t2 = time.perf_counter()
        return ModelVersion(int(version), self.precision, data, BuildTiming(t1 - t0, t2 - t1))

    def _write_quantized(self, weights: Weights) -> None:
        pass


def _float_slots(model: onnx.ModelProto, sources: dict[str, _Source], ops: tuple[str, ...]) -> list[_FloatSlot]:
    inits = {t.name: t for t in model.graph.initializer}
    slots = []
    for node in model.graph.node:
        if node.op_type in ops:
            slots += [_FloatSlot(sources[n], inits[n]) for n in node.input[1:3] if n in inits and n in sources]
    return slots


def _check_coverage(shapes: dict[str, tuple[int, ...]], used: set[str], what: str) -> None:
    unused = sorted(set(shapes) - used)
    if unused:
        raise ActorQError(f"the {what} template does not take the weights {unused}: not a Gemm/ReLU MLP export")


class Fp32Template(_Template):
    """``policies.export``'s fp32 graph of the network; each version's weights are copied into it."""

    precision: Precision = "fp32"

    def __init__(self, net: nn.Module, version: int = 0):
        actor = as_actor(net)
        weights = actor_weights(actor, copy=False)
        model, _, export_s = _export(actor)
        shapes = {k: tuple(v.shape) for k, v in weights.items()}
        floats = _float_slots(model, {k: _Source(k) for k in weights}, ("Gemm",))
        _check_coverage(shapes, {s.source.param for s in floats}, "fp32")
        set_metadata(model, _contract_metadata(actor.obs_dim, actor.head.out_features, "fp32"))
        super().__init__(model, shapes, floats)
        self._version.value = str(version)
        self.info = TemplateInfo(
            precision="fp32",
            recipe="policies.export (TorchScript exporter, opset 17)",
            calibration_samples=0,
            calibrated_version=version,
            export_s=export_s,
            quantize_s=0.0,
            verify_s=0.0,
            tensors=len(floats),
            parameters=sum(int(np.prod(s)) for s in shapes.values()),
        )


class Int8Template(_Template):
    """quantize's static int8 model of the network, calibrated once; new weights re-quantized into it."""

    precision: Precision = "int8"

    def __init__(
        self,
        net: nn.Module,
        calibration_obs: np.ndarray,
        options: StaticInt8Options | None = None,
        version: int = 0,
        verify: bool = True,
    ):
        opts = options or default_int8_options()
        if opts.quant_format != "qoperator":
            raise ActorQError("the int8 template needs the QOperator format (QGemm initializers to write into)")
        if opts.per_channel:
            raise ActorQError("the int8 template re-quantizes per tensor: use per_channel=False")
        self.recipe = WeightRecipe.of(opts)
        actor = as_actor(net)
        weights = actor_weights(actor)
        obs = np.ascontiguousarray(calibration_obs, dtype=np.float32)
        if obs.ndim != 2 or obs.shape[1] != actor.obs_dim or len(obs) == 0:
            raise ActorQError(f"calibration observations must be float32 [N >= 1, {actor.obs_dim}], got {obs.shape}")
        fp32, data, export_s = _export(actor)
        n_actions = actor.head.out_features
        src = PolicyModel(Path("actorq-template.onnx"), data, fp32, actor.obs_dim, n_actions)
        t0 = time.perf_counter()
        model = quantize_static_int8(src, obs, opts)
        quantize_s = time.perf_counter() - t0

        # The graph the quantizer saw (quantize_static_int8 prepares and splits the same way), to know where
        # each of its fp32 initializers comes from in a weight version.
        prepared = prepared_copy(fp32)
        sources = {k: _Source(k) for k in weights}
        if opts.split_input:
            first = next(n for n in fp32.graph.node if "obs" in n.input)
            split_at = actor.obs_dim - N_STATE_FEATURES
            axis = 1 if _attrs(first).get("transB", 0) else 0
            _, (depth, state) = split_first_layer(prepared, split_at)
            by_name = {n.name: n for n in prepared.graph.node}
            sources[by_name[depth].input[1]] = _Source(first.input[1], axis, 0, split_at)
            sources[by_name[state].input[1]] = _Source(first.input[1], axis, split_at, None)
        betas = {n.input[1]: float(_attrs(n).get("beta", 1.0)) for n in prepared.graph.node if n.op_type == "Gemm"}
        del prepared

        inits = {t.name: t for t in model.graph.initializer}
        qgemms: list[_QGemmSlot] = []
        for node in model.graph.node:
            if node.op_type != "QGemm":
                continue
            w_q, w_scale, w_zp = node.input[3], node.input[4], node.input[5]
            w_name = w_q[: -len(QUANT_SUFFIX)]
            if not w_q.endswith(QUANT_SUFFIX) or w_name not in sources or w_q not in inits:
                raise ActorQError(f"QGemm {node.name}: weight {w_q!r} does not come from the network's weights")
            if numpy_helper.to_array(inits[w_scale]).size != 1:
                raise ActorQError(f"QGemm {node.name}: per-channel weight scales; the template needs per-tensor")
            b_q = node.input[6] if len(node.input) > 6 and node.input[6] else None
            b_name = b_q[: -len(QUANT_SUFFIX)] if b_q else None
            if b_q is not None and (b_name not in sources or b_q not in inits):
                raise ActorQError(f"QGemm {node.name}: bias {b_q!r} does not come from the network's weights")
            qgemms.append(
                _QGemmSlot(
                    node.name,
                    sources[w_name],
                    inits[w_q],
                    inits[w_scale],
                    inits[w_zp],
                    numpy_helper.to_array(inits[node.input[1]]),
                    sources[b_name] if b_name else None,
                    inits[b_q] if b_q else None,
                    betas.get(w_name, 1.0),
                )
            )
        floats = _float_slots(model, sources, ("Gemm", "MatMul"))
        shapes = {k: tuple(v.shape) for k, v in weights.items()}
        used = {s.source.param for s in floats} | {s.weight.param for s in qgemms}
        used |= {s.bias.param for s in qgemms if s.bias is not None}
        _check_coverage(shapes, used, "int8")
        self._qgemms = qgemms
        scheme = INT8_SCHEMES[opts.scheme]
        set_metadata(
            model,
            _contract_metadata(actor.obs_dim, n_actions, "int8")
            | {
                "airq.quant.scheme": opts.scheme,
                "airq.quant.per_channel": "false",
                "airq.quant.weight_range": f"[-{scheme.weight_max}, {scheme.weight_max}]"
                if scheme.weight_type == "QInt8"
                else "[0, 255]",
                CALIBRATION_KEY: f"calibrated on weight version {version} ({len(obs)} observations); "
                "later versions keep these activation scales, their weights are re-quantized",
            },
        )
        super().__init__(model, shapes, floats)
        self._version.value = str(version)
        verify_s = self._verify(weights) if verify else 0.0
        self.info = TemplateInfo(
            precision="int8",
            recipe=f"quantize.ptq.quantize_static_int8: scheme {opts.scheme}, per-tensor, "
            f"{'first layer split depth/state, ' if opts.split_input else ''}"
            f"{'split halves summed in float, ' if opts.use_float_split_sum else ''}"
            f"{'logits layer fp32, ' if opts.keep_last_layer_fp32 else ''}activations {opts.calibrate_method}",
            calibration_samples=len(obs),
            calibrated_version=version,
            export_s=export_s,
            quantize_s=quantize_s,
            verify_s=verify_s,
            tensors=len(floats) + 3 * len(qgemms),
            parameters=sum(int(np.prod(s)) for s in shapes.values()),
        )

    def _write_quantized(self, weights: Weights) -> None:
        for slot in self._qgemms:
            w = slot.weight.take(weights)
            zero_point, scale, codes = quantize_weight(w, self.recipe)
            if slot.bias is not None and slot.bias_q is not None:
                b = slot.bias.take(weights)
                # onnxruntime raises a symmetric int8 weight's scale when the int32 bias would overflow
                if self.recipe.qtype == onnx.TensorProto.INT8 and not np.any(zero_point):
                    larger = bias_weight_scale(b, slot.input_scale, scale)
                    if larger is not None:
                        scale = larger
                        codes = weight_codes(w, scale, zero_point, self.recipe.qtype)
                _write(slot.bias_q, quantize_bias(b, slot.input_scale, scale, slot.beta))
            _write(slot.weight_q, codes)
            _write(slot.weight_scale, np.asarray(scale, dtype=np.float32))
            _write(slot.weight_zero_point, np.asarray(zero_point))

    def _verify(self, weights: Weights) -> float:
        """Re-quantize the template's own weights and demand the quantizer's initializers back, byte for byte."""
        t0 = time.perf_counter()
        tensors = [t for s in self._qgemms for t in (s.weight_q, s.weight_scale, s.weight_zero_point, s.bias_q) if t]
        before = [t.SerializeToString() for t in tensors]
        self._write_quantized(weights)
        differ = [t.name for t, b in zip(tensors, before) if t.SerializeToString() != b]
        if differ:
            raise ActorQError(
                f"re-quantizing the calibrated weights does not reproduce onnxruntime's quantizer for {differ}: "
                "its recipe changed (onnxruntime version?); the int8 template cannot be trusted"
            )
        return time.perf_counter() - t0


def make_template(
    net: nn.Module,
    precision: Precision,
    calibration_obs: np.ndarray | None = None,
    options: StaticInt8Options | None = None,
    version: int = 0,
) -> Fp32Template | Int8Template:
    """The template of one actor precision (int8 needs calibration observations)."""
    if precision == "fp32":
        return Fp32Template(net, version)
    if precision == "int8":
        if calibration_obs is None:
            raise ActorQError("an int8 template needs calibration observations")
        return Int8Template(net, calibration_obs, options, version)
    raise ActorQError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")


@dataclass(frozen=True)
class FreshInt8:
    """The full path a weight version takes without a template: export, ``quantize_static``, bytes."""

    onnx: bytes = field(repr=False)
    export_s: float
    quantize_s: float  # quantize_static, calibration included
    serialize_s: float

    @property
    def total_s(self) -> float:
        return self.export_s + self.quantize_s + self.serialize_s


def fresh_int8(net: nn.Module, calibration_obs: np.ndarray, options: StaticInt8Options | None = None) -> FreshInt8:
    """A fresh static int8 model of the network's current weights with the same recipe and observations
    (the baseline: what a broadcaster without a template would do for every version)."""
    actor = as_actor(net)
    fp32, data, export_s = _export(actor)
    src = PolicyModel(Path("actorq-fresh.onnx"), data, fp32, actor.obs_dim, actor.head.out_features)
    t0 = time.perf_counter()
    model = quantize_static_int8(
        src, np.ascontiguousarray(calibration_obs, dtype=np.float32), options or default_int8_options()
    )
    t1 = time.perf_counter()
    out = serialize(model)
    return FreshInt8(out, export_s, t1 - t0, time.perf_counter() - t1)
