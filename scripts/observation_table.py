"""The table of the observation experiment from scripts/observation_experiment.sh's evaluations.

    python scripts/observation_table.py [--dir out/observation] [--runs runs/obs]

Per level and training seed: Policy I with the 8-value state (v1) and with the attitude and body rates appended, each
its run's best checkpoint, on the same 1,000 seeded episodes on the nominal Iris and on the held-out X500; the
attitude arm's paired difference against v1 (Newcombe's interval over the same episodes, nav_env.stats), pooled over
the training seeds where there are several; then each run's training (env steps of the checkpoint, best periodic
evaluation, wall time). Prints markdown.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from nav_env.stats import paired_difference, wilson_interval

ARMS = ("v1", "attitude")
LEVELS = ("default", "hard")
AIRFRAMES = {"nominal": "Iris (nominal)", "x500": "X500 (held out)"}


def successes(report: dict) -> list[bool]:
    (entry,) = report["policies"].values()  # one policy per evaluation: the arms take different observations
    return [e["outcome"] == "success" for e in entry["episodes"]]


def rate(ok: list[bool]) -> str:
    low, high = wilson_interval(sum(ok), len(ok))
    return f"{sum(ok) / len(ok):.1%} ({low:.1%}-{high:.1%})"


def diff(d: dict) -> str:
    return f"{d['diff'] * 100:+.1f} ({d['low'] * 100:+.1f}..{d['high'] * 100:+.1f})"


def training(run: Path) -> str:
    metrics = json.loads((run / "metrics.json").read_text())
    best = metrics.get("best")  # the periodic evaluation whose checkpoint is best_model.zip
    text = f"{best['timesteps'] / 1e6:.2f} M, best {best['success_rate']:.1%}" if best else "-"
    return text + (f", {metrics['train_wall_s'] / 60:.1f} min" if metrics.get("train_wall_s") else "")


def rows(folder: Path, runs: Path) -> list[str]:
    out = [
        "| level | airframe | training seed | 8 state values (v1) | + attitude and body rates | attitude - v1 (95% CI) |",
        "|---|---|---|---|---|---|",
    ]
    for level in LEVELS:
        for airframe in ("nominal", "x500"):
            pooled: list[tuple[list[bool], list[bool]]] = []
            for seed in sorted(
                {p.name.split("_s")[1].split("_")[0] for p in folder.glob(f"{level}_v1_s*_{airframe}.json")}
            ):
                paths = [folder / f"{level}_{arm}_s{seed}_{airframe}.json" for arm in ARMS]
                if not all(p.is_file() for p in paths):
                    continue
                v1, attitude = (successes(json.loads(p.read_text())) for p in paths)
                if len(v1) != len(attitude):
                    raise SystemExit(f"{paths[0]} and {paths[1]} hold different numbers of episodes")
                pooled.append((v1, attitude))
                out.append(
                    f"| {level} | {AIRFRAMES[airframe]} | {seed} | {rate(v1)} | {rate(attitude)} | "
                    f"{diff(paired_difference(v1, attitude))} |"
                )
            if len(pooled) > 1:  # every seed's episodes, paired within the seed
                v1 = [x for a, _ in pooled for x in a]
                attitude = [x for _, b in pooled for x in b]
                out.append(
                    f"| {level} | {AIRFRAMES[airframe]} | all {len(pooled)} | {rate(v1)} | {rate(attitude)} | "
                    f"{diff(paired_difference(v1, attitude))} |"
                )
    if len(out) == 2:
        raise SystemExit(f"no evaluations in {folder} (run scripts/observation_experiment.sh)")
    out += ["", "| run | checkpoint (env steps), best periodic evaluation, wall time |", "|---|---|"]
    for run in sorted(runs.glob("*_s*")):
        if (run / "metrics.json").is_file():
            out.append(f"| {run.name} | {training(run)} |")
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", default="out/observation", help="folder of the evaluations")
    p.add_argument("--runs", default="runs/obs", help="folder of the training runs")
    args = p.parse_args()
    print("\n".join(rows(Path(args.dir), Path(args.runs))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
