"""python -m quarl: the QuaRL quantization study on standard RL tasks (issue 18), from the command line.

    python -m quarl run configs/quarl/classic.toml                  # every trial, local Ray (all CPUs)
    python -m quarl run configs/quarl/classic.toml --dry-run        # the trials and their cost; nothing runs
    python -m quarl run configs/quarl/atari.toml --address auto     # on the Ray cluster this machine belongs to

Exit 0 every trial done, 1 a trial failed (the others still ran; rerun the same command to retry it), 2 a bad
config, flag or path (one line), 130 interrupted (rerun the same command to resume).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from airq_cli import ArgumentParser, output_dir
from quarl.config import load_config

DEFAULT_OUT = "out/quarl/<config name>"


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def parser() -> ArgumentParser:
    p = ArgumentParser(prog="python -m quarl", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    r = sub.add_parser(
        "run",
        prog="python -m quarl run",
        help="train, quantize and evaluate every trial of a study config with Ray Tune",
        description="Every (cell, seed) of CONFIG is one Ray Tune trial running quarl.pipeline.run_trial into "
        "OUT/trials/<name>/ (its log: log.txt there). Rerunning the same command with the same --out resumes: "
        "finished trials are kept, failed and unfinished ones run again (each from its last finished stage). "
        "The record: OUT/study.json.",
    )
    r.add_argument("config", metavar="CONFIG", help="the study's TOML (see quarl/config.py)")
    r.add_argument("--out", type=output_dir, default=DEFAULT_OUT, help="the study's directory")
    r.add_argument(
        "--address",
        help="HOST:PORT of a Ray head (ray start --head) or auto, to run on that cluster; default: a local Ray "
        "with all of this machine's CPUs. Every node needs airq[study] installed, and --out must be on storage "
        "all nodes share.",
    )
    r.add_argument(
        "--max-concurrent",
        type=_positive,
        metavar="N",
        help="trials at once (default: the cluster's CPUs; each trial takes 'threads' CPUs)",
    )
    r.add_argument(
        "--fresh",
        action="store_true",
        help="insist on a new study: refuse (exit 2) if --out already holds one (study.json, tune/ or trials/). "
        "Nothing is ever deleted; without --fresh the same --out resumes its study",
    )
    r.add_argument(
        "--dry-run",
        action="store_true",
        help="check the config, --out and the cluster (joined, not used, with --address) and print the trials "
        "and their estimated cost; no trial runs and no local Ray starts",
    )
    r.add_argument("--no-progress", dest="progress", action="store_false", help="no per-trial lines on stderr")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    config = load_config(args.config)
    out = Path(f"out/quarl/{config.name}" if args.out == DEFAULT_OUT else args.out)
    from quarl import tune_runner

    if args.dry_run:
        plan = tune_runner.plan_study(
            config, out, address=args.address, max_concurrent=args.max_concurrent, fresh=args.fresh
        )
        for line in plan.warnings:
            print(f"warning: {line}", file=sys.stderr)
        print("\n".join(plan.lines()))
        return 0
    study = tune_runner.run_study(
        config,
        out,
        address=args.address,
        max_concurrent=args.max_concurrent,
        fresh=args.fresh,
        progress=args.progress,
        config_file=args.config,
    )
    print("\n".join(study.summary_lines()))
    counts = study.record["counts"]
    if counts["failed"]:
        print(f"error: {counts['failed']} of {counts['trials']} trials failed (see above)", file=sys.stderr)
    elif counts["unfinished"]:
        print(f"interrupted: {counts['unfinished']} trials unfinished", file=sys.stderr)
    return study.exit_code
