"""fp32 actors against int8 actors in one benchmark: the same training run (task, seeds, settings) once per
precision and seed, the order alternating (seed 0: fp32 then int8; seed 1: int8 then fp32; ...), so slow drift
of the machine falls on both. Ratios compare runs of the same seed. Rerunning the same command (more seeds
allowed) keeps every finished run (its report.json, if it was made with the same settings) and resumes an
unfinished one from its checkpoint, so a many-seed benchmark can span several sittings; the timing ratios
of a seed whose runs sat in different sittings compare different machine states, so they are flagged.

    python -m actorq.bench --task pendulum --seeds 0 1 2 --steps 20000 --bench-out out/actorq/bench_pendulum
    python -m actorq.bench --task nav --seeds 0 --steps 6000 --learning-starts 3000 --bench-out out/actorq/bench_nav

Per precision: actor steps/s (each actor's own act + env time), the network's time per act, learner updates/s,
env steps/s end to end, time and steps to the task's threshold, final score, and per weight version: build,
pull, load, their sum against the rollout time, staleness. The int8 - fp32 final score difference over the
seeds gets a paired t interval (scipy). On two cores the learner and the actors share the CPUs: the
end-to-end figure is the learner's pace, and the actor-side ratio is what predicts a cluster's speed-up
(docs/actorq.md).
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from actorq import cluster
from actorq.errors import ActorQError
from actorq.tasks import spec
from actorq.train import Run, TrainArgs, TrainReport, machine_facts, resolved
from actorq.train import parser as train_parser
from airq_cli import output_dir, run, write_json

# settings that may differ between the runs of one benchmark: the rest must match a kept run's report.json
PER_RUN = frozenset({"precision", "seed", "out", "resume", "progress"})

FIELDS = (
    "actor_steps_per_s_median",
    "act_ms_median",
    "env_ms_median",
    "updates_per_s",
    "env_steps_per_s_end_to_end",
)


@dataclass(frozen=True)
class RunRow:
    seed: int
    precision: str
    order: int  # position in the benchmark (0 = first run)
    final_score: float | None
    mean_eval_score: float | None  # mean over the run's evaluations: the learning curve's area, less noisy than its end
    reached_steps: int | None  # first evaluation at or above the threshold
    reached_s: float | None  # its training wall time (evaluations excluded)
    rates: dict
    version_costs: dict
    staleness: dict
    energy_joules: float
    out: str
    sitting: str  # "this run", "kept" (finished earlier) or "resumed" (continued from a checkpoint)


@dataclass(frozen=True)
class BenchResult:
    command: str
    task: str
    threshold: float
    machine: dict
    runs: list[RunRow]
    ratios: dict  # int8 / fp32 per seed, then medians
    final_score_difference: dict  # int8 - fp32, mean and 95% paired t interval
    mean_eval_score_difference: dict  # the same for the mean over each run's evaluations


def _row(seed: int, precision: str, order: int, report: TrainReport, out: Path, sitting: str) -> RunRow:
    first = report.reached["first"]
    scores = [e["score"] for e in report.state.get("evaluations", [])]
    return RunRow(
        seed,
        precision,
        order,
        report.final.get("score"),
        float(np.mean(scores)) if scores else None,
        None if first is None else first["env_steps"],
        None if first is None else first["seconds_training"],
        report.rates,
        report.version_costs,
        report.staleness,
        report.energy_estimate["joules"],
        str(out),
        sitting,
    )


def kept_report(args: TrainArgs, run_dir: Path) -> TrainReport | None:
    """The run's report.json if it finished with these settings; None if it never finished; an error if it
    finished with other settings (then its numbers would be mixed into another benchmark)."""
    path = run_dir / "report.json"
    if not path.is_file():
        return None
    try:
        report = TrainReport(**json.loads(path.read_text()))
    except (ValueError, TypeError) as e:
        raise ActorQError(f"{path}: not a readable run report ({e}): remove it to rerun that run") from None
    wanted = {k: v for k, v in asdict(args).items() if k not in PER_RUN}
    differ = sorted(k for k, v in wanted.items() if report.args.get(k) != v)
    if differ:
        shown = ", ".join(f"{k} {report.args.get(k)!r} there, {wanted[k]!r} asked" for k in differ)
        raise ActorQError(f"{run_dir} holds a run made with other settings ({shown}): use another --bench-out")
    return report


def paired_interval(differences: list[float]) -> dict:
    # deferred: scipy: over a second to import
    from scipy import stats

    d = np.asarray(differences, dtype=float)
    out: dict = {"n": len(d), "mean": float(d.mean()) if len(d) else None, "ci95": None}
    if len(d) >= 2 and d.std(ddof=1) > 0:
        lo, hi = stats.t.interval(0.95, len(d) - 1, loc=d.mean(), scale=stats.sem(d))
        out["ci95"] = [float(lo), float(hi)]
    return out


def bench(base: TrainArgs, seeds: list[int], out: Path) -> BenchResult:
    rows: list[RunRow] = []
    order = 0
    for k, seed in enumerate(seeds):
        for precision in ("fp32", "int8") if k % 2 == 0 else ("int8", "fp32"):
            run_dir = out / f"{precision}_s{seed}"
            args = resolved(replace(base, precision=precision, seed=seed, out=str(run_dir)))
            report = kept_report(args, run_dir)
            sitting = "kept"
            if report is None:
                resume = (run_dir / "checkpoints/state.json").is_file()
                sitting = "resumed" if resume else "this run"
                try:
                    report = Run(replace(args, resume=resume)).train()
                finally:
                    cluster.stop()
            rows.append(_row(seed, precision, order, report, run_dir, sitting))
            order += 1
    ratios: dict = {}
    by = {(r.seed, r.precision): r for r in rows}
    # a resumed run was timed over two sittings; a kept run beside a new one in another sitting
    sittings = {s: {by[(s, "int8")].sitting, by[(s, "fp32")].sitting} for s in seeds}
    split = [s for s in seeds if "resumed" in sittings[s] or len(sittings[s]) > 1]
    for name in FIELDS:
        per_seed = []
        for seed in seeds:
            a, b = by[(seed, "int8")].rates.get(name), by[(seed, "fp32")].rates.get(name)
            per_seed.append(None if not a or not b else a / b)
        shown = [x for x in per_seed if x is not None]
        ratios[name] = {"per_seed": per_seed, "median": float(np.median(shown)) if shown else None}
    ratios["seeds_timed_in_different_sittings"] = split

    def differences(score: str) -> list[float]:
        pairs = [(getattr(by[(s, "int8")], score), getattr(by[(s, "fp32")], score)) for s in seeds]
        return [a - b for a, b in pairs if a is not None and b is not None]

    return BenchResult(
        command="python -m actorq.bench " + " ".join(sys.argv[1:]),
        task=base.task,
        threshold=spec(base.task).reward_threshold,
        machine=machine_facts(),
        runs=rows,
        ratios=ratios,
        final_score_difference=paired_interval(differences("final_score")),
        mean_eval_score_difference=paired_interval(differences("mean_eval_score")),
    )


def report_lines(result: BenchResult) -> list[str]:
    lines = [
        f"{result.task}, {len(result.runs)} runs, threshold {result.threshold:g}; {result.machine['cpu']}, "
        f"{result.machine['int8_kernels']}"
    ]
    lines.append(
        "| seed | precision | final | threshold at steps (s) | actor steps/s | act ms | updates/s | version ms / rollout "
        "| sitting |"
    )
    lines.append("|---|---|---|---|---|---|---|---|---|")
    for r in result.runs:
        v = r.version_costs
        version = (
            "-"
            if v["version_s_median"] is None
            else f"{1e3 * v['version_s_median']:.0f} ({100 * v['version_over_rollout']:.0f}%)"
        )
        reached = "-" if r.reached_steps is None else f"{r.reached_steps:,} ({r.reached_s:.0f})"
        final = "-" if r.final_score is None else f"{r.final_score:.4g}"
        lines.append(
            f"| {r.seed} | {r.precision} | {final} | {reached} | {r.rates['actor_steps_per_s_median']:.0f} | "
            f"{r.rates['act_ms_median']:.3f} | {r.rates['updates_per_s'] or 0:.1f} | {version} | {r.sitting} |"
        )
    for name in FIELDS:
        ratio = result.ratios[name]
        if ratio["median"] is not None:
            lines.append(f"int8 / fp32 {name}: median {ratio['median']:.2f}x (per seed {ratio['per_seed']})")
    if result.ratios["seeds_timed_in_different_sittings"]:
        lines.append(
            f"seeds {result.ratios['seeds_timed_in_different_sittings']}: their fp32 and int8 runs were timed in "
            "different sittings (resumed or kept), so their ratios compare different machine states"
        )
    for what, d in (
        ("final score", result.final_score_difference),
        ("mean score over the evaluations", result.mean_eval_score_difference),
    ):
        if d["mean"] is not None:
            ci = "" if d["ci95"] is None else f", 95% paired t interval {d['ci95'][0]:.4g}..{d['ci95'][1]:.4g}"
            lines.append(f"{what} int8 - fp32: mean {d['mean']:.4g} over {d['n']} seeds{ci}")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = train_parser("python -m actorq.bench", __doc__.split("\n\n")[0])
    p.add_argument(
        "--seeds", type=int, nargs="+", default=[0, 1, 2], help="training seeds (one run per precision each)"
    )
    p.add_argument("--bench-out", type=output_dir, default="out/actorq/bench", help="where the runs and bench.json go")
    values = vars(p.parse_args(argv))
    seeds, out = values.pop("seeds"), Path(values.pop("bench_out"))
    base = TrainArgs(**values)
    if base.out or base.resume or base.precision != TrainArgs.precision:
        p.error(
            "--out, --resume and --precision belong to actorq.train: the benchmark runs both precisions under --bench-out"
        )
    resolved(base)  # bad values stop here
    result = bench(base, seeds, out)
    write_json(out / "bench.json", asdict(result))
    for line in report_lines(result):
        print(line)
    print(f"written: {out / 'bench.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
