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
* ``report.json``: everything above as data.

Baseline gate: each trial carries its fp32 gate (``trial.baseline``, ``quarl.published.baseline_gate``).
A seed whose baseline failed is left out of its cell's numbers; a cell with no passing seed is shown
(numbers over all its seeds, marked "baseline failed") and left out of every mean and of the reading's
conclusions. A ``trial.json`` that cannot be read is skipped with a one-line warning naming the file and
listed in every markdown output (``strict=True``: a QuarlError instead); a trial directory without a
``trial.json`` (unfinished) is listed the same way.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from quarl.config import env_slug
from quarl.errors import QuarlError
from quarl.published import SEED_MEAN_ERRORS, SEED_SOURCE, SeedRow, is_minatar, seed_row
from quarl.results import PTQ, QAT, TrialResult, error_percent

PRECISIONS = ("fp32", "fp16", "int8", "int8-dynamic")  # the ONNX policies of Table 2
QUANTIZED = PRECISIONS[1:]
COMPARE_BITS = (4, 5)  # QAT vs PTQ
HOLD_ERROR_PCT = 10.0  # an n-bit policy "holds" its reward when its error vs fp32 is at most this
SEED_HOLD_BITS = (5, 6)  # the seed's QAT claim: reward holds down to 5-6 bits...
SEED_DROP_BITS = (2, 3, 4)  # ...and drops at 2-4 bits
WEIGHT_BITS = [8, 4]  # histogram grid (the smallest) and SQNR bit widths of the weight figures
CONFIDENCE = 0.95
MISSING = "—"


# ---------------------------------------------------------------------------------------------- records


@dataclass(frozen=True)
class Stat:
    """A mean over seeds (or episodes) with its sample standard deviation and 95% t interval (NaN for n < 2)."""

    mean: float
    std: float
    n: int
    low: float
    high: float

    @property
    def interval(self) -> tuple[float, float]:
        """(low, high), or (mean, mean) when there is no interval (one value): for plotting."""
        if math.isnan(self.low):
            return (self.mean, self.mean)
        return (self.low, self.high)


@dataclass(frozen=True)
class Skipped:
    path: str
    reason: str


@dataclass(frozen=True)
class Trial:
    result: TrialResult
    directory: Path


@dataclass
class CellReport:
    """One (env, algorithm) over its seeds."""

    env_id: str
    algo: str
    seeds: list[int]
    passed_seeds: list[int]
    threshold: float
    published: float
    published_source: str
    budget_note: str
    steps: int
    counted: bool  # at least one seed passed its baseline: the cell enters the means and the reading
    rewards: dict[str, Stat]  # PRECISIONS -> over the used seeds' mean returns
    errors: dict[str, Stat]  # QUANTIZED -> over the used seeds' error %
    ptq: dict[int, Stat]  # bits -> mean return over seeds
    qat: dict[int, Stat]
    ptq_errors: dict[int, Stat]
    qat_errors: dict[int, Stat]
    seed: SeedRow | None
    used_seeds: list[int] = field(default_factory=list)  # passed seeds, or all seeds for a failed cell

    @property
    def status(self) -> str:
        if not self.passed_seeds:
            return "baseline failed"
        failed = [s for s in self.seeds if s not in self.passed_seeds]
        if failed:
            return f"ok; baseline failed for seed(s) {', '.join(map(str, failed))}, left out"
        return "ok"

    @property
    def label(self) -> str:
        return f"{self.env_id} {self.algo.upper()}"


@dataclass(frozen=True)
class AlgoMean:
    algo: str
    cells: list[str]  # env ids counted
    errors: dict[str, float]  # QUANTIZED -> mean over the counted cells of their mean error %
    seed_errors: tuple[float, float] | None  # the seed's published (fp16, int8) mean errors
    seed_same_envs: dict[str, float]  # fp16/int8 -> the seed's mean over the counted cells it also has
    seed_same_envs_n: int


@dataclass(frozen=True)
class PairedDiff:
    """QAT - PTQ at one bit width for one cell."""

    env_id: str
    algo: str
    bits: int
    counted: bool
    seeds: Stat  # over seeds of (mean QAT return - mean PTQ return)
    per_seed: dict[int, Stat]  # seed -> over episodes of (QAT return - PTQ return), paired episodes

    @property
    def verdict(self) -> str:
        s = self.seeds
        if s.n >= 2 and not math.isnan(s.low):
            basis = f"95% t interval over {s.n} seeds"
            low, high = s.low, s.high
        elif s.n == 1 and self.per_seed:
            (ep,) = self.per_seed.values()
            if ep.n < 2:
                return "undecided (one seed, one episode)"
            basis = f"one seed: 95% t interval over {ep.n} paired episodes"
            low, high = ep.low, ep.high
        else:
            return "undecided (no paired data)"
        if low > 0:
            return f"QAT better ({basis} excludes 0)"
        if high < 0:
            return f"PTQ better ({basis} excludes 0)"
        return f"no clear difference ({basis} contains 0)"


@dataclass(frozen=True)
class LayerWidth:
    layer: str
    shape: list[int]
    min: float
    max: float
    std: float
    sqnr_nearest_db: dict[int, float]


@dataclass(frozen=True)
class CellWidth:
    env_id: str
    algo: str
    counted: bool
    seeds: list[int]  # seeds whose fp32.onnx was read
    widest_range: Stat  # max over layers of (max W - min W), over seeds
    mean_range: Stat  # mean over layers of (max W - min W), over seeds
    figure_seed: int | None
    layers: list[LayerWidth]  # of the figure seed's model
    int8_error: float  # the cell's mean static int8 error %, for the comparison


@dataclass
class Report:
    study_dir: Path
    out_dir: Path
    cells: list[CellReport]
    algo_means: list[AlgoMean]
    qat_vs_ptq: list[PairedDiff]
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


# ---------------------------------------------------------------------------------------------- reading


def load_trial(path: Path) -> TrialResult:
    """A trial.json, or a one-line QuarlError naming the file."""
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict):
            raise ValueError(f"expected a JSON object, got {type(data).__name__}")
        trial = TrialResult.from_dict(data)
        for policy in trial.policies:
            np.asarray(policy.returns, dtype=float)  # ValueError/TypeError on a non-number
    except json.JSONDecodeError as e:
        raise QuarlError(f"{path}: not a valid trial.json (corrupt JSON: {e.msg} at line {e.lineno})") from None
    except KeyError as e:
        raise QuarlError(f"{path}: not a valid trial.json (missing key {e})") from None
    except (OSError, UnicodeDecodeError, TypeError, ValueError, AttributeError) as e:
        message = " ".join(str(e).split())
        raise QuarlError(f"{path}: not a valid trial.json ({type(e).__name__}: {message})") from None
    names = {p.name for p in trial.policies}
    if "fp32" not in names:
        raise QuarlError(f"{path}: not a valid trial.json (no fp32 policy; has {sorted(names)})")
    empty = sorted(p.name for p in trial.policies if not p.returns)
    if empty:
        raise QuarlError(f"{path}: not a valid trial.json (policies without returns: {empty})")
    return trial


def load_trials(study_dir: Path, strict: bool = False) -> tuple[list[Trial], list[Skipped]]:
    trials_dir = study_dir / "trials"
    if not study_dir.is_dir():
        raise QuarlError(f"{study_dir}: no such study directory")
    if not trials_dir.is_dir():
        raise QuarlError(f"{study_dir}: no trials/ folder (is this a study's output directory?)")
    trials: list[Trial] = []
    skipped: list[Skipped] = []
    seen: dict[tuple[str, str, int], Path] = {}
    for d in sorted(p for p in trials_dir.iterdir() if p.is_dir()):
        path = d / "trial.json"
        if not path.is_file():
            skipped.append(Skipped(str(path), "no trial.json (trial unfinished or failed)"))
            continue
        try:
            result = load_trial(path)
        except QuarlError as e:
            if strict:
                raise
            skipped.append(Skipped(str(path), str(e).removeprefix(f"{path}: ")))
            continue
        key = (result.env_id, result.algo, result.seed)
        if key in seen:
            skipped.append(Skipped(str(path), f"duplicate of {seen[key]} (same env, algorithm and seed)"))
            continue
        seen[key] = path
        trials.append(Trial(result, d))
    if not trials:
        detail = f"; skipped: {'; '.join(f'{s.path}: {s.reason}' for s in skipped)}" if skipped else ""
        raise QuarlError(f"{trials_dir}: no readable trials/*/trial.json{detail}")
    return trials, skipped


# ---------------------------------------------------------------------------------------------- statistics


def stat(values: Iterable[float]) -> Stat:
    """Mean, sample sd and the 95% t interval of the mean (scipy.stats.t); NaN where n is too small."""
    a = np.asarray(list(values), dtype=float)
    n = len(a)
    if n == 0:
        return Stat(math.nan, math.nan, 0, math.nan, math.nan)
    mean = float(np.mean(a))
    if n == 1 or not np.all(np.isfinite(a)):
        return Stat(mean, math.nan, n, math.nan, math.nan)
    from scipy import stats as st

    sd = float(np.std(a, ddof=1))
    half = float(st.t.ppf(0.5 + CONFIDENCE / 2, n - 1)) * sd / math.sqrt(n)
    return Stat(mean, sd, n, mean - half, mean + half)


def _sweep_means(trial: TrialResult, method: str) -> dict[int, float]:
    out: dict[int, float] = {}
    for p in trial.policies:
        if p.method == method and p.bits not in out:
            out[p.bits] = p.mean
    return out


def _onnx_mean(trial: TrialResult, name: str) -> float | None:
    for p in trial.policies:
        if p.name == name:
            return p.mean
    return None


def summarize_cell(trials: list[TrialResult]) -> CellReport:
    trials = sorted(trials, key=lambda t: t.seed)
    first = trials[0]
    passed = [t for t in trials if t.baseline.passed]
    used = passed or trials
    rewards: dict[str, Stat] = {}
    errors: dict[str, Stat] = {}
    for name in PRECISIONS:
        pairs = [(_onnx_mean(t, "fp32"), _onnx_mean(t, name)) for t in used]
        values = [(ref, v) for ref, v in pairs if ref is not None and v is not None]
        rewards[name] = stat(v for _, v in values)
        if name != "fp32":
            errors[name] = stat(error_percent(ref, v) for ref, v in values)
    sweeps: dict[str, dict[int, Stat]] = {}
    sweep_errors: dict[str, dict[int, Stat]] = {}
    for method in (PTQ, QAT):
        per_trial = [(_onnx_mean(t, "fp32"), _sweep_means(t, method)) for t in used]
        bits = sorted({b for _, m in per_trial for b in m}, reverse=True)
        sweeps[method] = {b: stat(m[b] for _, m in per_trial if b in m) for b in bits}
        sweep_errors[method] = {
            b: stat(error_percent(ref, m[b]) for ref, m in per_trial if b in m and ref is not None) for b in bits
        }
    return CellReport(
        env_id=first.env_id,
        algo=first.algo,
        seeds=[t.seed for t in trials],
        passed_seeds=[t.seed for t in passed],
        threshold=first.baseline.threshold,
        published=first.baseline.published,
        published_source=first.baseline.published_source,
        budget_note="; ".join(sorted({t.train.budget_note for t in trials if t.train.budget_note})),
        steps=first.train.steps,
        counted=bool(passed),
        rewards=rewards,
        errors=errors,
        ptq=sweeps[PTQ],
        qat=sweeps[QAT],
        ptq_errors=sweep_errors[PTQ],
        qat_errors=sweep_errors[QAT],
        seed=seed_row(first.env_id, first.algo),
        used_seeds=[t.seed for t in used],
    )


def algo_means(cells: list[CellReport]) -> list[AlgoMean]:
    out = []
    algos = sorted({c.algo for c in cells if c.counted}, key=_algo_order)
    for algo in algos:
        counted = [c for c in cells if c.algo == algo and c.counted]
        errors = {name: _finite_mean(c.errors[name].mean for c in counted) for name in QUANTIZED}
        seed_rows = [c.seed for c in counted if c.seed is not None]
        same = {
            "fp16": _finite_mean(r.error_fp16 for r in seed_rows),
            "int8": _finite_mean(r.error_int8 for r in seed_rows),
        }
        out.append(
            AlgoMean(algo, [c.env_id for c in counted], errors, SEED_MEAN_ERRORS.get(algo), same, len(seed_rows))
        )
    return out


def paired_qat_ptq(trials: list[TrialResult], counted: bool, bits: int) -> PairedDiff | None:
    """QAT - PTQ at ``bits`` for one cell's (used) trials, paired by seed and by episode."""
    seed_diffs: list[float] = []
    per_seed: dict[int, Stat] = {}
    for t in sorted(trials, key=lambda t: t.seed):
        q = next((p for p in t.policies if p.method == QAT and p.bits == bits), None)
        p = next((p for p in t.policies if p.method == PTQ and p.bits == bits), None)
        if q is None or p is None:
            continue
        seed_diffs.append(q.mean - p.mean)
        if len(q.returns) == len(p.returns):  # the same seeded episodes: paired per episode
            per_seed[t.seed] = stat(np.asarray(q.returns, float) - np.asarray(p.returns, float))
    if not seed_diffs:
        return None
    return PairedDiff(trials[0].env_id, trials[0].algo, bits, counted, stat(seed_diffs), per_seed)


# ---------------------------------------------------------------------------------------------- weights


def model_layers(path: Path) -> list[tuple[str, np.ndarray]]:
    """(layer name, weights) of an fp32 policy's Conv, Gemm and MatMul layers (quantize.analyze)."""
    import onnx

    from quantize.analyze import onnx_layer_weights

    try:
        model = onnx.load(str(path))
    except Exception as e:  # DecodeError and friends: a broken file
        raise QuarlError(f"{path}: not a valid ONNX model ({type(e).__name__})") from None
    layers = onnx_layer_weights(model, ("Conv", "Gemm", "MatMul"))
    if not layers:
        raise QuarlError(f"{path}: no Conv/Gemm/MatMul weights found")
    return layers


def _ranges(layers: list[tuple[str, np.ndarray]]) -> list[float]:
    return [float(w.max() - w.min()) for _, w in layers]


def cell_widths(
    cell: CellReport, trials: list[Trial], warn: Callable[[Skipped], None]
) -> tuple[CellWidth, list[tuple[str, np.ndarray]], list[dict]] | None:
    """Weight ranges over the cell's used seeds, and the layers and SQNR rows of the figure's model: seed 0's
    (the lowest seed read when 0 is absent)."""
    used = sorted((t for t in trials if t.result.seed in cell.used_seeds), key=lambda t: t.result.seed)
    widest, mean_range, seeds = [], [], []
    figure: tuple[int, list[tuple[str, np.ndarray]]] | None = None
    for t in used:
        path = t.directory / "fp32.onnx"
        if not path.is_file():
            warn(Skipped(str(path), "no fp32.onnx: no weight statistics for this seed"))
            continue
        try:
            layers = model_layers(path)
        except QuarlError as e:
            warn(Skipped(str(path), str(e).removeprefix(f"{path}: ")))
            continue
        r = _ranges(layers)
        widest.append(max(r))
        mean_range.append(float(np.mean(r)))
        seeds.append(t.result.seed)
        if figure is None:  # seeds ascending: seed 0 when it is there
            figure = (t.result.seed, layers)
    if figure is None:
        return None
    from quantize.analyze import sqnr_table

    rows = sqnr_table(figure[1], WEIGHT_BITS)
    layers_out = [
        LayerWidth(
            r["layer"], r["shape"], r["min"], r["max"], r["std"], {b: r["sqnr_nearest_db"][b] for b in WEIGHT_BITS}
        )
        for r in rows
    ]
    width = CellWidth(
        cell.env_id,
        cell.algo,
        cell.counted,
        seeds,
        stat(widest),
        stat(mean_range),
        figure[0],
        layers_out,
        cell.errors["int8"].mean,
    )
    return width, figure[1], rows


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


def _algo_order(algo: str) -> tuple[int, str]:
    order = ("a2c", "dqn", "ppo", "ddpg", "td3", "sac")
    return (order.index(algo) if algo in order else len(order), algo)


def _finite_mean(values: Iterable[float]) -> float:
    a = [v for v in values if not math.isnan(v)]
    return float(np.mean(a)) if a else math.nan


def env_label(env_id: str) -> str:
    """The env as shown in titles: MinAtar ids already say MinAtar ("MinAtar/Breakout-v1")."""
    return env_id


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


def baseline_text(c: CellReport) -> str:
    fp32 = c.rewards["fp32"].mean
    if not c.passed_seeds:
        return f"**baseline failed** (fp32 {num(fp32)} < {num(c.threshold)})"
    return f"{c.status} (gate ≥ {num(c.threshold)})"


def table2_markdown(cells: list[CellReport], means: list[AlgoMean], skipped: list[Skipped]) -> str:
    lines = [
        "# Table 2: reward of the fp32, fp16, int8 (static) and int8-dynamic policies",
        "",
        "Reward: mean over seeds of each seed's mean episode return (± standard deviation over seeds; n = seeds",
        "used). Error % = quarl.results.error_percent(fp32, quantized) = (fp32 - quantized) / |fp32| x 100,",
        "computed per seed on that seed's mean returns, then averaged over seeds (negative: the quantized policy",
        "scored higher). A seed whose fp32 policy failed its baseline gate is left out of its cell; a cell with",
        "no passing seed is shown over all its seeds, marked **baseline failed**, and left out of the means below.",
        f"Seed: {SEED_SOURCE} (fp32 / fp16 / int8, and its errors computed from them); {MISSING}: not in the seed's table.",
        "",
    ]
    header = ["env", "algo", "seeds (n used)", "baseline"]
    header += ["fp32", "fp16", "int8", "int8-dyn", "err fp16", "err int8", "err int8-dyn"]
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
                pct(seed8),
                pct(m.errors["int8-dynamic"]),
                same,
            ]
        )
    lines += md_table(header, rows) if rows else ["No cell passed its baseline: no means."]
    lines += skipped_lines(skipped)
    return "\n".join(lines) + "\n"


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


# ---------------------------------------------------------------------------------------------- reading.md


def reading_int8(cells: list[CellReport], means: list[AlgoMean]) -> list[str]:
    out = []
    ranked = sorted((m for m in means if not math.isnan(m.errors["int8"])), key=lambda m: -m.errors["int8"])
    if not ranked:
        return ["- int8: no cell passed its baseline with an int8 policy; nothing to compare with the seed."]

    def cells_of(m: AlgoMean) -> str:
        parts = [
            f"{c.env_id} {pct(c.errors['int8'].mean)}"
            for c in cells
            if c.algo == m.algo and c.counted and not math.isnan(c.errors["int8"].mean)
        ]
        return ", ".join(parts)

    order = " > ".join(f"{m.algo.upper()} {pct(m.errors['int8'])}" for m in ranked)
    top = ranked[0]
    out.append(
        f"- int8 (static) loses most here with {top.algo.upper()}: mean error {pct(top.errors['int8'])} over "
        f"{len(top.cells)} cell(s) ({cells_of(top)}). Order here: {order}."
    )
    ours = [m.algo for m in ranked]
    seed_ranked = sorted((a for a in ours if a in SEED_MEAN_ERRORS), key=lambda a: -SEED_MEAN_ERRORS[a][1])
    if seed_ranked:
        seed_order = " > ".join(f"{a.upper()} {pct(SEED_MEAN_ERRORS[a][1])}" for a in seed_ranked)
        same = seed_ranked[0] == top.algo
        out.append(
            f"- The seed's order over the same algorithms: {seed_order}; its largest int8 loss is "
            f"{seed_ranked[0].upper()}, {'the same' if same else 'not the same'} as here ({top.algo.upper()})."
        )
    for m in ranked:
        if m.seed_errors is None:
            continue
        diff = m.errors["int8"] - m.seed_errors[1]
        same_envs = (
            f"; the seed's mean over the same {m.seed_same_envs_n} env(s): {pct(m.seed_same_envs['int8'])}"
            if m.seed_same_envs_n
            else ""
        )
        out.append(
            f"- {m.algo.upper()} int8: {pct(m.errors['int8'])} here vs {pct(m.seed_errors[1])} in the seed "
            f"({'+' if diff >= 0 else '-'}{abs(diff):.2f} points){same_envs}; fp16: {pct(m.errors['fp16'])} "
            f"vs {pct(m.seed_errors[0])}."
        )
    return out


def bits_claim(errors: dict[int, Stat], hold: float) -> tuple[str, int | None]:
    """(classification against the seed's claim, the lowest width down to which every width holds)."""
    measured = {b: s.mean for b, s in errors.items() if s.n and not math.isnan(s.mean)}
    if not measured:
        return "no n-bit results", None
    lowest = None
    for b in sorted(measured, reverse=True):
        if measured[b] <= hold:
            lowest = b
        else:
            break
    high = [b for b in SEED_HOLD_BITS if b in measured]
    low = [b for b in SEED_DROP_BITS if b in measured]
    if not high or not low:
        return "not enough widths to test the seed's claim (needs one of 5-6 and one of 2-4 bits)", lowest
    holds = all(measured[b] <= hold for b in high)
    drops = any(measured[b] > hold for b in low)
    if holds and drops:
        return "as the seed: holds at 5-6 bits, drops at 2-4", lowest
    if holds:
        return "more robust than the seed's claim: holds even at 2-4 bits", lowest
    return "less robust than the seed's claim: already drops at 5-6 bits", lowest


def reading_bits(cells: list[CellReport], hold: float) -> list[str]:
    out = []
    for c in cells:
        if not c.counted:
            continue
        for name, errors in (("QAT", c.qat_errors), ("PTQ", c.ptq_errors)):
            if not errors:
                continue
            verdict, lowest = bits_claim(errors, hold)
            detail = ", ".join(f"{b}b {pct(s.mean)}" for b, s in sorted(errors.items(), reverse=True))
            held = f"holds (error ≤ {hold:g}%) down to {lowest} bits" if lowest else f"no width holds (≤ {hold:g}%)"
            out.append(f"- {c.label} {name}: {held}; {verdict}. Error vs fp32: {detail}.")
    return out or ["- No counted cell has n-bit PTQ/QAT results."]


def reading_qat(diffs: list[PairedDiff]) -> list[str]:
    counted = [d for d in diffs if d.counted]
    if not counted:
        return ["- No counted cell has QAT and PTQ at the compared widths."]
    out = []
    for d in counted:
        s = d.seeds
        out.append(
            f"- {d.env_id} {d.algo.upper()} {d.bits}-bit: QAT - PTQ {num(s.mean)} "
            f"(95% t over {s.n} seed(s) {interval(s, num)}): {d.verdict}."
        )
    better = sum(d.verdict.startswith("QAT better") for d in counted)
    worse = sum(d.verdict.startswith("PTQ better") for d in counted)
    out.append(
        f"- Overall: QAT beats PTQ (interval above 0) in {better} of {len(counted)} comparison(s), "
        f"PTQ beats QAT in {worse}, no clear difference or undecided in {len(counted) - better - worse}."
    )
    return out


def reading_widths(widths: list[CellWidth]) -> list[str]:
    counted = [w for w in widths if w.counted and not math.isnan(w.widest_range.mean)]
    if not counted:
        return ["- No counted cell has an fp32.onnx to measure."]
    out = []
    by_env: dict[str, list[CellWidth]] = {}
    for w in counted:
        by_env.setdefault(w.env_id, []).append(w)
    matches = total = 0
    for env, ws in sorted(by_env.items()):
        ws = [w for w in ws if not math.isnan(w.int8_error)]
        if len(ws) < 2:
            continue
        widest = max(ws, key=lambda w: w.widest_range.mean)
        worst = max(ws, key=lambda w: w.int8_error)
        same = widest is worst
        matches += same
        total += 1
        values = ", ".join(f"{w.algo.upper()} range {num(w.widest_range.mean)} / int8 {pct(w.int8_error)}" for w in ws)
        out.append(
            f"- {env}: widest weights {widest.algo.upper()}, largest int8 error {worst.algo.upper()}: "
            f"{'they coincide' if same else 'they differ'} ({values})."
        )
    if total:
        out.append(f"- Widest weights = largest int8 error in {matches} of {total} environment(s) with 2+ algorithms.")
    pts = [(w.widest_range.mean, w.int8_error) for w in counted if not math.isnan(w.int8_error)]
    if len(pts) >= 3 and len({p[0] for p in pts}) > 1 and len({p[1] for p in pts}) > 1:
        from scipy.stats import spearmanr

        rho, p = spearmanr([a for a, _ in pts], [b for _, b in pts])
        out.append(
            f"- Across all {len(pts)} counted cells, Spearman rank correlation of widest layer range with int8 "
            f"error: {float(rho):+.2f} (p = {float(p):.2g})."
        )
    elif len(pts) < 3:
        out.append(f"- Too few counted cells ({len(pts)}) for a rank correlation of range with int8 error.")
    return out or ["- No environment has two counted algorithms to compare weight ranges."]


def reading_markdown(
    cells: list[CellReport],
    means: list[AlgoMean],
    diffs: list[PairedDiff],
    widths: list[CellWidth],
    skipped: list[Skipped],
    hold: float,
) -> tuple[str, list[str]]:
    failed = [c.label for c in cells if not c.counted]
    statements: list[str] = []
    head = [
        "# Reading",
        "",
        f"Computed from {sum(len(c.seeds) for c in cells)} trial(s) in {len(cells)} cell(s); "
        f"{sum(c.counted for c in cells)} cell(s) passed their baseline and are used below.",
    ]
    if failed:
        head.append(f"Baseline failed (shown in the tables, not used here): {', '.join(failed)}.")
    sections = [
        ("## int8 and fp16 error vs the seed", reading_int8(cells, means)),
        (
            f"## Reward vs bits (the seed's QAT claim: holds to 5-6 bits, drops at 2-4; hold = error ≤ {hold:g}%)",
            reading_bits(cells, hold),
        ),
        ("## QAT vs PTQ", reading_qat(diffs)),
        ("## Weight ranges vs int8 error (the seed: DQN's weights widest, quantize worst)", reading_widths(widths)),
    ]
    lines = head
    for title, body in sections:
        lines += ["", title, "", *body]
        statements += body
    lines += skipped_lines(skipped)
    return "\n".join(lines) + "\n", statements


# ---------------------------------------------------------------------------------------------- plots


def reward_vs_bits_png(cell: CellReport) -> bytes | None:
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
        ylim=None,
        xlabel="bits (weights and activations, the seed's affine quantizer)",
        what="mean return",
        labels={"ptq": "PTQ (bars: 95% t over seeds)", "qat": "QAT (bars: 95% t over seeds)"},
        ref_label="fp32 (band: 95% t over seeds)",
    )


def weights_pngs(width: CellWidth, layers: list[tuple[str, np.ndarray]], rows: list[dict]) -> tuple[bytes, bytes]:
    from quantize.analyze import plot

    status = "" if width.counted else " [baseline failed]"
    title = f"{env_label(width.env_id)} {width.algo.upper()} fp32, seed {width.figure_seed}{status}"
    return plot(layers, WEIGHT_BITS, rows, title)


def weight_widths_png(widths: list[CellWidth]) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    envs = sorted({w.env_id for w in widths})
    algos = sorted({w.algo for w in widths}, key=_algo_order)
    colors = {algo: plt.get_cmap("tab10")(i) for i, algo in enumerate(algos)}
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.5))
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
    for w in widths:
        if math.isnan(w.int8_error) or math.isinf(w.int8_error):
            continue
        marker = "o" if w.counted else "x"
        ax2.scatter(w.widest_range.mean, w.int8_error, color=colors[w.algo], marker=marker, s=40)
        ax2.annotate(
            f"{env_slug(w.env_id)} {w.algo.upper()}", (w.widest_range.mean, w.int8_error), fontsize=7, alpha=0.8
        )
    for algo in algos:
        ax2.scatter([], [], color=colors[algo], label=algo.upper())
    ax2.axhline(0, color="gray", lw=0.8)
    ax2.set_xlabel("widest layer range max(W) - min(W)")
    ax2.set_ylabel("int8 (static) error vs fp32 (%)")
    ax2.set_title("int8 error vs weight range (x: baseline failed)", fontsize=9)
    ax2.legend(fontsize=8)
    ax2.grid(alpha=0.3)
    fig.suptitle("Weight ranges and int8 error per cell (seed's claim: widest weights quantize worst)", fontsize=10)
    fig.tight_layout()
    return figure_png(fig)


def figure_png(fig: Any) -> bytes:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


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
    from airq_cli import check_output_dir, write_atomic, write_json

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
    keys = sorted(groups, key=lambda k: (is_minatar(k[0]), k[0], _algo_order(k[1])))
    cells = [summarize_cell([t.result for t in groups[k]]) for k in keys]
    means = algo_means(cells)
    diffs: list[PairedDiff] = []
    for c, k in zip(cells, keys):
        used = [t.result for t in groups[k] if t.result.seed in c.used_seeds]
        for b in compare_bits:
            d = paired_qat_ptq(used, c.counted, b)
            if d is not None:
                diffs.append(d)

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
    reading_md, statements = reading_markdown(cells, means, diffs, widths, skipped, hold_error)
    put("table2.md", table2_markdown(cells, means, skipped))
    put("table2.csv", table2_csv(cells))
    put("table2_means.csv", means_csv(means))
    put("qat_vs_ptq.md", qat_markdown(diffs, skipped))
    put("qat_vs_ptq.csv", qat_csv(diffs))
    put("weights.md", weights_markdown(widths, skipped, unread))
    put("reading.md", reading_md)
    report = Report(study_dir, out_dir, cells, means, diffs, widths, statements, skipped, unread, files)
    files.append(write_json(out_dir / "report.json", report_dict(report)))
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
        "weights": [asdict(w) for w in report.widths],
        "reading": report.reading,
        "skipped": [asdict(s) for s in report.skipped],
        "unread_models": [asdict(s) for s in report.unread_models],
    }


def add_report_parser(subparsers: Any) -> argparse.ArgumentParser:
    """The ``report`` sub-command, for quarl.cli: ``sub = parser.add_subparsers(); add_report_parser(sub)``;
    then call :func:`run_report` with the parsed arguments (also set as ``args.func``)."""
    from airq_cli import output_dir

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
