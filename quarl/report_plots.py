"""The figures of ``python -m quarl report`` (quarl.report), as PNG bytes: reward vs bits per cell (Figure 1,
``quantize.sweep.plot``), the weight histograms and SQNR per layer (Figures 2-3, ``quantize.analyze.plot``)
and the weight ranges beside the int8 error of every cell."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from nav_env.render import figure_png
from quantize.analyze import plot as analyze_plot
from quarl.config import env_slug
from quarl.report_records import WEIGHT_BITS, CellReport, CellWidth, algo_order


def env_label(env_id: str) -> str:
    """The env as shown in titles: MinAtar ids already say MinAtar ("MinAtar/Breakout-v1")."""
    return env_id


def reward_vs_bits_png(cell: CellReport) -> bytes | None:
    # deferred: torch (via quantize.sweep): seconds to import
    from quantize.sweep import plot

    if not cell.ptq and not cell.qat:
        return None
    fp32 = cell.rewards["fp32"]
    ref = {"mean": fp32.mean, "ci95": fp32.interval}
    cells: dict[tuple[str, int], dict[str, Any]] = {}
    for method, sweep in (("ptq", cell.ptq), ("qat", cell.qat)):
        for b, s in sweep.items():
            cells[(method, b)] = {"mean": s.mean, "ci95": s.interval}
    bits = sorted({b for _, b in cells})
    # With 2-3 seeds a t interval can span many times the task's whole score range (t = 12.7 with one degree of
    # freedom): the axes follow the means, and the bars are cut at them.
    means = [fp32.mean] + [c["mean"] for c in cells.values()]
    lo, hi = min(means), max(means)
    pad = 0.1 * (hi - lo) if hi > lo else max(1.0, 0.1 * abs(hi))
    n = len(cell.used_seeds)
    status = "" if cell.counted else " [baseline failed]"
    return plot(
        ref,
        cells,
        bits,
        ["ptq", "qat"],
        f"{env_label(cell.env_id)} {cell.algo.upper()} ({n} seed{'s' if n != 1 else ''}){status}",
        value="mean",
        interval="ci95",
        scale=1.0,
        ylabel="mean episode return",
        ylim=(lo - pad, hi + pad),
        xlabel="bits (weights and activations, the seed's affine quantizer)",
        what="mean return",
        labels={
            "ptq": "PTQ (bars: 95% t over seeds, cut at the axes)",
            "qat": "QAT (bars: 95% t over seeds, cut at the axes)",
        },
        ref_label="fp32 (band: 95% t over seeds)",
    )


def weights_pngs(width: CellWidth, layers: list[tuple[str, np.ndarray]], rows: list[dict]) -> tuple[bytes, bytes]:
    status = "" if width.counted else " [baseline failed]"
    title = f"{env_label(width.env_id)} {width.algo.upper()} fp32, seed {width.figure_seed}{status}"
    return analyze_plot(layers, WEIGHT_BITS, rows, title)


def weight_widths_png(widths: list[CellWidth]) -> bytes:
    # deferred: matplotlib: plots only
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    envs = sorted({w.env_id for w in widths})
    algos = sorted({w.algo for w in widths}, key=algo_order)
    colors = {algo: plt.get_cmap("tab10")(i) for i, algo in enumerate(algos)}
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.8))
    width = 0.8 / max(1, len(algos))
    for i, algo in enumerate(algos):
        xs, ys, errs, hatches = [], [], [], []
        for j, env in enumerate(envs):
            w = next((w for w in widths if w.env_id == env and w.algo == algo), None)
            if w is None:
                continue
            xs.append(j + (i - (len(algos) - 1) / 2) * width)
            ys.append(w.widest_range.mean)
            errs.append(0.0 if math.isnan(w.widest_range.std) else w.widest_range.std)
            hatches.append("" if w.counted else "//")
        bars = ax1.bar(xs, ys, width, yerr=errs, capsize=3, color=colors[algo], label=algo.upper())
        for bar, hatch in zip(bars, hatches):
            bar.set_hatch(hatch)
    ax1.set_xticks(range(len(envs)))
    ax1.set_xticklabels(envs, rotation=20, ha="right", fontsize=8)
    ax1.set_ylabel("widest layer range max(W) - min(W)")
    ax1.set_title("weight range per algorithm (mean ± sd over seeds; hatched: baseline failed)", fontsize=9)
    ax1.legend(fontsize=8)
    ax1.grid(axis="y", alpha=0.3)
    shown = [w for w in widths if math.isfinite(w.int8_error)]
    for w in shown:
        marker = "o" if w.counted else "x"
        ax2.scatter(w.widest_range.mean, w.int8_error, color=colors[w.algo], marker=marker, s=40)
    # counted cells numbered at their point and named in the key (names at the points overlap where errors are
    # close); the failed ones are named in the left panel
    counted = sorted((w for w in shown if w.counted), key=lambda w: (-w.int8_error, w.widest_range.mean))
    for algo in algos:
        ax2.scatter([], [], color=colors[algo], label=algo.upper())
    for k, w in enumerate(counted, 1):
        ax2.annotate(str(k), (w.widest_range.mean, w.int8_error), xytext=(4, 3), textcoords="offset points", fontsize=7)
        ax2.plot([], [], " ", label=f"{k}: {env_slug(w.env_id)} {w.algo.upper()} ({w.int8_error:+.1f}%)")
    ax2.axhline(0, color="gray", lw=0.8)
    ax2.set_xlabel("widest layer range max(W) - min(W)")
    ax2.set_ylabel("int8 (static) error vs fp32 (%)")
    ax2.set_title("int8 error vs weight range (x: baseline failed)", fontsize=9)
    ax2.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    ax2.grid(alpha=0.3)
    fig.suptitle("Weight ranges and int8 error per cell (seed's claim: widest weights quantize worst)", fontsize=10)
    fig.tight_layout()
    return figure_png(fig)
