"""Export a trained policy's actor to ONNX for the device bridge and quantize.

    python -m policies.export runs/NAME -o models/policy1_fp32.onnx [--checkpoint best|final|latest]
        [--eval-episodes 200]

Graph: input ``obs`` float32 [batch, obs_dim] (batch dynamic); outputs ``action`` int64 [batch]
(argmax) and ``logits`` float32 [batch, 25]. The ``airq.*`` metadata_props describe the observation,
action table, env, preset, algorithm, training steps, seed and the success rate measured on the
exported file itself (onnxruntime, held-out seeds from 1_000_000, never the reported seeds 0..).
"""

from __future__ import annotations

import io
import json
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from airq_cli import ArgumentParser, output_file, run, write_atomic
from nav_env import env_id as level_env_id
from nav_env.actions import N_DISCRETE_ACTIONS, action_table_rows
from nav_env.config import ATTITUDE_SCALE_RAD, BODY_RATE_SCALE_RAD_S, load_level
from nav_env.rollout import run_episodes, summarize
from policies.config import EVAL_SEED_BASE, RUN_CHECKPOINTS
from policies.errors import UserError
from policies.loading import load_onnx

if TYPE_CHECKING:  # torch loads in functions: a wrong flag is reported before seconds of imports
    from policies.actor import DiscreteActor

OPSET = 17
MAX_IR_VERSION = 10  # onnxruntime <= 1.31 rejects newer IRs (the locked 1.32.0 takes them): older runtimes load it too


def observation_layout(cfg) -> str:
    w, h = cfg.camera.width, cfg.camera.height
    layout = (
        f"float32[{cfg.obs_dim}]: [0:{w * h}] depth {h}x{w} row-major from top-left, /max_range {cfg.camera.max_range} "
        f"m, in [0,1]; [{w * h}:{w * h + 8}] goal distance/arena diagonal, sin, cos of goal bearing (ccw from nose), "
        f"forward, left, up velocity/max_speed, yaw rate/max_yaw_rate, altitude/ceiling"
    )
    if cfg.observation.attitude:
        layout += (
            f"; [{w * h + 8}:{cfg.obs_dim}] roll, pitch/{ATTITUDE_SCALE_RAD:.4f} rad, body rates p, q, r/"
            f"{BODY_RATE_SCALE_RAD_S} rad/s"
        )
    return layout


def actor_to_onnx_bytes(actor: DiscreteActor) -> bytes:
    """Legacy (TorchScript) exporter: a plain Gemm/Relu/ArgMax graph that onnxruntime's quantizer handles."""
    # deferred: onnx, torch: ~0.2 s to import, paid only where used
    import onnx
    import torch

    buf = io.BytesIO()
    dummy = torch.zeros(2, actor.obs_dim, dtype=torch.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            actor,
            (dummy,),
            # torch annotates f as a path; its TorchScript exporter (dynamo=False) writes to a BytesIO as well
            buf,  # type: ignore[arg-type]
            input_names=["obs"],
            output_names=["action", "logits"],
            dynamic_axes={"obs": {0: "batch"}, "action": {0: "batch"}, "logits": {0: "batch"}},
            opset_version=OPSET,
            dynamo=False,
        )
    model = onnx.load_from_string(buf.getvalue())
    # quantize_dynamic fails with ShapeInferenceError on the exporter's value_info; it is only a cache
    del model.graph.value_info[:]
    model.ir_version = min(model.ir_version, MAX_IR_VERSION)
    return model.SerializeToString()


def with_metadata(onnx_bytes: bytes, meta: dict[str, str]) -> bytes:
    # deferred: onnx: ~0.2 s to import, paid only where used
    import onnx

    model = onnx.load_from_string(onnx_bytes)
    del model.metadata_props[:]
    for key, value in meta.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, str(value)
    onnx.checker.check_model(model, full_check=True)
    return model.SerializeToString()


def export_run(run_dir: str | Path, out: str | Path, checkpoint: str = "best", eval_episodes: int = 200) -> dict:
    """Write the run's actor as ONNX with metadata; returns the metadata written."""
    # deferred: torch (via policies.actor): seconds to import
    from policies.actor import actor_from_model, load_run

    cfg, model, ckpt = load_run(run_dir, checkpoint)
    env_cfg = load_level(cfg.level)
    actor = actor_from_model(model)
    if actor.obs_dim != env_cfg.obs_dim:
        raise UserError(f"{run_dir}: actor takes {actor.obs_dim} inputs, level {cfg.level!r} gives {env_cfg.obs_dim}")
    if actor.head.out_features != N_DISCRETE_ACTIONS:
        raise UserError(
            f"{run_dir}: only discrete({N_DISCRETE_ACTIONS}) policies export (got {actor.head.out_features} outputs)"
        )
    meta = {
        "airq.obs_dim": str(env_cfg.obs_dim),
        "airq.action_space": f"discrete:{N_DISCRETE_ACTIONS}",
        "airq.action_table": json.dumps(action_table_rows()),
        "airq.preset": cfg.policy,
        "airq.precision": "fp32",
        "airq.env_id": level_env_id(env_cfg.level),
        "airq.level": env_cfg.level,
        "airq.env_config": json.dumps(env_cfg.to_dict()),
        "airq.algorithm": cfg.algo,
        "airq.train_steps": str(int(model.num_timesteps)),
        "airq.seed": str(cfg.seed),
        "airq.observation_layout": observation_layout(env_cfg),
        "airq.checkpoint": Path(ckpt).name,
        "airq.backend": cfg.backend,  # the simulator it was trained in (docs/dynamics.md)
    }
    if cfg.dynamics:  # the vehicle's dynamics file it trained with (its [randomization] drew each episode's physics)
        meta["airq.dynamics"] = cfg.dynamics
    distilled = _distillation(Path(run_dir))
    if distilled:  # a policies.distill run: the weights come from imitation, not from RL steps
        meta["airq.algorithm"] = "bc-dagger"
        meta["airq.distilled_from"] = json.dumps(distilled)
    raw = actor_to_onnx_bytes(actor)
    out = Path(out)
    if eval_episodes > 0:
        # measure the exported file itself, not the torch model it came from
        tmp = write_atomic(out.with_name(f".{out.name}.eval.onnx"), raw)
        try:
            policy = load_onnx(tmp)
            results = list(
                run_episodes(policy.act, env_cfg, eval_episodes, EVAL_SEED_BASE, num_envs=32, backend=cfg.backend)
            )
        finally:
            tmp.unlink(missing_ok=True)
        s = summarize(results)
        meta["airq.success_rate"] = f"{s['success_rate']:.4f}"
        meta["airq.success_eval"] = json.dumps(
            {
                "episodes": eval_episodes,
                "seed": EVAL_SEED_BASE,
                "level": env_cfg.level,
                "backend": cfg.backend,
                "ci95": [round(x, 4) for x in s["success_ci95"]],
            }
        )
    else:
        best = _metrics_best(Path(run_dir))
        meta["airq.success_rate"] = f"{best:.4f}" if best is not None else "unknown"
        meta["airq.success_eval"] = json.dumps({"source": "metrics.json best periodic evaluation"})
    write_atomic(out, with_metadata(raw, meta))
    return meta


def _distillation(run_dir: Path) -> dict | None:
    try:
        metrics = json.loads((run_dir / "metrics.json").read_text())
    except (OSError, ValueError):
        return None
    if "teacher" not in metrics:
        return None
    last = metrics["evals"][-1] if metrics.get("evals") else {}
    return {
        "teacher": metrics["teacher"]["run"],
        "samples": last.get("samples"),
        "iterations": len(metrics.get("evals", [])),
    }


def _metrics_best(run_dir: Path) -> float | None:
    try:
        return float(json.loads((run_dir / "metrics.json").read_text())["best"]["success_rate"])
    except (OSError, KeyError, ValueError, TypeError):
        return None


def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="python -m policies.export", description=__doc__.split("\n")[0])
    p.add_argument("run_dir")
    p.add_argument(
        "-o", "--output", required=True, type=output_file, help="ONNX file to write, e.g. models/policy1_fp32.onnx"
    )
    p.add_argument("--checkpoint", choices=RUN_CHECKPOINTS, default="best")
    p.add_argument(
        "--eval-episodes", type=int, default=200, help="episodes for airq.success_rate (0: take metrics.json's)"
    )
    args = p.parse_args(argv)
    if args.eval_episodes < 0:
        raise UserError("--eval-episodes must be >= 0")
    # deferred: torch: seconds to import
    import torch

    torch.set_num_threads(1)
    meta = export_run(args.run_dir, args.output, args.checkpoint, args.eval_episodes)
    size = Path(args.output).stat().st_size
    print(
        f"wrote {args.output} ({size / 1e6:.2f} MB): {meta['airq.preset']} {meta['airq.algorithm']} "
        f"{meta['airq.level']}, {int(meta['airq.train_steps']):,} steps, success {meta['airq.success_rate']} "
        f"({meta['airq.success_eval']})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
