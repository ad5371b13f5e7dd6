"""The numbers of ``python -m quarl report`` (quarl.report): reading the study's ``trials/*/trial.json``,
the statistics over seeds (Table 2 per cell, mean error per algorithm, QAT - PTQ paired by seed and episode)
and the weight widths of each cell's fp32.onnx."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from quantize.analyze import onnx_layer_weights, sqnr_table
from quarl.errors import QuarlError
from quarl.published import SEED_MEAN_ERRORS, seed_row
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
from quarl.results import PTQ, QAT, TrialResult, error_percent

CONFIDENCE = 0.95


# ---------------------------------------------------------------------------------------------- loading trials


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
    # deferred: scipy: over a second to import
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
    algos = sorted({c.algo for c in cells if c.counted}, key=algo_order)
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


def weight_bits_diff(trials: list[TrialResult], counted: bool) -> WeightBitsDiff | None:
    """int8 (8-bit weights) against int8-w7 (7-bit) for one cell's (used) trials, paired by seed and episode."""
    seed_diffs: list[float] = []
    errors8: list[float] = []
    errors7: list[float] = []
    episode_diffs: list[np.ndarray] = []
    for t in sorted(trials, key=lambda t: t.seed):
        fp32, eight, seven = (_onnx_mean(t, n) for n in ("fp32", "int8", "int8-w7"))
        if fp32 is None or eight is None or seven is None:
            continue
        seed_diffs.append(eight - seven)
        errors8.append(error_percent(fp32, eight))
        errors7.append(error_percent(fp32, seven))
        a, b = t.policy("int8").returns, t.policy("int8-w7").returns
        if len(a) == len(b):  # the same seeded episodes
            episode_diffs.append(np.asarray(a, float) - np.asarray(b, float))
    if not seed_diffs:
        return None
    diffs = np.concatenate(episode_diffs) if episode_diffs else np.zeros(0)
    differ = int(np.count_nonzero(diffs))
    p = 1.0
    if differ:
        # deferred: scipy: over a second to import
        from scipy.stats import wilcoxon

        p = float(wilcoxon(diffs[diffs != 0]).pvalue)
    row = seed_row(trials[0].env_id, trials[0].algo)
    return WeightBitsDiff(
        trials[0].env_id,
        trials[0].algo,
        counted,
        stat(errors8),
        stat(errors7),
        stat(seed_diffs),
        len(diffs),
        differ,
        p,
        row.error_int8 if row is not None else math.nan,
    )


def _finite_mean(values: Iterable[float]) -> float:
    a = [v for v in values if not math.isnan(v)]
    return float(np.mean(a)) if a else math.nan


# ---------------------------------------------------------------------------------------------- weights


def model_layers(path: Path) -> list[tuple[str, np.ndarray]]:
    """(layer name, weights) of an fp32 policy's Conv, Gemm and MatMul layers (quantize.analyze)."""
    # deferred: onnx: ~0.2 s to import, paid only where used
    import onnx

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
