"""Roofline model for batch-1 MLP inference, and this machine's own bandwidth and compute figures.

A batch-1 MLP reads every weight once per inference and does one multiply-add per weight, so

    time = fixed cost + max(weight bytes / bandwidth,     (the weights stream through the core)
                            2 x multiply-adds / throughput)  (one multiply + one add per weight; fp32
                                                            GFLOPS for fp32 models, int8 Gop/s for int8)

The fixed cost is the runtime's, paid whatever the sizes: a call into the session and each operator it
runs (a quantized matrix product costs several float ones: it quantizes and packs its input). Biases,
activations and (de)quantisation arithmetic are not counted.

Which bandwidth applies is the cache state between two inferences. On a board (device_emulation/profiles.toml)
weights that fit in the core's cache (a Pi 3B's 512 KB L2) stay there; larger ones stream from DRAM. On this
machine weights that fit in the core's private cache stay there too, and weights larger than the shared last-level
cache come from DRAM. Between the two, the state is the host's: in the study's timing pass the bridge waits on the
network between acts while the client, the other bridges and (in a VM) other guests use the shared cache, which
may or may not still hold the weights at the next act (measured on an AMD EPYC VM: Policy III's int8, 7 MB, ran
at 0.59x the DRAM prediction and 1.7x the L3 one although a bare read loop finds it in the 32 MB L3). There the
check takes both predictions, from the shared cache and from DRAM, and judges the nearer one.

``python -m device_emulation.roofline measure --sizes BYTES ... --out FILE`` measures this machine (one core,
one thread): streaming read bandwidth at the given working-set sizes and from DRAM, the private cache's size,
the compute throughput of large-batch onnxruntime matrix products in fp32, fp16 and int8, and the runtime's
fixed cost per operator (float and quantized). The study adds the fixed cost per call as the bridge sees it (a
null model in its timing pass), checks the model against the measured inference times here and only then
shows a prediction for a real Pi. ``python -m device_emulation.roofline predict MODEL.onnx --profile pi3b`` prints
a board's prediction for a model (what ``hil.run --latency profile:pi3b`` flies with).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from airq_cli import ArgumentParser, UserError, known_fields, output_file, run, write_json
from device_emulation.profiles import ProfileError, get_profile

if TYPE_CHECKING:
    from device_emulation.profiles import DeviceProfile

AGREEMENT = 2.0  # predicted vs measured must agree within this factor before a Pi prediction is shown
DRAM_BYTES = 256 * 2**20  # working set far beyond any cache: DRAM bandwidth
PRECISIONS = ("fp32", "fp16", "int8")
QUANTIZED_MATRIX_PRODUCTS = {"QGemm", "QLinearMatMul", "MatMulInteger", "MatMulIntegerToFloat", "DynamicQuantizeMatMul"}


@dataclass(frozen=True)
class ModelCost:
    """What one batch-1 inference must move and compute."""

    weight_bytes: int  # every initializer (weights, biases, scales) read once
    macs: int  # multiply-adds: one per element of every 2-D weight matrix
    precision: str  # fp32 / fp16 / int8: the element type of the weight matrices
    operators: int = 0  # nodes of the graph: each costs the runtime a fixed time, whatever its size
    quantized_operators: int = 0  # of which quantized matrix products (QGemm, MatMulInteger, ...): dearer
    ops: int = field(init=False)  # 2 x multiply-adds (one multiply and one add per weight)

    def __post_init__(self) -> None:
        object.__setattr__(self, "ops", 2 * self.macs)


@dataclass(frozen=True)
class Prediction:
    """A roofline time: the larger of the memory and the compute bound (either may be unknown)."""

    memory_bound_s: float | None
    compute_bound_s: float | None
    predicted_s: float | None
    bound_by: str | None  # "memory" or "compute"; None when neither bound is known
    fixed_s: float = 0.0  # the runtime's fixed cost, included in predicted_s (0: not known)
    weights_from: str = ""  # "cache" or "DRAM": the cache state the memory bound assumes


@dataclass(frozen=True)
class DevicePrediction(Prediction):
    """A device profile's prediction: the DRAM bound is dropped for weights that fit in its cache."""

    fits_in_cache: bool = False
    missing: tuple[str, ...] = ()  # figures the profile lacks for this model ("int8 compute throughput", ...)


@dataclass(frozen=True)
class Check(Prediction):
    """A prediction against the measured time of the machine it predicts."""

    measured_s: float | None = None
    measured_over_predicted: float | None = None
    agrees: bool = False  # within AGREEMENT either way
    where: str = ""  # "this machine", "the device (pi3b figures)"
    # the other cache state's prediction when two were possible (weights between the private and the shared
    # cache's sizes): the check judged the one nearer the measured time
    other_weights_from: str = ""
    other_predicted_s: float | None = None

    @classmethod
    def of(cls, pred: Prediction, measured_s: float | None, where: str, other: Prediction | None = None) -> Check:
        """``pred`` against ``measured_s``; with ``other`` (the other possible cache state) the nearer of the two."""
        if other is not None and measured_s and other.predicted_s and pred.predicted_s:
            if abs(np.log(measured_s / other.predicted_s)) < abs(np.log(measured_s / pred.predicted_s)):
                pred, other = other, pred
        ratio = measured_s / pred.predicted_s if measured_s and pred.predicted_s else None
        return cls(
            **{f.name: getattr(pred, f.name) for f in fields(Prediction)},
            measured_s=measured_s,
            measured_over_predicted=ratio,
            agrees=ratio is not None and 1 / AGREEMENT <= ratio <= AGREEMENT,
            where=where,
            other_weights_from=other.weights_from if other else "",
            other_predicted_s=other.predicted_s if other else None,
        )


@dataclass(frozen=True)
class MachineFigures:
    """This machine's own figures (machine.json), measured on one core."""

    bandwidth_gbs: dict[str, float]  # streaming-read GB/s by working-set bytes (the keys: decimal text, as in JSON)
    throughput_gops: dict[str, float]  # matrix-product Gop/s by precision
    dram_bandwidth_gbs: float = 0.0
    dram_bytes: int = 0
    private_cache_bytes: int = 0  # the core's own cache (L2): weights up to this size stay between inferences
    shared_cache_bytes: int = 0  # the last-level cache (L3): weights up to this size may still be there, or not
    operator_us: float = 0.0  # fixed cost of a float operator (a chain of tiny MatMuls)
    quantized_operator_us: float = 0.0  # of a quantized matrix product (a chain of tiny QGemms)
    method: dict[str, str] = field(default_factory=dict)
    onnxruntime_version: str = ""
    numpy_version: str = ""
    cpu_affinity: list[int] | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MachineFigures:
        return cls(**known_fields(cls, data))


def model_cost(model_file: str | os.PathLike | bytes) -> ModelCost:
    """Weight bytes, multiply-adds, weight precision and operators of an ONNX MLP (a path or the file's bytes)."""
    # deferred: onnx: ~0.2 s to import, paid only where used
    import onnx
    from onnx import numpy_helper

    path = "the model" if isinstance(model_file, bytes) else str(model_file)
    try:
        model = onnx.load_from_string(model_file) if isinstance(model_file, bytes) else onnx.load(path)
    except OSError:
        raise
    except Exception as e:  # a corrupt file: protobuf's DecodeError and the like
        raise ValueError(f"{path}: not an ONNX model ({type(e).__name__})") from None
    weight_bytes, macs = 0, 0
    by_type: dict[np.dtype, int] = {}
    for init in model.graph.initializer:
        arr = numpy_helper.to_array(init)
        weight_bytes += arr.nbytes
        if arr.ndim == 2 and min(arr.shape) > 1:
            macs += arr.size
            by_type[arr.dtype] = by_type.get(arr.dtype, 0) + arr.size
    if not by_type:
        raise ValueError(f"{path}: no 2-D weight matrices found (not an MLP?)")
    dtype = max(by_type, key=lambda t: by_type[t])
    precision = {
        np.dtype(np.float32): "fp32",
        np.dtype(np.float16): "fp16",
        np.dtype(np.int8): "int8",
        np.dtype(np.uint8): "int8",
    }.get(np.dtype(dtype))
    if precision is None:
        raise ValueError(f"{path}: weight type {dtype} has no roofline throughput")
    return ModelCost(
        weight_bytes=weight_bytes,
        macs=macs,
        precision=precision,
        operators=len(model.graph.node),
        quantized_operators=sum(n.op_type in QUANTIZED_MATRIX_PRODUCTS for n in model.graph.node),
    )


def predict_s(
    cost: ModelCost,
    bandwidth_gbs: float | None,
    throughput_gops: float | None,
    fixed_s: float = 0.0,
    weights_from: str = "",
) -> Prediction:
    """Roofline time: the fixed cost plus the larger of the memory and the compute bound (either may be unknown)."""
    mem = cost.weight_bytes / (bandwidth_gbs * 1e9) if bandwidth_gbs else None
    comp = cost.ops / (throughput_gops * 1e9) if throughput_gops else None
    bounds = [b for b in (mem, comp) if b is not None]
    return Prediction(
        memory_bound_s=mem,
        compute_bound_s=comp,
        predicted_s=fixed_s + max(bounds) if bounds else None,
        bound_by=None if not bounds else ("memory" if mem is not None and mem >= (comp or 0) else "compute"),
        fixed_s=fixed_s,
        weights_from=weights_from,
    )


# ---------------------------------------------------------------------- measuring this machine


def _best_s(fn: Callable[[], object], min_time_s: float = 0.3, repeats: int = 5) -> float:
    """Best-of-``repeats`` seconds per call, each repeat running ``fn`` for at least ``min_time_s``."""
    fn()  # warm (page faults, caches)
    best = float("inf")
    for _ in range(repeats):
        n, t0 = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            dt = time.perf_counter() - t0
            if dt >= min_time_s / repeats:
                break
        best = min(best, dt / n)
    return best


def read_bandwidth_gbs(nbytes: int) -> float:
    """Streaming-read bandwidth over a working set of ``nbytes`` (float32 dot product: reads each byte once)."""
    n = max(1024, nbytes // 8)  # two arrays of n float32 = nbytes
    a = np.ones(n, dtype=np.float32)
    b = np.ones(n, dtype=np.float32)
    s = _best_s(lambda: np.dot(a, b))
    return 2 * n * 4 / s / 1e9


def _matmul_model(precision: str, batch: int, k: int, n: int) -> tuple[bytes, dict]:
    # deferred: onnx: ~0.2 s to import, paid only where used
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    if precision == "int8":
        w = numpy_helper.from_array(rng.integers(-127, 127, (k, n), dtype=np.int8), "w")
        node = helper.make_node("MatMulInteger", ["x", "w"], ["y"])
        x_type, y_type = TensorProto.UINT8, TensorProto.INT32
        feed = {"x": rng.integers(0, 255, (batch, k), dtype=np.uint8)}
    else:
        dt = np.float32 if precision == "fp32" else np.float16
        w = numpy_helper.from_array(rng.standard_normal((k, n)).astype(dt), "w")
        node = helper.make_node("MatMul", ["x", "w"], ["y"])
        x_type = y_type = TensorProto.FLOAT if precision == "fp32" else TensorProto.FLOAT16
        feed = {"x": rng.standard_normal((batch, k)).astype(dt)}
    graph = helper.make_graph(
        [node],
        "gemm",
        [helper.make_tensor_value_info("x", x_type, [batch, k])],
        [helper.make_tensor_value_info("y", y_type, [batch, n])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    return model.SerializeToString(), feed


def gemm_throughput_gops(precision: str, batch: int = 256, k: int = 1024, n: int = 1024) -> float:
    """Large-batch onnxruntime matrix product on one thread: 2*batch*k*n ops per run."""
    # deferred: onnxruntime: ~0.2 s to import, paid only where used
    import onnxruntime as ort

    data, feed = _matmul_model(precision, batch, k, n)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
    s = _best_s(lambda: sess.run(None, feed), min_time_s=0.6)
    return 2 * batch * k * n / s / 1e9


def _operator_chain(n: int, quantized: bool, width: int = 16) -> tuple[bytes, dict[str, np.ndarray]]:
    """``n`` tiny matrix products in a row (width x width): MatMul, or the com.microsoft QGemm that static
    int8 models run (uint8 in, uint8 out, so they chain)."""
    # deferred: onnx: ~0.2 s to import, paid only where used
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits, nodes = [], []
    if quantized:
        inits += [
            numpy_helper.from_array(np.array(0.05, np.float32), "scale"),
            numpy_helper.from_array(np.array(128, np.uint8), "zero"),
            numpy_helper.from_array(np.array(0, np.int8), "w_zero"),
        ]
    for i in range(n):
        if quantized:
            inits.append(numpy_helper.from_array(rng.integers(-20, 20, (width, width), dtype=np.int8), f"w{i}"))
            inputs = [f"t{i}", "scale", "zero", f"w{i}", "scale", "w_zero", "", "scale", "zero"]
            nodes.append(helper.make_node("QGemm", inputs, [f"t{i + 1}"], domain="com.microsoft"))
        else:
            inits.append(numpy_helper.from_array(rng.standard_normal((width, width)).astype(np.float32) * 0.1, f"w{i}"))
            nodes.append(helper.make_node("MatMul", [f"t{i}", f"w{i}"], [f"t{i + 1}"]))
    dtype = TensorProto.UINT8 if quantized else TensorProto.FLOAT
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("t0", dtype, [1, width])],
        [helper.make_tensor_value_info(f"t{n}", dtype, [1, width])],
        inits,
    )
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid("com.microsoft", 1)] if quantized else [])
    feed = np.full((1, width), 130, np.uint8) if quantized else np.ones((1, width), np.float32)
    return helper.make_model(graph, opset_imports=opsets, ir_version=10).SerializeToString(), {"t0": feed}


def operator_cost_us(quantized: bool, short: int = 1, long: int = 33) -> float:
    """The fixed cost of one operator on one thread, in microseconds: the slope of the median time of a
    chain of ``long`` against ``short`` tiny matrix products (their arithmetic is a few nanoseconds)."""
    # deferred: onnxruntime: ~0.2 s to import, paid only where used
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    medians = []
    for n in (short, long):
        model, feed = _operator_chain(n, quantized)
        sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
        for _ in range(200):
            sess.run(None, feed)
        times = []
        for _ in range(3000):
            t0 = time.perf_counter_ns()
            sess.run(None, feed)
            times.append(time.perf_counter_ns() - t0)
        medians.append(float(np.median(times)) / 1e3)
    return max(0.0, (medians[1] - medians[0]) / (long - short))


def _cpu_set(text: str) -> set[int]:
    """The CPUs of a sysfs CPU list ("0-3,8" -> {0, 1, 2, 3, 8})."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if part:
            first, _, last = part.partition("-")
            cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def _data_caches(cpu: int, sysfs: Path) -> list[tuple[int, bool]]:
    """(size in bytes, whether the core has it to itself) of every data cache sysfs lists for ``cpu``. A cache
    shared only by the core's own hardware threads (an SMT sibling, as on a VM whose two vCPUs are one core) is
    the core's: it is its L2."""
    base = sysfs / f"cpu{cpu}"
    try:
        own = _cpu_set((base / "topology" / "thread_siblings_list").read_text()) | {cpu}
    except (OSError, ValueError):
        own = {cpu}
    units = {"K": 1024, "M": 1024**2, "G": 1024**3}
    caches = []
    for index in sorted((base / "cache").glob("index*")):
        try:
            if (index / "type").read_text().strip() == "Instruction":
                continue
            shared = _cpu_set((index / "shared_cpu_list").read_text())
            size = (index / "size").read_text().strip()
            nbytes = int(size[:-1]) * units[size[-1]] if size[-1] in units else int(size)
        except (OSError, ValueError, IndexError):
            continue
        caches.append((nbytes, shared <= own))
    return caches


def private_cache_bytes(cpu: int = 0, sysfs: Path = Path("/sys/devices/system/cpu")) -> int:
    """The size of the core's own cache: the largest data cache no other core shares (0 when sysfs does not say);
    the client and other processes use the shared ones too."""
    return max((size for size, own in _data_caches(cpu, sysfs) if own), default=0)


def shared_cache_bytes(cpu: int = 0, sysfs: Path = Path("/sys/devices/system/cpu")) -> int:
    """The size of the last-level cache when other cores share it (0 when sysfs lists none)."""
    return max((size for size, own in _data_caches(cpu, sysfs) if not own), default=0)


def measure_machine(sizes: list[int]) -> MachineFigures:
    """This machine's figures (run pinned to one core): bandwidth per working-set size and from DRAM, the
    core's private and the shared cache, fp32/fp16/int8 matrix-product throughput and the runtime's cost per
    operator."""
    # deferred: onnxruntime: ~0.2 s to import, paid only where used
    import onnxruntime as ort

    affinity = sorted(os.sched_getaffinity(0))

    distinct: list[int] = []
    for s in sorted(set(sizes)):  # sizes within 10% of each other share one measurement
        if not distinct or s > distinct[-1] * 1.1:
            distinct.append(s)
    bandwidth: dict[str, float] = {}
    for _ in range(3):  # interleaved passes, best of all: a busy moment hits one pass, not one size
        for s in distinct:
            bandwidth[str(s)] = max(bandwidth.get(str(s), 0.0), read_bandwidth_gbs(s))
    return MachineFigures(
        bandwidth_gbs=bandwidth,
        dram_bandwidth_gbs=read_bandwidth_gbs(DRAM_BYTES),
        dram_bytes=DRAM_BYTES,
        throughput_gops={p: gemm_throughput_gops(p) for p in PRECISIONS},
        private_cache_bytes=private_cache_bytes(affinity[0]),
        shared_cache_bytes=shared_cache_bytes(affinity[0]),
        operator_us=operator_cost_us(quantized=False),
        quantized_operator_us=operator_cost_us(quantized=True),
        method={
            "bandwidth": "numpy float32 dot product of two arrays (reads every byte once), best of 3 interleaved passes x 5, one thread",
            "throughput": "onnxruntime MatMul (fp32, fp16) / MatMulInteger (uint8 x int8) 256x1024 @ 1024x1024, "
            "one intra-op thread, best of 5; ops = 2 x multiply-adds",
            "operators": "slope of the median time of chains of 1 and 33 tiny (16 x 16) MatMul / QGemm, one thread",
            "private_cache": "sysfs: the largest data cache no other core shares (SMT siblings are the same core)",
            "shared_cache": "sysfs: the largest data cache other cores share",
        },
        onnxruntime_version=ort.__version__,
        numpy_version=np.__version__,
        cpu_affinity=affinity,
    )


def bandwidth_at(machine: MachineFigures, nbytes: int) -> float:
    """The measured bandwidth for the working-set size nearest to ``nbytes``."""
    sizes = {int(k): v for k, v in machine.bandwidth_gbs.items()}
    nearest = min(sizes, key=lambda s: abs(np.log(s) - np.log(max(nbytes, 1))))  # same size, or within 10%
    return sizes[nearest]


def fixed_here_s(cost: ModelCost, machine: MachineFigures, call_s: float) -> float:
    """The runtime's fixed cost for ``cost`` here: ``call_s`` (a null model's time, as the bridge sees it)
    plus each operator's."""
    floats = max(0, cost.operators - cost.quantized_operators)
    return call_s + (floats * machine.operator_us + cost.quantized_operators * machine.quantized_operator_us) / 1e6


def _predict_here_from(
    cost: ModelCost, machine: MachineFigures, call_s: float, bandwidth_gbs: float, weights_from: str
) -> Prediction:
    """This machine's time with the weights read at ``bandwidth_gbs`` (from ``weights_from``)."""
    throughput = machine.throughput_gops.get(cost.precision)
    return predict_s(cost, bandwidth_gbs, throughput, fixed_here_s(cost, machine, call_s), weights_from)


def predict_here(cost: ModelCost, machine: MachineFigures, call_s: float) -> Prediction:
    """This machine's time for a model: weights within the private cache stay there, larger ones stream
    from DRAM (see the module's docstring); ``call_s`` the fixed cost of a call."""
    if machine.private_cache_bytes and cost.weight_bytes <= machine.private_cache_bytes:
        return _predict_here_from(cost, machine, call_s, bandwidth_at(machine, cost.weight_bytes), "cache")
    return _predict_here_from(cost, machine, call_s, machine.dram_bandwidth_gbs, "DRAM")


def predict_here_shared_cache(cost: ModelCost, machine: MachineFigures, call_s: float) -> Prediction | None:
    """This machine's time if the weights were still in the shared cache at the next act: only for weights
    larger than the private cache that fit in the shared one (None otherwise)."""
    if not (machine.private_cache_bytes < cost.weight_bytes <= machine.shared_cache_bytes):
        return None
    return _predict_here_from(cost, machine, call_s, bandwidth_at(machine, cost.weight_bytes), "shared cache")


def check_here(cost: ModelCost, machine: MachineFigures, measured_s: float | None, call_s: float = 0.0) -> Check:
    """This machine's prediction for a model against its measured inference time; for weights that may or may
    not still be in the shared cache between two acts, the nearer of the two predictions."""
    return Check.of(
        predict_here(cost, machine, call_s),
        measured_s,
        "this machine",
        other=predict_here_shared_cache(cost, machine, call_s),
    )


def predict_device(cost: ModelCost, profile: DeviceProfile) -> DevicePrediction:
    """A device profile's roofline time. The DRAM bound is dropped for weights that fit in the
    profile's last-level cache (no cited cache bandwidth): then only the compute bound is left."""
    throughput = profile.throughput_gops(cost.precision)
    fits = bool(profile.cache_kb and cost.weight_bytes <= profile.cache_kb * 1024)
    fixed_s = (profile.fixed_us or 0.0) / 1e6
    pred = predict_s(
        cost, None if fits else profile.memory_bandwidth_gbs, throughput, fixed_s, "cache" if fits else "DRAM"
    )
    missing = [] if throughput else [f"{cost.precision} compute throughput"]
    if not fits and not profile.memory_bandwidth_gbs:
        missing.append("memory bandwidth")
    return DevicePrediction(**asdict(pred), fits_in_cache=fits, missing=tuple(missing))


def prediction_record(cost: ModelCost, pred: DevicePrediction, profile: DeviceProfile) -> dict[str, Any]:
    """What a report keeps of a board prediction used as a delay: the figures and how they combined."""
    return {
        "board": profile.name,
        "label": f"predicted on {profile.name} (roofline, device_emulation/profiles.toml): not measured",
        "predicted_ms": None if pred.predicted_s is None else pred.predicted_s * 1e3,
        "bound_by": pred.bound_by,
        "fits_in_cache": pred.fits_in_cache,
        "cost": asdict(cost),
    }


def check_device(cost: ModelCost, profile: DeviceProfile, measured_s: float | None) -> Check:
    """A device profile's prediction against the time measured on that device (--host)."""
    return Check.of(predict_device(cost, profile), measured_s, f"the device ({profile.name} figures)")


def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="python -m device_emulation.roofline", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure", help="measure this machine (run it pinned to one core)")
    m.add_argument("--sizes", type=int, nargs="*", default=[], help="working-set sizes in bytes")
    m.add_argument("--out", required=True, type=output_file, help="JSON file for the figures")
    c = sub.add_parser("cost", help="weight bytes, multiply-adds and precision of ONNX models")
    c.add_argument("models", nargs="+")
    pr = sub.add_parser("predict", help="a board's predicted inference time for ONNX models (a prediction)")
    pr.add_argument("models", nargs="+")
    pr.add_argument("--profile", default="pi3b", help="board of device_emulation/profiles.toml")
    args = p.parse_args(argv)
    if args.cmd == "predict":
        try:
            board = get_profile(args.profile)
        except ProfileError as e:
            raise UserError(str(e)) from None
        for path in args.models:
            try:
                pred = predict_device(model_cost(path), board)
            except OSError as e:
                raise UserError(f"{path}: {e.strerror or e}") from None
            except ValueError as e:
                raise UserError(str(e)) from None
            if pred.missing or pred.predicted_s is None:
                raise UserError(f"{path}: no {board.name} prediction: the profile lacks {', '.join(pred.missing)}")
            print(
                f"{path}: predicted on {board.name} (roofline) {pred.predicted_s * 1e3:.3f} ms "
                f"({pred.bound_by}-bound, weights from {pred.weights_from}, fixed cost {pred.fixed_s * 1e6:.0f} us)"
            )
        return 0
    if args.cmd == "cost":
        for path in args.models:
            try:
                print(path, json.dumps(asdict(model_cost(path))))
            except OSError as e:
                raise UserError(f"{path}: {e.strerror or e}") from None
            except ValueError as e:
                raise UserError(str(e)) from None
        return 0
    if any(s <= 0 for s in args.sizes):
        raise UserError("--sizes must be positive byte counts")

    write_json(args.out, measure_machine(args.sizes))
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
