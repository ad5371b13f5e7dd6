"""Command line of the quantize package (one sub-command per task; errors are one line, exit 2)."""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import os

# The CPU is shared (2 cores, training runs alongside): keep numpy/torch BLAS to one thread.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from airq_cli import ArgumentParser, output_dir, output_file, write_atomic  # noqa: E402
from nav_env.backends import DEFAULT_BACKEND, backend_names  # noqa: E402
from nav_env.config import load_level, with_policy_observation  # noqa: E402
from quantize.affine import check_bits  # noqa: E402
from quantize.analyze import run_analyze  # noqa: E402
from quantize.errors import QuantizeError  # noqa: E402
from quantize.options import INT8_SCHEMES, StaticInt8Options  # noqa: E402


def _bits(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise QuantizeError(f"bits must be an integer from 2 to 16, got {text!r}") from None
    return check_bits(value)


def _method(text: str) -> str:
    # deferred: torch (via quantize.sweep): seconds to import
    from quantize.sweep import check_method

    return check_method(text)


# Defaults written once, in quantize.options (a module without onnx: parsing stays instant).
STATIC = StaticInt8Options()


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="python -m quantize", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    q = sub.add_parser("ptq", help="post-training quantization of a policy ONNX file")
    q.add_argument("model")
    q.add_argument("--to", required=True, choices=("int8", "int8-dynamic", "fp16"))
    q.add_argument("-o", "--output", required=True, type=output_file)
    q.add_argument("--calibration-episodes", type=int, default=100)
    q.add_argument("--seed", type=int, default=None, help="first calibration episode seed (default 2000000)")
    q.add_argument(
        "--level",
        nargs="+",
        default=None,
        help="env level(s) for calibration and held-out agreement, pooled (default: the model's airq.level)",
    )
    q.add_argument(
        "--dynamics",
        default=None,
        help="vehicle dynamics TOML that calibration and held-out rollouts fly (default: the model's airq.dynamics, "
        "the physics it trained on; 'nominal': the backend's own vehicle)",
    )
    q.add_argument("--heldout-episodes", type=int, default=20, help="held-out rollouts for action agreement (0: skip)")
    q.add_argument("--format", dest="quant_format", choices=("qoperator", "qdq"), default=STATIC.quant_format)
    q.add_argument(
        "--per-channel",
        action=argparse.BooleanOptionalAction,
        default=STATIC.per_channel,
        help="int8: one weight scale per output channel (default; --no-per-channel: one per tensor)",
    )
    q.add_argument(
        "--scheme",
        choices=tuple(INT8_SCHEMES),
        default=STATIC.scheme,
        help="int8 activation x weight types; u8s7 (weights in [-64, 64]) and s8s8 (8-bit weights, no fast x86 "
        "kernel) are exact on every CPU, u8s8 saturates on x86 without VNNI (docs/quantize.md)",
    )
    q.add_argument("--quantize-logits", action="store_true", help="also quantize the last layer (not advised)")
    q.add_argument("--calibrate-method", choices=("minmax", "percentile"), default=STATIC.calibrate_method)
    q.add_argument(
        "--no-split-input",
        action="store_true",
        help="one scale for the whole first layer (depth and state columns together)",
    )
    q.add_argument(
        "--float-split-sum",
        action=argparse.BooleanOptionalAction,
        default=STATIC.float_split_sum,
        help="the split first-layer QGemms output float into their Add (no second uint8 rounding); "
        "default: on where it applies (input split, QOperator)",
    )
    q.add_argument(
        "--distill-steps",
        type=int,
        default=0,
        help="int8: train the integer codes toward the fp32 logits for N Adam steps per round (0: off)",
    )
    q.add_argument("--distill-episodes", type=int, default=1000, help="fp32 episodes per level for distillation data")
    q.add_argument("--distill-rounds", type=int, default=1, help="1 + DAgger rounds with int8 rollouts added")
    q.add_argument("--distill-dagger-episodes", type=int, default=100, help="int8 episodes per DAgger round and level")
    q.add_argument("--distill-lr", type=float, default=0.005, help="Adam learning rate in weight-code units")
    q.add_argument(
        "--distill-margin",
        type=float,
        default=0.0,
        help="also a hinge asking the fp32 action to lead by min(this, fp32 top-2 gap) (0: logit MSE only)",
    )
    q.add_argument("--distill-seed", type=int, default=0, help="torch seed for minibatches")

    i = sub.add_parser("inspect", help="print a model's interface, ops and quantization metadata")
    i.add_argument("model")
    i.add_argument("--json", action="store_true")

    b = sub.add_parser("bench", help="batch-1 latency, one thread, models interleaved")
    b.add_argument("models", nargs="+")
    b.add_argument("--calls", type=int, default=2000)
    b.add_argument("--cold", action="store_true", help="evict caches before each call (as on a Pi)")
    b.add_argument("--json", default=None, type=output_file, help="also write the rows to this JSON file")

    c = sub.add_parser("card", help="write a markdown model card for a quantized artifact")
    c.add_argument("model")
    c.add_argument("--eval", nargs="*", default=[], help="policies.evaluate JSON reports that include the model")
    c.add_argument("--bench", default=None, help="a quantize bench --json file")
    c.add_argument("--made-with", default=None, help="the command that made the model, for the card")
    c.add_argument("-o", "--output", required=True, type=output_file)

    a = sub.add_parser("analyze", help="per-layer weight histograms with the n-bit grid, SQNR per layer")
    a.add_argument("model", help="a policy ONNX file or a policies.train run directory")
    a.add_argument("--bits", type=_bits, nargs="+", default=[8, 6, 4, 2])
    a.add_argument(
        "--out", default=None, type=output_dir, help="output folder for the plot and table (default out/analyze/NAME)"
    )

    t = sub.add_parser("qat", help="quantization-aware training (seed's Algorithm 2) of a run's actor")
    t.add_argument("run_dir")
    t.add_argument("--bits", type=_bits, required=True)
    t.add_argument("--delay", type=int, default=50_000, help="env steps of range monitoring before freezing")
    t.add_argument("--steps", type=int, default=300_000, help="env steps of QAT fine-tuning")
    t.add_argument("--out", default=None, type=output_dir, help="output folder (default RUN_DIR/qat_{bits}bit)")
    t.add_argument("--episodes", type=int, default=200, help="evaluation episodes after training")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--learning-rate", type=float, default=1e-4)
    t.add_argument("--threads", type=int, default=2)
    t.add_argument(
        "--rounding",
        choices=("nearest", "floor"),
        default="nearest",
        help="weight rounding: nearest (default, the seed's code) or floor (the paper's formula as printed)",
    )
    t.add_argument(
        "--bias-correction",
        action="store_true",
        help="at the end of the delay add (W - W_hat) E[x] to each bias (cancels the floor's shift)",
    )

    s = sub.add_parser("sweep", help="success rate per bit width x method (the seed's Figure 1)")
    s.add_argument("run_dir")
    s.add_argument("--bits", type=_bits, nargs="+", default=[8, 7, 6, 5, 4, 3, 2])
    s.add_argument(
        "--methods",
        nargs="+",
        type=_method,
        default=["ptq", "qat"],
        metavar="METHOD",
        help="plain names round weights to nearest; -floor the seed's formula: ptq ptq-floor ptq-weights "
        "ptq-weights-floor ptq-floor-bc qat qat-floor qat-floor-bc (default: ptq qat)",
    )
    s.add_argument("--episodes", type=int, default=200)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--level", default=None)
    s.add_argument("--qat-steps", type=int, default=300_000)
    s.add_argument("--qat-delay", type=int, default=50_000)
    s.add_argument("--out", default=None, type=output_dir, help="output folder (default RUN_DIR/sweep)")

    o = sub.add_parser(
        "observations",
        help="what a policy sees in seeded flights, as .npy: the fixed input of python -m firmware_bridge.outputs",
    )
    o.add_argument("model", help="the policy that flies (its observations, its action distribution)")
    o.add_argument("--level", default="default")
    o.add_argument("--episodes", type=int, default=30)
    o.add_argument("--seed", type=int, default=None, help="first episode seed (default: the held-out 3000000)")
    o.add_argument("--rows", type=int, default=2000, help="at most this many observations (a seeded subset)")
    o.add_argument(
        "--backend", choices=backend_names(in_process=True), default=DEFAULT_BACKEND, help="the simulator it flies"
    )
    o.add_argument("-o", "--output", required=True, type=output_file)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "ptq":
        # deferred: onnx (via quantize.ptq): ~0.2 s to import, paid only where used
        from quantize.ptq import quantize_file

        opts = StaticInt8Options(
            quant_format=args.quant_format,
            per_channel=args.per_channel,
            keep_last_layer_fp32=not args.quantize_logits,
            calibrate_method=args.calibrate_method,
            split_input=not args.no_split_input,
            float_split_sum=args.float_split_sum,
            scheme=args.scheme,
        )
        distill = None
        if args.distill_steps > 0:
            # deferred: torch, onnx (via quantize.distill): seconds to import
            from quantize.distill import DistillOptions

            distill = DistillOptions(
                steps=args.distill_steps,
                rounds=args.distill_rounds,
                dagger_episodes=args.distill_dagger_episodes,
                lr=args.distill_lr,
                margin=args.distill_margin,
                seed=args.distill_seed,
            )
        elif args.distill_steps < 0:
            raise QuantizeError(f"--distill-steps must be >= 0, got {args.distill_steps}")
        report = quantize_file(
            args.model,
            args.to,
            args.output,
            calibration_episodes=args.calibration_episodes,
            seed=args.seed,
            levels=args.level,
            heldout_episodes=args.heldout_episodes,
            options=opts,
            distill=distill,
            distill_episodes=args.distill_episodes,
            dynamics=args.dynamics,
        )
        print(report.line())
    elif args.command == "inspect":
        # deferred: onnx (via quantize.inspect_model): ~0.2 s to import, paid only where used
        from quantize.inspect_model import describe, format_text

        info = describe(args.model)
        print(json.dumps(info, indent=1) if args.json else format_text(info))
    elif args.command == "bench":
        # deferred: onnx, onnxruntime (via quantize.bench): ~0.2 s to import, paid only where used
        from quantize.bench import bench, format_table

        rows = bench(args.models, calls=args.calls, cold=args.cold)
        print(format_table(rows, args.cold))
        if args.json:
            write_atomic(
                args.json, json.dumps([dataclasses.asdict(r) | {"path": str(r.path)} for r in rows], indent=1).encode()
            )
    elif args.command == "card":
        # deferred: onnx (via quantize.card): ~0.2 s to import, paid only where used
        from quantize.card import write_card

        print(write_card(args.model, args.eval, args.bench, args.made_with, args.output))
    elif args.command == "analyze":
        run_analyze(args.model, args.bits, args.out)
    elif args.command == "qat":
        # deferred: torch (via quantize.qat): seconds to import
        from quantize.qat import run_qat_cli

        run_qat_cli(args)
    elif args.command == "sweep":
        # deferred: torch (via quantize.sweep): seconds to import
        from quantize.sweep import run_sweep

        run_sweep(args)
    elif args.command == "observations":
        # deferred: onnxruntime (via quantize.calibration, quantize.runtime): ~0.2 s to import, paid only where used
        from quantize.calibration import HELDOUT_SEED, collect_observations
        from quantize.runtime import policy_fn, session

        if args.episodes < 1 or args.rows < 1:
            raise QuantizeError(f"--episodes and --rows must be >= 1, got {args.episodes} and {args.rows}")
        seed = HELDOUT_SEED if args.seed is None else args.seed
        sess = session(args.model)
        # the level as the model sees it: its camera, the attitude values if it takes them
        cfg = with_policy_observation(load_level(args.level), dict(sess.get_modelmeta().custom_metadata_map))
        obs = collect_observations(policy_fn(sess), cfg, args.episodes, seed, args.rows, backend=args.backend)
        buffer = io.BytesIO()
        np.save(buffer, obs)
        write_atomic(args.output, buffer.getvalue())
        print(f"{len(obs)} observations of {args.level}, episodes {seed}..{seed + args.episodes - 1}: {args.output}")
    return 0
