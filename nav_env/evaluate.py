"""Evaluate the baseline policies (scripted heuristic, random) on seeded episodes.

    python -m nav_env.evaluate --policy heuristic random --level default --episodes 1000 --seed 0 \
        [--num-envs 32] [--out out/baselines]

Episode ``j`` is ``reset(seed=seed + j)`` for every policy, so results pair up. Writes
``baselines_LEVEL.json`` (summary and per-episode rows) atomically and prints a table.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from airq_cli import ArgumentParser, UserError, output_dir, progress, run, shown, write_json
from nav_env.baselines import BASELINES
from nav_env.config import load_level
from nav_env.rollout import as_rows, run_episodes, summarize
from nav_env.stats import paired_difference


def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="python -m nav_env.evaluate", description=__doc__.split("\n")[0])
    p.add_argument("--policy", nargs="+", default=["heuristic", "random"], help=f"any of {sorted(BASELINES)}")
    p.add_argument("--level", default="default")
    p.add_argument("--episodes", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--num-envs", type=int, default=32)
    p.add_argument("--out", type=output_dir, default="out/baselines", help="folder for baselines_LEVEL.json")
    args = p.parse_args(argv)
    cfg = load_level(args.level)
    unknown = [name for name in args.policy if name not in BASELINES]
    if unknown:
        raise UserError(f"unknown baseline policy {unknown[0]!r} (known: {', '.join(sorted(BASELINES))})")
    if args.episodes < 1 or args.num_envs < 1:
        raise UserError("--episodes and --num-envs must be >= 1")

    report: dict = {"level": cfg.level, "episodes": args.episodes, "seed": args.seed, "policies": {}}
    outcomes = {}
    for name in args.policy:
        policy = BASELINES[name](cfg)
        t0 = time.perf_counter()
        results = list(
            # a bar on a terminal, a line per tenth of the episodes otherwise (a pipe, a log)
            progress(run_episodes(policy, cfg, args.episodes, args.seed, args.num_envs), args.episodes, name, unit="ep")
        )
        summary = summarize(results)
        summary["wall_s"] = time.perf_counter() - t0
        report["policies"][name] = {"summary": summary, "episodes": as_rows(results)}
        outcomes[name] = [r.success for r in sorted(results, key=lambda r: r.episode)]
    names = list(outcomes)
    if len(names) > 1:
        report["paired_vs_first"] = {n: paired_difference(outcomes[names[0]], outcomes[n]) for n in names[1:]}

    out = Path(args.out) / f"baselines_{cfg.level}.json"
    write_json(out, report)
    print(f"level {cfg.level}: {args.episodes} seeded episodes (seeds {args.seed}..{args.seed + args.episodes - 1})")
    print(
        f"{'policy':<12}{'success':>9}{'95% CI':>16}{'collision':>11}{'timeout':>9}{'return':>9}{'steps':>8}{'path/straight':>15}"
    )
    for name in names:
        s = report["policies"][name]["summary"]
        lo, hi = s["success_ci95"]
        eff = shown(s["path_efficiency"], ".2f")
        print(
            f"{name:<12}{s['success_rate']:>9.1%}{f'{lo:.1%}-{hi:.1%}':>16}{s['collision_rate']:>11.1%}{s['timeout_rate']:>9.1%}"
            f"{s['mean_return']:>9.2f}{s['mean_steps']:>8.1f}{eff:>15}"
        )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
