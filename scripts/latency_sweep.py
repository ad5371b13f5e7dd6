"""Success and flight time against a fixed action delay, fp32 vs int8, in the closed loop (docs/latency.md).

    python scripts/latency_sweep.py [--policy models/policy1_fp32.onnx --policy models/policy1_int8.onnx]
        [--delays-ms 0 50 100 200 300] [--episodes 100] [--level default] [--out out/latency_sweep]

Each delay is one `hil.run --timing latency --latency fixed:MS` run (0: lockstep) of every policy over the same
seeded episodes, with the bridge as a local process; it prints the machine, the versions and one row per policy
and delay. Fixed delays make the flights independent of this machine's speed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from firmware_bridge.device import cpu_model, format_versions, package_versions
from firmware_bridge.int8_kernels import int8_kernels
from hil.run import RunArgs, run


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--policy", action="append")
    p.add_argument("--delays-ms", type=float, nargs="+", default=[0, 50, 100, 200, 300])
    p.add_argument("--episodes", type=int, default=100)
    p.add_argument("--level", default="default")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="out/latency_sweep")
    a = p.parse_args()
    policies = a.policy or ["models/policy1_fp32.onnx", "models/policy1_int8.onnx"]
    print(f"{cpu_model()}: {int8_kernels().describe()}\n{format_versions(package_versions())}")
    print(f"level {a.level}, {a.episodes} episodes from seed {a.seed}, control period 0.1 s (the level's)")
    print(
        f"{'delay ms':>8}  {'policy':<22}{'success':>8}{'collision':>10}{'time to goal s':>15}{'path m':>8}  paired vs first"
    )
    for ms in a.delays_ms:
        args = RunArgs(
            policy=policies,
            sim_only=True,
            episodes=a.episodes,
            level=a.level,
            seed=a.seed,
            quiet=True,
            out=str(Path(a.out) / f"{ms:g}ms"),
        )
        if ms > 0:
            args.timing, args.latency = "latency", f"fixed:{ms:g}"
        report = run(args, command=args.command_line()).report
        paired = {c["policy"]: c["success_difference"] for c in report["comparisons"]}
        for r in report["runs"]:
            o, d = r["outcomes"], paired.get(r["policy"])
            pair = f"{d['diff'] * 100:+.1f} pts ({d['low'] * 100:+.1f}..{d['high'] * 100:+.1f})" if d else ""
            t = o["mean_time_to_goal_s"]
            print(
                f"{ms:>8g}  {Path(r['policy']).name:<22}{o['success_rate']:>8.0%}{o['collision_rate']:>10.0%}"
                f"{t if t is not None else float('nan'):>15.2f}{o['mean_path_length_m'] or float('nan'):>8.1f}  {pair}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
