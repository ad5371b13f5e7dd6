"""Does a policy fit a Pi-sized RAM? The seed's swap effect, measured.

    python -m deployment_study.memfit --model out/memfit/policy3_airlearning_fp32.onnx \\
        --model out/memfit/policy3_airlearning_int8.onnx --memory-mb 900 --swap-mb 2048 --episodes 10 --out out/memfit/run

Flies each model's bridge unconstrained and in a memory cgroup at each ``--memory-mb``
(deployment_study.memfit_run: the experiment, what it records, what is emulated and what is not) and
writes OUT/memfit.json, OUT/memfit.md and OUT/memory_over_time.png, atomically (the markdown and the
figure: deployment_study.render_memfit).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from airq_cli import ArgumentParser, defaults_from, output_dir, run
from deployment_study.memfit_run import PI3B_MEMORY_MB, MemfitConfig, run_memory_fit
from deployment_study.render_memfit import write_report
from nav_env.config import ConfigError, parse_camera


def _camera(text: str) -> tuple[int, int]:
    try:
        return parse_camera(text)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = ArgumentParser(prog="python -m deployment_study.memfit", description=__doc__.split("\n")[0])
    p.add_argument("--model", action="append", required=True, metavar="FILE", help="ONNX policy; repeat to compare")
    p.add_argument(
        "--memory-mb",
        action="append",
        metavar="MB[:SWAP_MB]",
        help="RAM limit of a constrained run (default 900: a Pi 3b), optionally with its own swap (900:0 = none); "
        "repeat for several runs",
    )
    p.add_argument(
        "--swap-mb",
        type=int,
        help="swap a constrained bridge may use unless its --memory-mb says (0: none, so OOM at the limit)",
    )
    p.add_argument("--episodes", type=int)
    p.add_argument("--seed", type=int)
    p.add_argument("--level")
    p.add_argument("--camera", type=_camera, help="HEIGHTxWIDTH (default: each model's own, from its metadata)")
    p.add_argument("--cpu", type=int, help="core to pin the bridge to (-1: not pinned)")
    p.add_argument("--threads", type=int)
    p.add_argument("--rate-hz", type=float, help="pace the loop (late acts fly hover); default lockstep")
    p.add_argument("--max-steps", type=int, help="episode length cap (default: the level's)")
    p.add_argument("--load-timeout-s", type=float)
    p.add_argument(
        "--time-budget-s",
        type=float,
        help="per run: start no new episode after this long flying (a thrashing bridge takes seconds per act)",
    )
    p.add_argument("--no-baseline", action="store_true", help="skip the unconstrained runs")
    p.add_argument("--out", type=output_dir, help="folder for memfit.json, memfit.md and the figure")
    defaults_from(p, MemfitConfig, names={"out": "out_dir"})  # each default written once, in MemfitConfig
    a = p.parse_args(argv)
    result = run_memory_fit(
        a.model,
        a.memory_mb or [PI3B_MEMORY_MB],
        a.swap_mb,
        a.episodes,
        a.camera,
        a.seed,
        a.out,
        level=a.level,
        cpu=None if a.cpu == -1 else a.cpu,
        threads=a.threads,
        rate_hz=a.rate_hz,
        max_steps=a.max_steps,
        load_timeout_s=a.load_timeout_s,
        baseline=not a.no_baseline,
        time_budget_s=a.time_budget_s,
        command=shlex.join(["python", "-m", "deployment_study.memfit", *argv]),
    )
    write_report(result)
    out = Path(a.out)
    print((out / "memfit.md").read_text())
    print(f"results: {out / 'memfit.json'}, {out / 'memfit.md'}, {out / 'memory_over_time.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
