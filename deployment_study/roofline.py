"""Roofline model for batch-1 MLP inference, and this machine's own bandwidth and compute figures.

A batch-1 MLP reads every weight once per inference and does one multiply-add per weight, so

    time >= weight bytes / memory bandwidth      (the weights stream through the core)
    time >= 2 x multiply-adds / throughput       (ops: one multiply + one add per weight; fp32
                                                  GFLOPS for fp32 models, int8 Gop/s for int8)

and the predicted time is the larger of the two. Biases, activations, (de)quantisation and the
per-operator cost of the runtime are not counted, which is why tiny models run far slower than
this bound. The bandwidth that applies is the one at the model's working-set size: weights that
fit in a cache stream from it, not from DRAM.

``python -m deployment_study.roofline measure --sizes BYTES ... --out FILE`` measures this machine (one core,
one thread): streaming read bandwidth at the given working-set sizes and from DRAM, and the
compute throughput of large-batch onnxruntime matrix products in fp32, fp16 and int8. deployment_study.study
runs it pinned like the bridge, checks the model against the measured inference times here and
only then shows a prediction for a real Pi (hil/profiles.toml, with cited figures).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from airq_cli import ArgumentParser, UserError, output_file, run
from deployment_study.records import known_fields

if TYPE_CHECKING:
    from hil.profiles import DeviceProfile

AGREEMENT = 2.0  # predicted vs measured must agree within this factor before a Pi prediction is shown
DRAM_BYTES = 256 * 2**20  # working set far beyond any cache: DRAM bandwidth
PRECISIONS = ("fp32", "fp16", "int8")


@dataclass(frozen=True)
class ModelCost:
    """What one batch-1 inference must move and compute."""

    weight_bytes: int  # every initializer (weights, biases, scales) read once
    macs: int  # multiply-adds: one per element of every 2-D weight matrix
    precision: str  # fp32 / fp16 / int8: the element type of the weight matrices
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

    @classmethod
    def of(cls, pred: Prediction, measured_s: float | None, where: str) -> Check:
        ratio = measured_s / pred.predicted_s if measured_s and pred.predicted_s else None
        return cls(
            memory_bound_s=pred.memory_bound_s,
            compute_bound_s=pred.compute_bound_s,
            predicted_s=pred.predicted_s,
            bound_by=pred.bound_by,
            measured_s=measured_s,
            measured_over_predicted=ratio,
            agrees=ratio is not None and 1 / AGREEMENT <= ratio <= AGREEMENT,
            where=where,
        )


@dataclass(frozen=True)
class MachineFigures:
    """This machine's own figures (machine.json), measured on one core."""

    bandwidth_gbs: dict[str, float]  # streaming-read GB/s by working-set bytes (the keys: decimal text, as in JSON)
    throughput_gops: dict[str, float]  # matrix-product Gop/s by precision
    dram_bandwidth_gbs: float = 0.0
    dram_bytes: int = 0
    method: dict[str, str] = field(default_factory=dict)
    onnxruntime_version: str = ""
    numpy_version: str = ""
    cpu_affinity: list[int] | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MachineFigures:
        return cls(**known_fields(cls, data))


def model_cost(path: str | os.PathLike) -> ModelCost:
    """Weight bytes, multiply-adds and weight precision of an ONNX MLP (Gemm/QGemm/MatMul/MatMulInteger)."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
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
    return ModelCost(weight_bytes=weight_bytes, macs=macs, precision=precision)


def predict_s(cost: ModelCost, bandwidth_gbs: float | None, throughput_gops: float | None) -> Prediction:
    """Roofline time: the larger of the memory and the compute bound (either may be unknown)."""
    mem = cost.weight_bytes / (bandwidth_gbs * 1e9) if bandwidth_gbs else None
    comp = cost.ops / (throughput_gops * 1e9) if throughput_gops else None
    bounds = [b for b in (mem, comp) if b is not None]
    return Prediction(
        memory_bound_s=mem,
        compute_bound_s=comp,
        predicted_s=max(bounds) if bounds else None,
        bound_by=None if not bounds else ("memory" if mem is not None and mem >= (comp or 0) else "compute"),
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
    import onnxruntime as ort

    data, feed = _matmul_model(precision, batch, k, n)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
    s = _best_s(lambda: sess.run(None, feed), min_time_s=0.6)
    return 2 * batch * k * n / s / 1e9


def measure_machine(sizes: list[int]) -> MachineFigures:
    """This machine's figures (run pinned to one core): bandwidth per working-set size and from
    DRAM, and fp32/fp16/int8 matrix-product throughput."""
    import onnxruntime as ort

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
        method={
            "bandwidth": "numpy float32 dot product of two arrays (reads every byte once), best of 3 interleaved passes x 5, one thread",
            "throughput": "onnxruntime MatMul (fp32, fp16) / MatMulInteger (uint8 x int8) 256x1024 @ 1024x1024, "
            "one intra-op thread, best of 5; ops = 2 x multiply-adds",
        },
        onnxruntime_version=ort.__version__,
        numpy_version=np.__version__,
        cpu_affinity=sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
    )


def bandwidth_at(machine: MachineFigures, nbytes: int) -> float:
    """The measured bandwidth for the working-set size nearest to ``nbytes``."""
    sizes = {int(k): v for k, v in machine.bandwidth_gbs.items()}
    nearest = min(sizes, key=lambda s: abs(np.log(s) - np.log(max(nbytes, 1))))  # same size, or within 10%
    return sizes[nearest]


def check_here(cost: ModelCost, machine: MachineFigures, measured_s: float | None) -> Check:
    """This machine's prediction for a model against its measured inference time."""
    pred = predict_s(cost, bandwidth_at(machine, cost.weight_bytes), machine.throughput_gops.get(cost.precision))
    return Check.of(pred, measured_s, "this machine")


def predict_device(cost: ModelCost, profile: DeviceProfile) -> DevicePrediction:
    """A device profile's roofline time. The DRAM bound is dropped for weights that fit in the
    profile's last-level cache (no cited cache bandwidth): then only the compute bound is left."""
    throughput = profile.throughput_gops(cost.precision)
    fits = bool(profile.cache_kb and cost.weight_bytes <= profile.cache_kb * 1024)
    pred = predict_s(cost, None if fits else profile.memory_bandwidth_gbs, throughput)
    missing = [] if throughput else [f"{cost.precision} compute throughput"]
    if not fits and not profile.memory_bandwidth_gbs:
        missing.append("memory bandwidth")
    return DevicePrediction(**asdict(pred), fits_in_cache=fits, missing=tuple(missing))


def check_device(cost: ModelCost, profile: DeviceProfile, measured_s: float | None) -> Check:
    """A device profile's prediction against the time measured on that device (--host)."""
    return Check.of(predict_device(cost, profile), measured_s, f"the device ({profile.name} figures)")


def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="python -m deployment_study.roofline", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure", help="measure this machine (run it pinned to one core)")
    m.add_argument("--sizes", type=int, nargs="*", default=[], help="working-set sizes in bytes")
    m.add_argument("--out", required=True, type=output_file, help="JSON file for the figures")
    c = sub.add_parser("cost", help="weight bytes, multiply-adds and precision of ONNX models")
    c.add_argument("models", nargs="+")
    args = p.parse_args(argv)
    if args.cmd == "cost":
        for path in args.models:
            try:
                print(path, json.dumps(asdict(model_cost(path))))
            except (OSError, ValueError) as e:
                raise UserError(f"{path}: {e}") from None
        return 0
    if any(s <= 0 for s in args.sizes):
        raise UserError("--sizes must be positive byte counts")
    from airq_cli import write_json

    write_json(args.out, measure_machine(args.sizes))
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
