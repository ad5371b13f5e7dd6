"""``python -m quantize sweep RUN_DIR``: success rate per bit width x method, like the seed's Figure 1.

Methods (all with the seed's n-bit affine quantizer, per-tensor, logits not quantized). A plain name
rounds weights to nearest (the seed's public code, np.rint); ``-floor`` is the paper's formula as printed
(floor(W / delta) + z), which collapses below 8 bits (docs/quantize.md):
  ptq                weights + activations with ranges calibrated on the policy's rollouts
  ptq-floor          the same, weights with the floor formula
  ptq-weights        weights only (the seed's PTQ quantized weights only)
  ptq-weights-floor  weights only, floor
  ptq-floor-bc       ptq-floor with bias correction at the freeze (quantize.fakequant.correct_biases)
  qat                QAT (quantize.qat): fine-tune with fake-quant weights + activations
  qat-floor          the same, weights with the floor formula
  qat-floor-bc       qat-floor with bias correction at the freeze
Activations always round to nearest. The method names ptq-nearest, qat-nearest, ptq-bc and qat-bc,
which other versions used, are refused with a one-line error naming the current name
(RENAMED), so an old command never silently measures another quantizer. Every method and the fp32
actor play the same seeded episodes (seed + j), so each cell also gets a paired difference to fp32
(McNemar). Cells are cached in OUT/cells/ under the method and its weight rounding, so an interrupted
sweep resumes and a cell cached under an old name's meaning is never reused.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from airq_cli import check_output_dir, write_atomic, write_json
from nav_env.config import load_level
from nav_env.render import figure_png
from nav_env.rollout import summarize
from nav_env.stats import paired_difference
from policies.actor import actor_from_model, load_run
from quantize.affine import Rounding
from quantize.errors import QuantizeError
from quantize.evaluation import compare, evaluate_actor, success_vector, torch_policy
from quantize.fakequant import FakeQuantActor, calibrate
from quantize.qat import train_qat


@dataclass(frozen=True)
class Method:
    """What a sweep method name means."""

    qat: bool
    rounding: Rounding  # weights; activations always round to nearest
    activations: bool = True
    bias_correction: bool = False


METHOD_SPECS: dict[str, Method] = {
    "ptq": Method(False, "nearest"),
    "ptq-floor": Method(False, "floor"),
    "ptq-weights": Method(False, "nearest", activations=False),
    "ptq-weights-floor": Method(False, "floor", activations=False),
    "ptq-floor-bc": Method(False, "floor", bias_correction=True),
    "qat": Method(True, "nearest"),
    "qat-floor": Method(True, "floor"),
    "qat-floor-bc": Method(True, "floor", bias_correction=True),
}
METHODS = tuple(METHOD_SPECS)
DEFAULT_METHODS = ("ptq", "qat")
# names used before the default became rounding to nearest -> their new name
RENAMED = {"ptq-nearest": "ptq", "qat-nearest": "qat", "ptq-bc": "ptq-floor-bc", "qat-bc": "qat-floor-bc"}


def check_method(name: str) -> str:
    """A known method name, or a one-line QuantizeError (naming the new name for a renamed one)."""
    if name in METHOD_SPECS:
        return name
    if name in RENAMED:
        raise QuantizeError(
            f"sweep method {name!r} was renamed: use {RENAMED[name]!r} (plain ptq/qat now round weights "
            f"to nearest; the seed's floor formula is ptq-floor/qat-floor)"
        )
    raise QuantizeError(f"unknown sweep method {name!r} (known: {', '.join(METHODS)})")


def _cell_path(out: Path, method: str, bits: int) -> Path:
    return out / "cells" / f"{method}_{bits}bit.json"


def run_sweep(args) -> Path:
    # deferred: onnxruntime (via quantize.calibration): ~0.2 s to import, paid only where used
    from quantize.calibration import CALIBRATION_SEED, collect_observations

    if args.episodes < 1:
        raise QuantizeError(f"--episodes must be >= 1, got {args.episodes}")
    for m in args.methods:
        check_method(m)

    check_output_dir(args.out or Path(args.run_dir) / "sweep", "--out")  # the default under RUN_DIR too
    torch.set_num_threads(1)
    run_dir = Path(args.run_dir)
    run_cfg, model, ckpt = load_run(run_dir, "best")
    actor = actor_from_model(model)
    level = args.level or run_cfg.level
    cfg = load_level(level)
    out = Path(args.out or run_dir / "sweep")
    params = {
        "run_dir": str(run_dir),
        "checkpoint": str(ckpt),
        "level": level,
        "episodes": args.episodes,
        "seed": args.seed,
    }

    ref_path = out / "cells" / "fp32.json"
    ref = evaluate_actor(actor, cfg, args.episodes, args.seed)
    ref_summary = summarize(ref)
    write_atomic(
        ref_path,
        json.dumps(
            params
            | {
                "success": success_vector(ref).tolist(),
                "success_rate": ref_summary["success_rate"],
                "success_ci95": ref_summary["success_ci95"],
            }
        ).encode(),
    )
    print(
        f"fp32: success {ref_summary['success_rate']:.1%} over {args.episodes} episodes ({level}, seeds {args.seed}..)",
        flush=True,
    )
    calib = None
    cells: dict[tuple[str, int], dict] = {}
    for bits in args.bits:
        for method in args.methods:
            path = _cell_path(out, method, bits)
            spec = METHOD_SPECS[method]
            cell_params = params | {"method": method, "bits": bits, "rounding": spec.rounding}
            if spec.qat:
                cell_params |= {"qat_steps": args.qat_steps, "qat_delay": args.qat_delay}
            if path.is_file():
                cached = json.loads(path.read_text())
                if cached.get("params") == cell_params:
                    cells[(method, bits)] = cached
                    print(f"{method} {bits}-bit: cached {cached['success_rate']:.1%}", flush=True)
                    continue
            if spec.qat:
                res = train_qat(
                    run_dir,
                    bits,
                    args.qat_delay,
                    args.qat_steps,
                    progress=False,
                    threads=2,
                    rounding=spec.rounding,
                    bias_correction=spec.bias_correction,
                )
                torch.set_num_threads(1)
                q_actor = res.actor
            else:
                if calib is None:
                    calib = torch.as_tensor(
                        collect_observations(torch_policy(actor), cfg, 20, CALIBRATION_SEED, 20_000)
                    )
                q_actor = FakeQuantActor.from_actor(
                    actor, bits, quantize_activations=spec.activations, rounding=spec.rounding
                )
                calibrate(q_actor, calib, bias_correction=spec.bias_correction)
            results = evaluate_actor(q_actor, cfg, args.episodes, args.seed)
            # the per-episode outcomes let any two cells be paired later (e.g. QAT vs PTQ at one width)
            cell = compare(ref, results) | {
                "params": cell_params,
                "success": success_vector(results).astype(int).tolist(),
            }
            write_json(path, cell)
            cells[(method, bits)] = cell
            d = cell["paired_diff"]
            print(
                f"{method} {bits}-bit: success {cell['success_rate']:.1%} (vs fp32 {d['diff']:+.1%}, "
                f"[{d['low']:+.1%}, {d['high']:+.1%}], McNemar p={d['mcnemar_p']:.3g})",
                flush=True,
            )
    table = format_table(ref_summary, cells, args.bits, args.methods, params) + qat_vs_ptq(cells, args.bits)
    write_atomic(out / "sweep.md", table.encode())
    write_atomic(
        out / "sweep.json",
        json.dumps(
            {
                "params": params,
                "fp32": {k: ref_summary[k] for k in ("success_rate", "success_ci95")},
                "cells": [{"method": m, "bits": b} | c for (m, b), c in cells.items()],
            },
            indent=1,
        ).encode(),
    )
    write_atomic(out / "sweep.png", plot(ref_summary, cells, args.bits, args.methods, f"{run_dir.name} ({level})"))
    print(table)
    print(f"wrote {out / 'sweep.md'}, {out / 'sweep.png'}")
    return out


def qat_vs_ptq(cells: dict, bits: list[int]) -> str:
    """Paired success difference of each QAT cell against the PTQ cell with the same quantizer."""
    lines = []
    for b in bits:
        for qat, ptq in (("qat", "ptq"), ("qat-floor", "ptq-floor"), ("qat-floor-bc", "ptq-floor-bc")):
            q, p = cells.get((qat, b)), cells.get((ptq, b))
            if not q or not p or "success" not in q or "success" not in p:
                continue
            d = paired_difference(np.array(p["success"], bool), np.array(q["success"], bool))
            lines.append(
                f"{b}-bit {qat} - {ptq}: {d['diff']:+.1%} (95% CI {d['low']:+.1%} to {d['high']:+.1%}), "
                f"McNemar p={d['mcnemar_p']:.3g}"
            )
    return ("\n" + "\n".join(lines) + "\n") if lines else ""


def format_table(ref: dict, cells: dict, bits: list[int], methods: list[str], params: dict) -> str:
    lo, hi = ref["success_ci95"]
    lines = [
        f"Success rate over {params['episodes']} seeded episodes ({params['level']}, seeds {params['seed']}..), "
        f"95% Wilson interval; in parentheses the paired difference to fp32.",
        f"fp32: {ref['success_rate']:.1%} [{lo:.1%}, {hi:.1%}]",
        "",
        "| bits | " + " | ".join(methods) + " |",
        "|---|" + "---|" * len(methods),
    ]
    for b in bits:
        row = [f"| {b} "]
        for m in methods:
            c = cells.get((m, b))
            if c is None:
                row.append("-")
                continue
            clo, chi = c["success_ci95"]
            row.append(f"{c['success_rate']:.1%} [{clo:.1%}, {chi:.1%}] ({c['paired_diff']['diff']:+.1%})")
        lines.append(" | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def plot(
    ref: dict,
    cells: dict,
    bits: list[int],
    methods: list[str],
    title: str,
    *,
    value: str = "success_rate",
    interval: str = "success_ci95",
    scale: float = 100.0,
    ylabel: str = "success rate (%)",
    ylim: tuple[float, float] | None = (0, 100),
    xlabel: str = "bits (weights and activations; ptq-weights: weights only)",
    what: str = "success rate",
    labels: dict[str, str] | None = None,
    ref_label: str = "fp32",
) -> bytes:
    """The metric (``ref[value]``, ``cells[(method, bits)][value]``, times ``scale``) against the bit width, each
    point with its ``interval`` (low, high) as error bars, the reference as a dashed line in its band. The
    defaults draw a sweep's success rates; other callers (quarl's reward vs bits) name their keys, axis
    labels and legend ``labels`` per method."""
    # deferred: matplotlib: plots only
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    xs = sorted(bits)
    lo, hi = ref[interval]
    ax.axhspan(lo * scale, hi * scale, color="gray", alpha=0.15)
    ax.axhline(ref[value] * scale, color="gray", ls="--", label=ref_label)
    for m, marker in zip(methods, "osd^v"):
        pts = [(b, cells[(m, b)]) for b in xs if (m, b) in cells]
        if not pts:
            continue
        y = np.array([c[value] for _, c in pts]) * scale
        # max(0, .): a Wilson bound at 0% or 100% can sit a rounding error past the estimate
        err = (
            np.array([[max(0.0, c[value] - c[interval][0]), max(0.0, c[interval][1] - c[value])] for _, c in pts]).T
            * scale
        )
        ax.errorbar([b for b, _ in pts], y, yerr=err, marker=marker, capsize=3, label=(labels or {}).get(m, m))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_xticks(xs)
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(f"{title}: {what} vs bit width", fontsize=10)
    fig.tight_layout()
    return figure_png(fig)
