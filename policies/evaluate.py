"""Evaluate policies (run directories or ONNX files of any precision) on the same seeded episodes.

    python -m policies.evaluate POLICY [POLICY ...] --episodes 200 --level default --seed 0
        [--num-envs 32] [--checkpoint best] [--out out/eval] [--name NAME] [--backend mujoco [--dynamics TOML]]

POLICY may also be ``baseline:heuristic`` or ``baseline:random`` (nav_env's scripted baselines).
Episode j is ``reset(seed=seed + j)`` for every policy, so results pair up (each policy sees the episode through the
observation it was trained on, recorded in its metadata: its camera, the attitude values or not): for two or more
policies the success-rate difference of each against the first comes with a paired interval and McNemar's exact p
(nav_env.stats.paired_difference). Actions are deterministic (argmax). Writes NAME.json
(summaries, paired differences, per-episode rows), NAME.csv (one row per policy),
NAME_episodes.csv and NAME.png, all atomically, and prints a table.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import csv
import io
import sys
import time
from pathlib import Path
from typing import Any

from airq_cli import ArgumentParser, output_dir, run, shown, write_atomic, write_json
from nav_env.backends import DEFAULT_BACKEND, backend_names, dynamics_for
from nav_env.config import ConfigError, load_level, with_policy_observation
from nav_env.latency import LatencySource, offline_latency
from nav_env.render import figure_png
from nav_env.rollout import as_rows, flat_row, run_episodes, summarize
from nav_env.stats import paired_difference
from policies.config import RUN_CHECKPOINTS
from policies.errors import UserError
from policies.loading import LoadedPolicy, check_obs_dim, load_policy

SUMMARY_COLUMNS = (
    "policy",
    "source",
    "precision",
    "episodes",
    "success_rate",
    "success_ci_low",
    "success_ci_high",
    "collision_rate",
    "timeout_rate",
    "mean_return",
    "mean_steps",
    "path_efficiency",
    "wall_s",
)


def unique_names(policies: list[LoadedPolicy]) -> None:
    seen: dict[str, int] = {}
    for p in policies:
        if p.name in seen:
            seen[p.name] += 1
            p.name = f"{p.name}#{seen[p.name]}"
        else:
            seen[p.name] = 1


def evaluate(
    policies: list[LoadedPolicy],
    cfg,
    episodes: int,
    seed: int,
    num_envs: int,
    latency: LatencySource | None = None,
    backend: str = "embedded",
    dynamics: Any = None,
) -> dict:
    report: dict = {"level": cfg.level, "episodes": episodes, "seed": seed, "deterministic": True, "policies": {}}
    report["backend"] = backend
    report["dynamics"] = None if dynamics is None else dynamics.source  # None: the backend's default
    report["latency"] = latency.describe() if latency is not None else None  # None: lockstep
    outcomes: dict[str, list[bool]] = {}
    for p in policies:
        t0 = time.perf_counter()
        seen = with_policy_observation(cfg, p.metadata)  # each policy sees what it was trained on, in the same world
        results = sorted(
            run_episodes(p.act, seen, episodes, seed, num_envs, latency, backend, dynamics), key=lambda r: r.episode
        )
        summary = summarize(results) | {"wall_s": round(time.perf_counter() - t0, 2)}
        report["policies"][p.name] = {
            "source": p.source,
            "kind": p.kind,
            "obs_dim": seen.obs_dim,
            "attitude": seen.observation.attitude,
            "metadata": _short_meta(p.metadata),
            "summary": summary,
            "episodes": as_rows(results),
        }
        outcomes[p.name] = [r.success for r in results]
    names = [p.name for p in policies]
    if len(names) > 1:
        report["paired_vs_first"] = {
            n: {"first": names[0], "second": n, **paired_difference(outcomes[names[0]], outcomes[n])} for n in names[1:]
        }
    return report


def _short_meta(meta: dict[str, str]) -> dict[str, str]:
    # the action table and env config are long and identical across policies: keep them out of reports
    return {
        k: v for k, v in meta.items() if k not in ("airq.action_table", "airq.env_config", "airq.observation_layout")
    }


def summary_rows(report: dict) -> list[dict]:
    rows = []
    for name, entry in report["policies"].items():
        s = entry["summary"]
        rows.append(
            {
                "policy": name,
                "source": entry["source"],
                "precision": entry["metadata"].get("airq.precision", ""),
                "episodes": s["episodes"],
                "success_rate": s["success_rate"],
                "success_ci_low": s["success_ci95"][0],
                "success_ci_high": s["success_ci95"][1],
                "collision_rate": s["collision_rate"],
                "timeout_rate": s["timeout_rate"],
                "mean_return": s["mean_return"],
                "mean_steps": s["mean_steps"],
                "path_efficiency": s["path_efficiency"],
                "wall_s": s["wall_s"],
            }
        )
    return rows


def to_csv(rows: list[dict], columns) -> bytes:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue().encode()


def plot(report: dict) -> bytes:
    # deferred: matplotlib: plots only
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(report["policies"])
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(max(6.0, 2.2 * len(names) + 3), 3.9))
    x = range(len(names))
    sums = [report["policies"][n]["summary"] for n in names]
    rates = [s["success_rate"] * 100 for s in sums]
    # max(0, .): the Wilson bound at 0% or 100% can sit a rounding error past the estimate
    err = [
        [max(0.0, s["success_rate"] - s["success_ci95"][0]) * 100 for s in sums],
        [max(0.0, s["success_ci95"][1] - s["success_rate"]) * 100 for s in sums],
    ]
    ax1.bar(x, rates, yerr=err, capsize=4, color="tab:green")
    ax1.set_xticks(list(x), names, rotation=20, ha="right", fontsize=8)
    ax1.set_ylabel("success rate (%) with Wilson 95% CI")
    ax1.set_ylim(0, 100)
    bottom = [0.0] * len(names)
    for key, color in (("success_rate", "tab:green"), ("collision_rate", "tab:red"), ("timeout_rate", "tab:gray")):
        vals = [s[key] * 100 for s in sums]
        ax2.bar(x, vals, bottom=bottom, color=color, label=key.replace("_rate", ""))
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax2.set_xticks(list(x), names, rotation=20, ha="right", fontsize=8)
    ax2.set_ylabel("outcome (%)")
    ax2.legend(fontsize=8, loc="lower right")
    flown = [f"{report.get('backend') or DEFAULT_BACKEND} simulator"]  # what the episodes flew, beside the level
    if report.get("dynamics"):
        flown.append(report["dynamics"])
    if report.get("latency"):
        flown.append(f"latency {report['latency']['source']}")
    # two lines: a one-policy figure is narrow
    fig.suptitle(
        f"level {report['level']}: {report['episodes']} seeded episodes from seed {report['seed']}\n{', '.join(flown)}",
        fontsize=10,
    )
    fig.tight_layout()
    return figure_png(fig)


def print_table(report: dict) -> None:
    print(
        f"level {report['level']}: {report['episodes']} seeded episodes (seeds {report['seed']}.."
        f"{report['seed'] + report['episodes'] - 1}), deterministic actions"
    )
    print(
        f"{'policy':<26}{'success':>9}{'95% CI':>16}{'collision':>11}{'timeout':>9}{'return':>9}{'steps':>8}{'path/straight':>15}"
    )
    for name, entry in report["policies"].items():
        s = entry["summary"]
        lo, hi = s["success_ci95"]
        eff = shown(s["path_efficiency"], ".2f")
        print(
            f"{name[:25]:<26}{s['success_rate']:>9.1%}{f'{lo:.1%}-{hi:.1%}':>16}{s['collision_rate']:>11.1%}"
            f"{s['timeout_rate']:>9.1%}{s['mean_return']:>9.2f}{s['mean_steps']:>8.1f}{eff:>15}"
        )
    for name, d in report.get("paired_vs_first", {}).items():
        print(
            f"paired {name} - {d['first']}: {d['diff']:+.1%} (95% CI {d['low']:+.1%} to {d['high']:+.1%}), "
            f"solved only by {d['first']} {d['only_first']}, only by {name} {d['only_second']}, "
            f"McNemar p={d['mcnemar_p']:.3g}"
        )


def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="python -m policies.evaluate", description=__doc__.split("\n")[0])
    p.add_argument(
        "policy", nargs="+", help="run directory, ONNX file (any precision), or baseline:heuristic / baseline:random"
    )
    p.add_argument("--episodes", type=int, default=200)
    p.add_argument("--level", default="default")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--num-envs", type=int, default=32)
    p.add_argument(
        "--backend",
        choices=backend_names(in_process=True),
        default=DEFAULT_BACKEND,
        help="the simulator (nav_env.backends)",
    )
    p.add_argument(
        "--dynamics",
        metavar="TOML",
        help="the vehicle's dynamics file, for a backend that has one (default nav_env/dynamics/iris.toml; docs/dynamics.md)",
    )
    p.add_argument("--checkpoint", choices=RUN_CHECKPOINTS, default="best", help="which checkpoint of a run directory")
    p.add_argument("--out", type=output_dir, default="out/eval", help="output folder")
    p.add_argument("--name", help="output file stem (default eval_LEVEL_sSEED_nEPISODES)")
    p.add_argument(
        "--latency",
        metavar="SOURCE",
        help="fly with latency: every action lands a delay from fixed:MS or replay:REPORT.json (docs/latency.md)",
    )
    args = p.parse_args(argv)
    latency = offline_latency(args.latency) if args.latency else None
    try:
        dynamics = dynamics_for(args.backend, args.dynamics)
    except ConfigError as e:
        raise UserError(str(e)) from None
    if args.episodes < 1 or args.num_envs < 1:
        raise UserError("--episodes and --num-envs must be >= 1")
    # deferred: torch (seconds to import), after the argument checks: a wrong flag answers at once
    import torch

    torch.set_num_threads(1)
    cfg = load_level(args.level)
    policies = [load_policy(spec, args.checkpoint, cfg) for spec in args.policy]
    for pol in policies:
        check_obs_dim(pol, with_policy_observation(cfg, pol.metadata).obs_dim, cfg.level)
    unique_names(policies)

    report = evaluate(policies, cfg, args.episodes, args.seed, args.num_envs, latency, args.backend, dynamics)
    stem = args.name or f"eval_{cfg.level}_s{args.seed}_n{args.episodes}"
    out = Path(args.out)
    rows = summary_rows(report)
    episode_rows = [{"policy": n, **flat_row(r)} for n, e in report["policies"].items() for r in e["episodes"]]
    write_json(out / f"{stem}.json", report)
    write_atomic(out / f"{stem}.csv", to_csv(rows, SUMMARY_COLUMNS))
    write_atomic(out / f"{stem}_episodes.csv", to_csv(episode_rows, list(episode_rows[0])))
    write_atomic(out / f"{stem}.png", plot(report))
    print_table(report)
    print(f"wrote {out / stem}.json, .csv, _episodes.csv, .png")
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
