"""python -m quarl: the QuaRL quantization study on standard RL tasks, from the command line.

    python -m quarl run configs/quarl/cpu.toml                  # every trial, local Ray (all CPUs)
    python -m quarl run configs/quarl/cpu.toml --dry-run        # the trials and their cost; nothing runs
    python -m quarl run configs/quarl/atari.toml --address auto     # on the Ray cluster this machine belongs to
    python -m quarl requantize out/quarl/cpu                    # rebuild and evaluate the static int8 files only

Exit 0 every trial done, 1 a trial failed (the others still ran; rerun the same command to retry it), 2 a bad
config, flag or path (one line), 130 interrupted (rerun the same command to resume).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from airq_cli import ArgumentParser, output_dir
from quarl import tune_runner
from quarl.atari_check import format_check, run_check
from quarl.config import load_config
from quarl.machine import machine_record
from quarl.mixed_precision import compare, summary, write_summary
from quarl.report import add_report_parser
from quarl.requantize import requantize_study

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
    q = sub.add_parser(
        "requantize",
        prog="python -m quarl requantize",
        help="rebuild a finished study's static int8 files from its kept fp32 policies and evaluate them",
        description="quarl/requantize.py: for every finished trial of STUDY, quantize its fp32.onnx again with its "
        "calibration observations and evaluate the files on its episodes; no training. The new results replace "
        "the old ones of the same name in the trial's records; `python -m quarl report STUDY` shows them.",
    )
    q.add_argument("study", metavar="STUDY", help="a `quarl run` output directory (holding study.json)")
    q.add_argument(
        "--targets",
        nargs="+",
        default=["int8", "int8-w7"],
        help="PTQ files to rebuild: int8 (8-bit weights), int8-w7 (7-bit weights), int8-dynamic, fp16",
    )
    q.add_argument("--workers", type=_positive, default=2, help="trials at once (processes, one thread each)")

    add_report_parser(sub).prog = "python -m quarl report"
    m = sub.add_parser(
        "mixed-precision",
        prog="python -m quarl mixed-precision",
        help="train with bf16 autocast against fp32 in one run: update time, training time, final return",
        description=(
            "SB3's gradient updates under torch.autocast (bf16) against fp32, same seeds, "
            "alternating order; acting stays fp32 (quarl/mixed_precision.py)."
        ),
    )
    m.add_argument("--env", default="CartPole-v1", help="a task with an RL Zoo entry (quarl.zoo)")
    m.add_argument("--algo", default="dqn", help="a2c, dqn, ppo, ddpg, td3 or sac")
    m.add_argument("--steps", type=_positive, default=50_000, help="training steps per run")
    m.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    m.add_argument("--dtype", default="bf16", help="the reduced precision (bf16)")
    m.add_argument("--device", default="cpu", help="cpu or cuda (a CUDA GPU with bf16)")
    m.add_argument("--episodes", type=_positive, default=100, help="evaluation episodes per trained policy")
    m.add_argument("--threads", type=_positive, default=1, help="torch CPU threads per run")
    m.add_argument("--out", type=output_dir, default="out/quarl/mixed_precision", help="where summary.json goes")
    a = sub.add_parser(
        "atari-check",
        prog="python -m quarl atari-check",
        help="the Atari pipeline at toy scale: train, export the CNN, static int8, op check, size, latency, agreement",
        description="quarl/atari_check.py: what a full Atari trial runs, in minutes, on real frames.",
    )
    a.add_argument("--env", default="PongNoFrameskip-v4", help="an ALE game, <Game>NoFrameskip-v4")
    a.add_argument("--algo", default="ppo", help="a2c, dqn or ppo")
    a.add_argument("--steps", type=_positive, default=2048, help="training steps (toy scale)")
    a.add_argument("--frames", type=_positive, default=400, help="real frames recorded: half calibrate, half held out")
    a.add_argument("--out", type=output_dir, default="out/quarl/atari_check")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "report":
        return int(args.func(args))
    if args.command == "mixed-precision":
        return _mixed_precision(args)
    if args.command == "requantize":
        results = requantize_study(args.study, tuple(args.targets), args.workers)
        failed = [r for r in results if r.status.startswith("failed")]
        done = sum(r.status == "done" for r in results)
        print(f"requantized {done} of {len(results)} trials ({', '.join(args.targets)}); {len(failed)} failed")
        return 1 if failed else 0
    if args.command == "atari-check":
        print(format_check(run_check(args.env, args.algo.lower(), args.steps, args.frames, Path(args.out))))
        print(f"wrote {Path(args.out) / 'atari_check.json'}")
        return 0
    config = load_config(args.config)
    out = Path(f"out/quarl/{config.name}" if args.out == DEFAULT_OUT else args.out)

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


def _mixed_precision(args: argparse.Namespace) -> int:
    runs = compare(
        args.env, args.algo.lower(), args.seeds, args.steps, args.dtype, args.device, args.episodes, args.threads
    )
    result = summary(runs) | {
        "env": args.env,
        "algo": args.algo.lower(),
        "device": args.device,
        "threads": args.threads,
    }

    result["machine"] = machine_record()
    path = write_summary(Path(args.out) / "summary.json", result)
    for row in result["per_seed"]:
        print(
            f"seed {row['seed']}: {row['dtype']} / fp32 update time {row['update_time_ratio']:.2f}x, training time "
            f"{row['train_time_ratio']:.2f}x; return fp32 {row['fp32_return']:.1f}, {row['dtype']} {row['reduced_return']:.1f}"
        )
    print(f"wrote {path}")
    return 0
