"""``python -m quarl report STUDY_DIR``: the study's Table 2, QAT vs PTQ, Figure 1-3 style plots and a reading.

Reads every ``STUDY_DIR/trials/*/trial.json`` (a :class:`quarl.results.TrialResult`), groups the trials by
(env, algorithm) over seeds and writes, atomically, into STUDY_DIR (or ``--out``):

* ``table2.md``, ``table2.csv`` (one row per cell), ``table2_means.csv`` (one row per algorithm): reward
  fp32 / fp16 / int8 (static) / int8-dynamic, mean over seeds of each seed's mean return (+- the standard
  deviation over seeds, n seeds); error % vs fp32 computed per seed with ``quarl.results.error_percent``
  on that seed's mean returns, then averaged over seeds; the seed's Table 2 numbers beside ours; then the
  mean error per algorithm over the cells that count, ours beside the seed's.
* ``qat_vs_ptq.md``, ``qat_vs_ptq.csv``: at ``compare_bits`` (4 and 5), per cell, QAT - PTQ mean return
  paired by seed (each seed's QAT and PTQ policies come from the same fp32 policy and play the same
  seeded episodes): mean over seeds with a 95% t interval over seeds, and per seed the paired
  per-episode difference with its 95% t interval over episodes.
* ``reward_vs_bits_<env>_<algo>.png`` (Figure 1): mean return vs bits, PTQ and QAT, 95% t interval over
  seeds, fp32 as a dashed line in its band (``quantize.sweep.plot``).
* ``weights_<env>_<algo>.png``, ``sqnr_<env>_<algo>.png`` (Figures 2-3): the seed-0 trial's fp32.onnx
  (the lowest seed when 0 is absent), per-layer weight histograms with the 4-bit grid and the 8/4-bit
  SQNR per layer (``quantize.analyze``); ``weights.md`` and ``weight_widths.png``: weight ranges per
  cell and algorithm beside the int8 error (the seed's claim: the widest weights quantize worst).
* ``reading.md``: statements computed from the numbers above, each with its numbers.
* ``report.json``: everything above as data; ``report.html``: all of it in one self-contained page
  (``quarl.report_html``).

Baseline gate: each trial carries its fp32 gate (``trial.baseline``, ``quarl.published.baseline_gate``).
A seed whose baseline failed is left out of its cell's numbers; a cell with no passing seed is shown
(numbers over all its seeds, marked "baseline failed") and left out of every mean and of the reading's
conclusions. A ``trial.json`` that cannot be read is skipped with a one-line warning naming the file and
listed in every markdown output (``strict=True``: a QuarlError instead); a trial directory without a
``trial.json`` (unfinished) is listed the same way.

The report's modules: this one (the entry points and the :class:`Report`), ``quarl.report_records`` (the
records), ``quarl.report_stats`` (reading the trials, the statistics, the weight widths),
``quarl.report_tables`` (markdown and CSV), ``quarl.report_reading`` (``reading.md``) and
``quarl.report_plots`` (the figures).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from airq_cli import check_output_dir, output_dir, write_atomic, write_json
from quarl.config import env_slug
from quarl.published import is_minatar
from quarl.report_html import write_report_html
from quarl.report_plots import reward_vs_bits_png, weight_widths_png, weights_pngs
from quarl.report_reading import HOLD_ERROR_PCT, reading_markdown
from quarl.report_records import (
    PRECISIONS,
    QUANTIZED,
    WEIGHT_BITS,
    AlgoMean,
    CellReport,
    CellWidth,
    LayerWidth,
    PairedDiff,
    Skipped,
    Stat,
    Trial,
    WeightBitsDiff,
    algo_order,
)
from quarl.report_stats import (
    algo_means,
    cell_widths,
    load_trial,
    load_trials,
    paired_qat_ptq,
    stat,
    summarize_cell,
    weight_bits_diff,
)
from quarl.report_tables import (
    means_csv,
    qat_csv,
    qat_markdown,
    table2_csv,
    table2_markdown,
    weights_markdown,
)

__all__ = [
    "COMPARE_BITS",
    "HOLD_ERROR_PCT",
    "PRECISIONS",
    "QUANTIZED",
    "WEIGHT_BITS",
    "AlgoMean",
    "CellReport",
    "CellWidth",
    "LayerWidth",
    "PairedDiff",
    "Report",
    "Skipped",
    "Stat",
    "Trial",
    "add_report_parser",
    "build_report",
    "load_trial",
    "load_trials",
    "report_dict",
    "run_report",
    "stat",
]

COMPARE_BITS = (4, 5)  # QAT vs PTQ


@dataclass
class Report:
    study_dir: Path
    out_dir: Path
    cells: list[CellReport]
    algo_means: list[AlgoMean]
    qat_vs_ptq: list[PairedDiff]
    weight_bits: list[WeightBitsDiff]
    widths: list[CellWidth]
    reading: list[str]
    skipped: list[Skipped]  # trials not in any number
    unread_models: list[Skipped]  # fp32.onnx files missing or unreadable: only the weight statistics lack them
    files: list[Path]

    def cell(self, env_id: str, algo: str) -> CellReport:
        for c in self.cells:
            if c.env_id == env_id and c.algo == algo:
                return c
        raise KeyError(f"no cell {env_id} {algo}")


# ---------------------------------------------------------------------------------------------- entry points


def build_report(
    study_dir: Path,
    out: Path | None = None,
    *,
    strict: bool = False,
    compare_bits: Sequence[int] = COMPARE_BITS,
    hold_error: float = HOLD_ERROR_PCT,
    figures: bool = True,
    warn: Callable[[str], None] | None = None,
) -> Report:
    """Read the study's trials, write the report's files into ``out`` (default: the study dir), return the data.

    ``figures=False`` writes the tables and the reading only (the weight statistics are still computed).
    ``warn`` gets one line per skipped trial or model (default: stderr).
    """
    study_dir = Path(study_dir)
    out_dir = check_output_dir(out if out is not None else study_dir, "--out")
    say = warn or (lambda line: print(line, file=sys.stderr))
    trials, skipped = load_trials(study_dir, strict)
    for s in skipped:
        say(f"warning: skipped {s.path}: {s.reason}")

    unread: list[Skipped] = []

    def note(s: Skipped) -> None:
        unread.append(s)
        say(f"warning: {s.path}: {s.reason}")

    groups: dict[tuple[str, str], list[Trial]] = {}
    for t in trials:
        groups.setdefault((t.result.env_id, t.result.algo), []).append(t)
    keys = sorted(groups, key=lambda k: (is_minatar(k[0]), k[0], algo_order(k[1])))
    cells = [summarize_cell([t.result for t in groups[k]]) for k in keys]
    means = algo_means(cells)
    diffs: list[PairedDiff] = []
    weight_bits: list[WeightBitsDiff] = []
    for c, k in zip(cells, keys):
        used = [t.result for t in groups[k] if t.result.seed in c.used_seeds]
        for b in compare_bits:
            d = paired_qat_ptq(used, c.counted, b)
            if d is not None:
                diffs.append(d)
        w = weight_bits_diff(used, c.counted)
        if w is not None:
            weight_bits.append(w)

    files: list[Path] = []

    def put(name: str, data: bytes | str) -> None:
        files.append(write_atomic(out_dir / name, data.encode() if isinstance(data, str) else data))

    widths: list[CellWidth] = []
    for c, k in zip(cells, keys):
        slug = f"{env_slug(c.env_id)}_{c.algo}"
        png = reward_vs_bits_png(c) if figures else None
        if png is not None:
            put(f"reward_vs_bits_{slug}.png", png)
        measured = cell_widths(c, groups[k], note)
        if measured is not None:
            width, layers, rows = measured
            widths.append(width)
            if figures:
                hist_png, sqnr_png = weights_pngs(width, layers, rows)
                put(f"weights_{slug}.png", hist_png)
                put(f"sqnr_{slug}.png", sqnr_png)
    if widths and figures:
        put("weight_widths.png", weight_widths_png(widths))
    reading_md, statements = reading_markdown(cells, means, diffs, widths, skipped, hold_error, weight_bits)
    put("table2.md", table2_markdown(cells, means, skipped, weight_bits))
    put("table2.csv", table2_csv(cells))
    put("table2_means.csv", means_csv(means))
    put("qat_vs_ptq.md", qat_markdown(diffs, skipped))
    put("qat_vs_ptq.csv", qat_csv(diffs))
    put("weights.md", weights_markdown(widths, skipped, unread))
    put("reading.md", reading_md)
    report = Report(study_dir, out_dir, cells, means, diffs, weight_bits, widths, statements, skipped, unread, files)
    files.append(write_json(out_dir / "report.json", report_dict(report)))
    files.append(write_report_html(out_dir / "report.json", files))  # report.json and the figures in one page
    return report


def report_dict(report: Report) -> dict[str, Any]:
    def cell(c: CellReport) -> dict[str, Any]:
        d = asdict(c)
        d["status"] = c.status
        return d

    return {
        "study_dir": str(report.study_dir),
        "cells": [cell(c) for c in report.cells],
        "algo_means": [asdict(m) for m in report.algo_means],
        "qat_vs_ptq": [asdict(d) | {"verdict": d.verdict} for d in report.qat_vs_ptq],
        "weight_bits": [asdict(w) | {"verdict": w.verdict} for w in report.weight_bits],
        "weights": [asdict(w) for w in report.widths],
        "reading": report.reading,
        "skipped": [asdict(s) for s in report.skipped],
        "unread_models": [asdict(s) for s in report.unread_models],
    }


def add_report_parser(subparsers: Any) -> argparse.ArgumentParser:
    """The ``report`` sub-command, for quarl.cli: ``sub = parser.add_subparsers(); add_report_parser(sub)``;
    then call :func:`run_report` with the parsed arguments (also set as ``args.func``)."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "report",
        help="Table 2, QAT vs PTQ, reward-vs-bits and weight figures, and a reading, from a study's trials",
        description=(__doc__ or "").split("\n\n")[0],
    )
    p.add_argument("study_dir", metavar="STUDY_DIR", help="the study's output directory (holds trials/*/trial.json)")
    p.add_argument("--out", type=output_dir, default=None, help="write the report here (default: STUDY_DIR)")
    p.add_argument(
        "--strict", action="store_true", help="a trial.json that cannot be read is an error (default: skip, listed)"
    )
    p.add_argument("--compare-bits", type=int, nargs="+", default=list(COMPARE_BITS), help="bit widths of QAT vs PTQ")
    p.add_argument(
        "--hold-error",
        type=float,
        default=HOLD_ERROR_PCT,
        help="an n-bit policy holds its reward when its error vs fp32 is at most this (%%)",
    )
    p.add_argument("--no-figures", dest="figures", action="store_false", help="tables and reading only")
    p.set_defaults(func=run_report)
    return p


def run_report(args: argparse.Namespace) -> int:
    report = build_report(
        Path(args.study_dir),
        Path(args.out) if args.out else None,
        strict=args.strict,
        compare_bits=args.compare_bits,
        hold_error=args.hold_error,
        figures=args.figures,
    )
    counted = sum(c.counted for c in report.cells)
    print(
        f"{len(report.cells)} cell(s), {counted} passed their baseline, {len(report.skipped)} skipped; "
        f"wrote {len(report.files)} files to {report.out_dir}"
    )
    print((report.out_dir / "reading.md").read_text())
    return 0
