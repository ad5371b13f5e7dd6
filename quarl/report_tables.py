"""The tables of ``python -m quarl report`` (quarl.report): number formatting, and the markdown and CSV of
Table 2 (``table2.md``, ``table2.csv``, ``table2_means.csv``), QAT vs PTQ (``qat_vs_ptq.md``, ``qat_vs_ptq.csv``)
and the weight ranges (``weights.md``)."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict
from typing import Any

from quarl.config import env_slug
from quarl.published import SEED_SOURCE
from quarl.report_records import (
    PRECISION_TITLES,
    PRECISIONS,
    QUANTIZED,
    WEIGHT_BITS,
    AlgoMean,
    CellReport,
    CellWidth,
    PairedDiff,
    Skipped,
    Stat,
    WeightBitsDiff,
)

MISSING = "—"


# ---------------------------------------------------------------------------------------------- formatting


def num(x: float | None) -> str:
    """A reward or a range for a table: about 4 significant digits, no exponent."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return MISSING
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    a = abs(x)
    if a >= 1000:
        return f"{x:.0f}"
    if a >= 100:
        return f"{x:.1f}"
    if a >= 1:
        return f"{x:.2f}"
    return f"{x:.3g}"


def pct(x: float | None, sign: bool = True) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return MISSING
    if math.isinf(x):
        return "inf%"
    return f"{x:+.2f}%" if sign else f"{x:.2f}%"


def pm(s: Stat, fmt: Callable[[float], str] = num) -> str:
    if s.n == 0:
        return MISSING
    if math.isnan(s.std):
        return fmt(s.mean)
    return f"{fmt(s.mean)} ± {fmt(s.std).lstrip('+')}"


def interval(s: Stat, fmt: Callable[[float], str]) -> str:
    if math.isnan(s.low):
        return "n/a (n < 2)"
    return f"[{fmt(s.low)}, {fmt(s.high)}]"


def md_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def skipped_lines(skipped: list[Skipped]) -> list[str]:
    if not skipped:
        return []
    return ["", f"Skipped ({len(skipped)}), not in any number here:", *[f"- `{s.path}`: {s.reason}" for s in skipped]]


def csv_text(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    for r in rows:
        w.writerow(["" if isinstance(v, float) and math.isnan(v) else v for v in r])
    return buf.getvalue()


# ---------------------------------------------------------------------------------------------- tables


def baseline_text(c: CellReport) -> str:
    fp32 = c.rewards["fp32"].mean
    if not c.passed_seeds:
        return f"**baseline failed** (fp32 {num(fp32)} < {num(c.threshold)})"
    return f"{c.status} (gate ≥ {num(c.threshold)})"


def table2_markdown(
    cells: list[CellReport], means: list[AlgoMean], skipped: list[Skipped], weight_bits: Sequence[WeightBitsDiff] = ()
) -> str:
    lines = [
        "# Table 2: reward of the fp32, fp16, int8 (static) and int8-dynamic policies",
        "",
        "Reward: mean over seeds of each seed's mean episode return (± standard deviation over seeds; n = seeds",
        "used). Error % = quarl.results.error_percent(fp32, quantized) = (fp32 - quantized) / |fp32| x 100,",
        "computed per seed on that seed's mean returns, then averaged over seeds (negative: the quantized policy",
        "scored higher). A seed whose fp32 policy failed its baseline gate is left out of its cell; a cell with",
        "no passing seed is shown over all its seeds, marked **baseline failed**, and left out of the means below.",
        f"Seed: {SEED_SOURCE} (fp32 / fp16 / int8, and its errors computed from them); {MISSING}: not in the seed's table.",
        "int8: static, 8-bit weights (s8s8: int8 activations x int8 weights in [-127, 127], as the seed's int8);",
        "int8 w7: the same calibration with 7-bit weights (u8s7: uint8 activations x weights in [-64, 64], airq's",
        "shipped scheme); int8-dyn: weights int8 in [-64, 64], activations quantized per call. Each computes the same",
        "integers on AVX2, VNNI and Arm (firmware_bridge.int8_kernels), so no column depends on the CPU.",
        "",
    ]
    header = ["env", "algo", "seeds (n used)", "baseline"]
    header += [PRECISION_TITLES[p] for p in PRECISIONS] + [f"err {PRECISION_TITLES[p]}" for p in QUANTIZED]
    header += ["seed fp32 / fp16 / int8", "seed err fp16 / int8"]
    rows = []
    for c in cells:
        s = c.seed
        seed_vals = f"{num(s.fp32)} / {num(s.fp16)} / {num(s.int8)}" if s else MISSING
        seed_errs = f"{pct(s.error_fp16)} / {pct(s.error_int8)}" if s else MISSING
        if s and s.note:
            seed_vals += f" ({s.note})"
        rows.append(
            [
                c.env_id,
                c.algo.upper(),
                f"{','.join(map(str, c.seeds))} ({len(c.used_seeds)})",
                baseline_text(c),
                *[pm(c.rewards[p]) for p in PRECISIONS],
                *[pm(c.errors[p], pct) for p in QUANTIZED],
                seed_vals,
                seed_errs,
            ]
        )
    lines += md_table(header, rows)
    notes = [f"- {c.label}: {c.budget_note}" for c in cells if c.budget_note]
    if notes:
        lines += ["", "Training budgets different from the zoo's:", *notes]
    lines += ["", "Baseline gates (quarl.published.baseline_gate):"]
    lines += [f"- {c.label}: fp32 ≥ {num(c.threshold)}; {c.published_source}" for c in cells]
    lines += [
        "",
        "## Mean error per algorithm (cells that passed their baseline)",
        "",
        "Ours: mean over the counted cells of their error %. Seed: its published means over all its Table 2",
        "environments (A2C, DQN, PPO: 8 envs; DDPG: 4), and its mean over the same environments as ours where",
        "it has them.",
        "",
    ]
    header = [
        "algo",
        "cells",
        "fp16 ours",
        "fp16 seed",
        "int8 ours",
        "int8 w7 ours",
        "int8 seed",
        "int8-dyn ours",
        "seed, same envs: fp16 / int8",
    ]
    rows = []
    for m in means:
        seed16, seed8 = m.seed_errors if m.seed_errors else (math.nan, math.nan)
        same = (
            f"{pct(m.seed_same_envs['fp16'])} / {pct(m.seed_same_envs['int8'])} ({m.seed_same_envs_n} envs)"
            if m.seed_same_envs_n
            else MISSING
        )
        rows.append(
            [
                m.algo.upper(),
                str(len(m.cells)),
                pct(m.errors["fp16"]),
                pct(seed16),
                pct(m.errors["int8"]),
                pct(m.errors["int8-w7"]),
                pct(seed8),
                pct(m.errors["int8-dynamic"]),
                same,
            ]
        )
    lines += md_table(header, rows) if rows else ["No cell passed its baseline: no means."]
    lines += weight_bits_lines(weight_bits)
    lines += skipped_lines(skipped)
    return "\n".join(lines) + "\n"


def weight_bits_lines(diffs: Iterable[WeightBitsDiff]) -> list[str]:
    diffs = list(diffs)
    if not diffs:
        return []
    lines = [
        "",
        "## 7 vs 8 weight bits (static int8, paired)",
        "",
        "The same trained fp32 policy, calibration observations and evaluation episodes, quantized with 8-bit",
        "weights (int8) and 7-bit weights (int8 w7). Errors as in Table 2 (mean ± sd over the used seeds);",
        "8-bit - 7-bit: the difference of the seeds' mean returns, mean over seeds with its 95% t interval;",
        "verdict: Wilcoxon signed-rank test (scipy.stats.wilcoxon) of the paired episode returns pooled over the",
        "seeds (episodes with equal returns dropped).",
        "",
    ]
    header = ["env", "algo", "baseline", "err int8 (8-bit)", "err int8 w7 (7-bit)", "seed err int8"]
    header += ["8-bit - 7-bit return", "95% t (seeds)", "paired episodes (differ)", "verdict"]
    rows = [
        [
            d.env_id,
            d.algo.upper(),
            "ok" if d.counted else "**baseline failed**",
            pm(d.error8, pct),
            pm(d.error7, pct),
            pct(d.seed_error_int8),
            f"{num(d.seeds.mean)} (n={d.seeds.n})",
            interval(d.seeds, num),
            f"{d.episodes} ({d.episodes_differ})",
            d.verdict,
        ]
        for d in diffs
    ]
    return lines + md_table(header, rows)


TABLE2_CSV_HEADER = [
    "env_id",
    "algo",
    "seeds",
    "seeds_passed",
    "seeds_used",
    "status",
    "counted",
    "steps",
    "budget_note",
    "threshold",
    "published",
    "published_source",
    *[f"{p.replace('-', '_')}_{k}" for p in PRECISIONS for k in ("mean", "std")],
    *[f"err_{p.replace('-', '_')}_pct_{k}" for p in QUANTIZED for k in ("mean", "std")],
    "seed_env",
    "seed_fp32",
    "seed_fp16",
    "seed_int8",
    "seed_err_fp16_pct",
    "seed_err_int8_pct",
    "seed_note",
]


def table2_csv(cells: list[CellReport]) -> str:
    rows = []
    for c in cells:
        s = c.seed
        rows.append(
            [
                c.env_id,
                c.algo,
                " ".join(map(str, c.seeds)),
                " ".join(map(str, c.passed_seeds)),
                len(c.used_seeds),
                c.status,
                int(c.counted),
                c.steps,
                c.budget_note,
                c.threshold,
                c.published,
                c.published_source,
                *[v for p in PRECISIONS for v in (c.rewards[p].mean, c.rewards[p].std)],
                *[v for p in QUANTIZED for v in (c.errors[p].mean, c.errors[p].std)],
                s.env if s else "",
                s.fp32 if s else math.nan,
                s.fp16 if s else math.nan,
                s.int8 if s else math.nan,
                s.error_fp16 if s else math.nan,
                s.error_int8 if s else math.nan,
                s.note if s else "",
            ]
        )
    return csv_text(TABLE2_CSV_HEADER, rows)


def means_csv(means: list[AlgoMean]) -> str:
    header = [
        "algo",
        "cells",
        "err_fp16_pct",
        "err_int8_pct",
        "err_int8_w7_pct",
        "err_int8_dynamic_pct",
        "seed_err_fp16_pct",
        "seed_err_int8_pct",
        "seed_same_envs_err_fp16_pct",
        "seed_same_envs_err_int8_pct",
        "seed_same_envs_n",
    ]
    rows = []
    for m in means:
        s16, s8 = m.seed_errors if m.seed_errors else (math.nan, math.nan)
        rows.append(
            [
                m.algo,
                " ".join(m.cells),
                m.errors["fp16"],
                m.errors["int8"],
                m.errors["int8-w7"],
                m.errors["int8-dynamic"],
                s16,
                s8,
                m.seed_same_envs["fp16"],
                m.seed_same_envs["int8"],
                m.seed_same_envs_n,
            ]
        )
    return csv_text(header, rows)


def qat_markdown(diffs: list[PairedDiff], skipped: list[Skipped]) -> str:
    lines = [
        "# QAT vs PTQ, paired by seed",
        "",
        "QAT - PTQ mean episode return at the same bit width (the seed's n-bit affine quantizer; both start",
        "from the same seed's fp32 policy and play the same seeded episodes). Over seeds: mean of each seed's",
        "(QAT mean - PTQ mean) with a 95% t interval over seeds (scipy.stats.t). Per seed: the paired",
        "per-episode difference with a 95% t interval over episodes. Positive: QAT scored higher.",
        "",
    ]
    header = ["env", "algo", "bits", "baseline", "QAT - PTQ over seeds", "95% t interval (seeds)", "verdict"]
    header += ["per seed: mean [95% t over episodes]"]
    rows = []
    for d in diffs:
        per_seed = "; ".join(
            f"s{seed}: {num(s.mean)} {interval(s, num)} ({s.n} ep)" for seed, s in sorted(d.per_seed.items())
        )
        rows.append(
            [
                d.env_id,
                d.algo.upper(),
                str(d.bits),
                "ok" if d.counted else "**baseline failed**",
                f"{num(d.seeds.mean)} (n={d.seeds.n})",
                interval(d.seeds, num),
                d.verdict,
                per_seed or MISSING,
            ]
        )
    lines += md_table(header, rows) if rows else ["No trial has both QAT and PTQ at these bit widths."]
    lines += skipped_lines(skipped)
    return "\n".join(lines) + "\n"


def qat_csv(diffs: list[PairedDiff]) -> str:
    header = ["env_id", "algo", "bits", "counted", "seeds_n", "diff_mean", "diff_std", "diff_low", "diff_high"]
    header += ["verdict", "per_seed"]
    rows = [
        [
            d.env_id,
            d.algo,
            d.bits,
            int(d.counted),
            d.seeds.n,
            d.seeds.mean,
            d.seeds.std,
            d.seeds.low,
            d.seeds.high,
            d.verdict,
            json.dumps({str(k): asdict(v) for k, v in d.per_seed.items()}),
        ]
        for d in diffs
    ]
    return csv_text(header, rows)


def weights_markdown(widths: list[CellWidth], skipped: list[Skipped], unread: list[Skipped]) -> str:
    lines = [
        "# Weight ranges (the seed's Figures 2-3 and its claim that the widest weights quantize worst)",
        "",
        "Range of a layer = max(W) - min(W) of its weight tensor (the seed's quantizer is per tensor: its step",
        "is range / 2^n). Widest = the largest layer range of a policy; mean over layers too; both as mean ±",
        "sd over the seeds whose fp32.onnx was read (the seeds used in Table 2). int8 error: Table 2's static",
        "int8 error of the cell.",
        "",
    ]
    header = ["env", "algo", "baseline", "seeds", "widest layer range", "mean layer range", "int8 error"]
    rows = [
        [
            w.env_id,
            w.algo.upper(),
            "ok" if w.counted else "**baseline failed**",
            ",".join(map(str, w.seeds)),
            pm(w.widest_range),
            pm(w.mean_range),
            pct(w.int8_error),
        ]
        for w in widths
    ]
    lines += md_table(header, rows) if rows else ["No fp32.onnx found."]
    for w in widths:
        lines += [
            "",
            f"## {w.env_id} {w.algo.upper()}, seed {w.figure_seed} fp32.onnx",
            "",
            f"SQNR: the seed's quantizer, round to nearest (its public code), per tensor. Figure: "
            f"weights_{env_slug(w.env_id)}_{w.algo}.png (histograms, {min(WEIGHT_BITS)}-bit grid), "
            f"sqnr_{env_slug(w.env_id)}_{w.algo}.png.",
            "",
        ]
        lines += md_table(
            ["layer", "shape", "min", "max", "range", "std", *[f"SQNR {b}b (dB)" for b in WEIGHT_BITS]],
            [
                [
                    f"`{layer.layer}`",
                    "x".join(map(str, layer.shape)),
                    f"{layer.min:.4g}",
                    f"{layer.max:.4g}",
                    f"{layer.max - layer.min:.4g}",
                    f"{layer.std:.4g}",
                    *[f"{layer.sqnr_nearest_db[b]:.1f}" for b in WEIGHT_BITS],
                ]
                for layer in w.layers
            ],
        )
    if unread:
        lines += ["", f"Models not read ({len(unread)}), not in the weight statistics:"]
        lines += [f"- `{s.path}`: {s.reason}" for s in unread]
    lines += skipped_lines(skipped)
    return "\n".join(lines) + "\n"
