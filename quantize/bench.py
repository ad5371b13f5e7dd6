"""``python -m quantize bench MODEL...``: batch-1 latency with onnxruntime, one thread.

Models are run interleaved (round-robin blocks of calls) in one process, so a background load on the
shared CPU hits all of them alike and the ratios stay meaningful. ``--cold`` overwrites a buffer larger
than the last-level cache before each call, as on a Pi where the policy's weights are evicted by the
rest of the control loop between decisions.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from firmware_bridge.device import cpu_model
from firmware_bridge.int8_kernels import int8_kernels
from quantize.errors import QuantizeError
from quantize.inspect_model import int8_scheme_from_weights
from quantize.model_io import load_policy
from quantize.runtime import session


@dataclass
class BenchRow:
    path: Path
    precision: str
    size_bytes: int
    p50_us: float
    p99_us: float
    mean_us: float
    calls: int
    int8_scheme: str | None = None  # read from the weights (quantize.inspect_model)
    host: str = ""  # CPU model and int8 kernel class of the machine that measured it


def bench(
    paths: list[str], calls: int = 2000, block: int = 50, warmup: int = 100, cold: bool = False, seed: int = 0
) -> list[BenchRow]:
    if not paths:
        raise QuantizeError("bench needs at least one model")
    if calls < 10:
        raise QuantizeError(f"--calls must be >= 10, got {calls}")
    models = [load_policy(p) for p in paths]
    dims = {m.obs_dim for m in models}
    if len(dims) != 1:
        raise QuantizeError(f"models take different input sizes {sorted(dims)}: compare models of one policy")
    obs_dim = dims.pop()
    sessions = []
    for m in models:
        try:
            sessions.append(session(m.data, threads=1))
        except Exception as e:
            raise QuantizeError(f"{m.path}: onnxruntime cannot load it: {str(e).splitlines()[0][:200]}") from None
    # Inputs shaped like observations: depth in [0, 1], state in [-1, 1]; values barely matter for an MLP.
    rng = np.random.default_rng(seed)
    inputs = rng.uniform(0.0, 1.0, size=(256, 1, obs_dim)).astype(np.float32)
    inputs[:, :, -8:] = rng.uniform(-1.0, 1.0, size=(256, 1, 8))
    evict = np.zeros(64 * 1024 * 1024 // 8) if cold else None
    times: list[list[float]] = [[] for _ in models]
    for s in sessions:
        for i in range(warmup):
            s.run(["action"], {"obs": inputs[i % 256]})
    done = 0
    while done < calls:
        n = min(block, calls - done)
        for k, s in enumerate(sessions):
            for i in range(n):
                x = inputs[(done + i) % 256]
                if evict is not None:
                    evict += 1.0  # touch 64 MB: the weights leave the caches
                t0 = time.perf_counter_ns()
                s.run(["action"], {"obs": x})
                times[k].append((time.perf_counter_ns() - t0) / 1e3)
        done += n

    host = f"{cpu_model()}: {int8_kernels().describe()}"
    rows = []
    for m, t in zip(models, times):
        a = np.asarray(t)
        scheme = int8_scheme_from_weights(m.model)
        rows.append(
            BenchRow(
                m.path,
                m.metadata.get("airq.precision", "fp32"),
                len(m.data),
                float(np.percentile(a, 50)),
                float(np.percentile(a, 99)),
                float(a.mean()),
                len(a),
                scheme["scheme"] if scheme else None,
                host,
            )
        )
    return rows


def format_table(rows: list[BenchRow], cold: bool) -> str:
    base = next((r for r in rows if r.precision == "fp32"), rows[0])
    head = f"batch 1, 1 thread, onnxruntime, {rows[0].calls} calls each, interleaved{', cold cache' if cold else ''}; ratios vs {base.path.name}"
    lines = [head, rows[0].host]
    lines += [
        f"warning: {r.path.name}: not computed exactly here (scheme {r.int8_scheme})"
        for r in rows
        if r.int8_scheme and not int8_kernels().exact_for(r.int8_scheme)
    ]
    lines += [
        f"{'model':<34} {'precision':<13} {'size':>12} {'p50 us':>9} {'p99 us':>9} {'speedup p50':>12} {'smaller':>8}"
    ]
    for r in rows:
        lines.append(
            f"{r.path.name:<34} {r.precision:<13} {r.size_bytes:>12,} {r.p50_us:>9.1f} {r.p99_us:>9.1f} "
            f"{base.p50_us / r.p50_us:>11.2f}x {base.size_bytes / r.size_bytes:>7.2f}x"
        )
    return "\n".join(lines)
