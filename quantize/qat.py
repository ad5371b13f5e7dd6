"""Quantization-aware training of a policies.train run's actor (the seed's Algorithm 2), with SB3 PPO.

Weights round to nearest by default (the seed's public code); ``rounding="floor"`` (``quantize qat
--rounding floor``) is the paper's formula as printed, which drives Policy I to ~1.5% success below
8 bits (docs/quantize.md). The rounding used is recorded in qat.json and the int8 file's metadata.

1. Load the run's best checkpoint (PPO/A2C) and wrap its actor in place: the policy_net Linears and
   action_net get n-bit weight fake-quant, the observation and each hidden ReLU output get activation
   fake-quant (quantize.fakequant). The wrappers reuse the same Parameter objects, so SB3's optimizer
   keeps training them; the critic is untouched (it never ships).
2. Quantization delay: for ``delay`` env steps the actor trains in float while the activation
   quantizers record min/max. At the first rollout end past ``delay`` the ranges freeze and weights
   and activations are fake-quantized from then on (straight-through gradients from torch's op).
3. Continue PPO for ``steps`` env steps in total on all goal zones (curriculum off, the evaluated
   distribution), training seeds disjoint from the run's own, evaluation and calibration seeds.
4. Evaluate the fake-quant actor against the float actor on the same seeded episodes; for n = 8
   also write an int8 QDQ ONNX (quantize.qdq_export) and check it agrees with the torch model.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from airq_cli import check_output_dir, write_json
from nav_env.config import load_level
from policies.actor import actor_from_model, load_run
from policies.config import TRAIN_SEED_BASE, replace
from policies.export import export_run
from quantize.affine import Rounding
from quantize.errors import QuantizeError
from quantize.evaluation import compare, evaluate_actor, torch_policy
from quantize.fakequant import (
    FakeQuantActor,
    QuantBody,
    QuantLinear,
    correct_biases,
    freeze_and_quantize,
    quant_linears,
)

if TYPE_CHECKING:
    from policies.config import TrainConfig

QAT_SEED_OFFSET = 900_000  # training seeds: TRAIN_SEED_BASE + run seed * 1M + 900k + bits * 1000


@dataclass
class QatResult:
    actor: FakeQuantActor
    float_actor: torch.nn.Module
    run_cfg: TrainConfig
    checkpoint: Path
    bits: int
    delay: int
    steps: int
    wall_s: float
    froze_at: int


def _load(run_dir: str | Path):
    cfg, model, ckpt = load_run(run_dir, "best")
    if cfg.algo not in ("ppo", "a2c"):
        raise QuantizeError(f"{run_dir}: QAT supports PPO/A2C runs, this one is {cfg.algo}")
    return cfg, model, Path(ckpt)


def train_qat(
    run_dir: str | Path,
    bits: int,
    delay: int = 50_000,
    steps: int = 300_000,
    learning_rate: float = 1e-4,
    seed: int = 0,
    threads: int = 2,
    rounding: Rounding = "nearest",
    progress: bool = True,
    bias_correction: bool = False,
) -> QatResult:
    # deferred: stable_baselines3: seconds to import
    from stable_baselines3.common.callbacks import BaseCallback

    # deferred: stable_baselines3 (via policies.vec_adapter): seconds to import
    from policies.vec_adapter import NavSB3VecEnv

    if rounding not in ("nearest", "floor"):
        raise QuantizeError(f"rounding must be 'nearest' or 'floor', got {rounding!r}")
    if steps < 1 or delay < 0 or delay >= steps:
        raise QuantizeError(f"need 0 <= --delay < --steps, got delay {delay}, steps {steps}")
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    cfg, model, ckpt = _load(run_dir)
    float_actor = actor_from_model(model)
    cfg = replace(cfg, curriculum=False)
    venv = NavSB3VecEnv(cfg.num_envs, cfg.env_config(False), graduate=True)
    venv.seed(TRAIN_SEED_BASE + cfg.seed * 1_000_000 + QAT_SEED_OFFSET + bits * 1000 + seed)
    model.set_env(venv)
    model.learning_rate = learning_rate
    model._setup_lr_schedule()  # constant fine-tuning rate, not the run's annealed schedule
    policy = model.policy
    body = QuantBody(policy.mlp_extractor.policy_net, bits, True, rounding)
    head = QuantLinear(policy.action_net, bits, rounding)
    policy.mlp_extractor.policy_net, policy.action_net = body, head
    state = {"froze_at": -1}

    class Freeze(BaseCallback):
        def _on_step(self) -> bool:
            return True

        def _on_rollout_end(self) -> None:
            if state["froze_at"] < 0 and self.num_timesteps >= delay:
                if bias_correction:
                    correct_biases(body, head)
                freeze_and_quantize(body)
                freeze_and_quantize(head)
                state["froze_at"] = int(self.num_timesteps)
                if progress:
                    print(
                        f"  [qat {bits}-bit] ranges frozen at {self.num_timesteps:,} steps; training quantized",
                        flush=True,
                    )

    t0 = time.perf_counter()
    model.learn(steps, callback=Freeze(), reset_num_timesteps=True, progress_bar=False)
    venv.close()
    if state["froze_at"] < 0:  # steps ended before a rollout boundary passed the delay
        if bias_correction:
            correct_biases(body, head)
        freeze_and_quantize(body)
        freeze_and_quantize(head)
        state["froze_at"] = int(model.num_timesteps)
    actor = FakeQuantActor(body, head, float_actor.obs_dim, bits, rounding=rounding).eval()
    return QatResult(actor, float_actor, cfg, ckpt, bits, delay, steps, time.perf_counter() - t0, state["froze_at"])


def weight_rounding(actor: torch.nn.Module) -> str:
    """The rounding every weight quantizer of a fake-quant actor applies (what it really trained with)."""
    found = {lin.rounding for lin in quant_linears(actor)}
    if len(found) != 1:
        raise RuntimeError(f"expected one weight rounding in the actor, found {sorted(found)}")
    return found.pop()


def source_metadata(run_dir: str | Path) -> dict[str, str]:
    """The airq.* metadata policies.export writes for this run (exported to a temp file, no eval)."""
    # deferred: onnx: ~0.2 s to import, paid only where used
    import onnx

    # deferred: onnx (via quantize.model_io): ~0.2 s to import, paid only where used
    from quantize.model_io import metadata_of

    with tempfile.TemporaryDirectory(prefix="airq-qat-") as tmp:
        path = Path(tmp) / "fp32.onnx"
        export_run(run_dir, path, "best", eval_episodes=0)
        return metadata_of(onnx.load(path))


def export_int8(result: QatResult, run_dir: str | Path, out: Path, episodes_summary: dict | None) -> Path:
    # deferred: onnx (via quantize.model_io, quantize.qdq_export): ~0.2 s to import, paid only where used
    from quantize.model_io import QUANT_PREFIX, json_compact, save_atomic, set_metadata
    from quantize.qdq_export import qdq_bytes_and_scales

    model, scales = qdq_bytes_and_scales(result.actor)
    meta = source_metadata(run_dir)
    meta.pop("airq.success_rate", None)
    meta.pop("airq.success_eval", None)
    meta |= {
        "airq.precision": "int8",
        QUANT_PREFIX
        + "method": f"QAT (seed Algorithm 2): {result.bits}-bit affine fake-quant of weights ({result.actor.rounding}) "
        f"and activations (nearest), min/max ranges frozen after the delay; uint8 x uint8 QDQ",
        QUANT_PREFIX + "bits": str(result.bits),
        QUANT_PREFIX + "weight_rounding": weight_rounding(result.actor),
        QUANT_PREFIX + "source_checkpoint": str(result.checkpoint),
        QUANT_PREFIX + "source_sha256": hashlib.sha256(result.checkpoint.read_bytes()).hexdigest(),
        QUANT_PREFIX + "qat_delay_steps": str(result.delay),
        QUANT_PREFIX + "qat_steps": str(result.steps),
        QUANT_PREFIX + "qat_froze_at": str(result.froze_at),
        QUANT_PREFIX + "calibration_episodes": "0 (ranges monitored during QAT rollouts)",
        QUANT_PREFIX + "format": "qdq",
        QUANT_PREFIX + "scheme": "u8u8",  # exact on every CPU (quantize.qdq_export)
        QUANT_PREFIX + "weight_type": "uint8",
        QUANT_PREFIX + "activation_type": "uint8",
        QUANT_PREFIX + "per_channel": "false",
        QUANT_PREFIX + "layer_scales": json_compact(scales),
    }
    if episodes_summary:
        meta["airq.success_rate"] = f"{episodes_summary['success_rate']:.4f}"
        meta["airq.success_eval"] = json.dumps(episodes_summary["eval"])
    set_metadata(model, meta)
    return save_atomic(model, out)


def run_qat_cli(args) -> dict:
    if args.episodes < 1:
        raise QuantizeError(f"--episodes must be >= 1, got {args.episodes}")
    run_dir = Path(args.run_dir)
    out = Path(args.out or run_dir / f"qat_{args.bits}bit_{args.rounding}{'_bc' if args.bias_correction else ''}")
    check_output_dir(out, "--out")  # the default under RUN_DIR too, before minutes of training
    res = train_qat(
        run_dir,
        args.bits,
        args.delay,
        args.steps,
        args.learning_rate,
        args.seed,
        args.threads,
        args.rounding,
        bias_correction=args.bias_correction,
    )
    cfg = load_level(res.run_cfg.level)
    torch.set_num_threads(1)
    ref = evaluate_actor(res.float_actor, cfg, args.episodes, 0)
    q = evaluate_actor(res.actor, cfg, args.episodes, 0)
    cmp = compare(ref, q)
    fp = compare(ref, ref)
    report = {
        "run_dir": str(run_dir),
        "bits": res.bits,
        "rounding": weight_rounding(res.actor),
        "bias_correction": args.bias_correction,
        "delay": res.delay,
        "steps": res.steps,
        "froze_at": res.froze_at,
        "wall_s": round(res.wall_s, 1),
        "episodes": args.episodes,
        "eval_seed": 0,
        "level": res.run_cfg.level,
        "fp32_success_rate": fp["success_rate"],
        "qat": cmp,
    }
    out.mkdir(parents=True, exist_ok=True)
    torch.save(res.actor, out / "actor_fakequant.pt")
    if res.bits == 8:
        summary = {
            "success_rate": cmp["success_rate"],
            "eval": {"episodes": args.episodes, "seed": 0, "level": res.run_cfg.level, "source": "torch fake-quant"},
        }
        path = export_int8(res, run_dir, out / "policy_qat_int8.onnx", summary)
        report["onnx"] = str(path)
        report["onnx_agreement_vs_torch"] = onnx_agreement(path, res.actor, cfg)
    write_json(out / "qat.json", report)
    d = cmp["paired_diff"]
    print(
        f"{out}: QAT {res.bits}-bit ({args.rounding} weights) success {cmp['success_rate']:.1%} vs fp32 {fp['success_rate']:.1%} "
        f"(paired diff {d['diff']:+.1%} [{d['low']:+.1%}, {d['high']:+.1%}], McNemar p={d['mcnemar_p']:.3g}) "
        f"over {args.episodes} episodes; {res.wall_s / 60:.1f} min"
    )
    return report


def onnx_agreement(path: Path, actor: FakeQuantActor, cfg, episodes: int = 10) -> float:
    # deferred: onnxruntime (via quantize.calibration, quantize.runtime): ~0.2 s to import, paid only where used
    from quantize.calibration import HELDOUT_SEED, collect_observations
    from quantize.runtime import run_logits, session

    obs = collect_observations(torch_policy(actor), cfg, episodes, HELDOUT_SEED)
    a, _ = run_logits(session(path.read_bytes()), obs)
    with torch.no_grad():
        t, _ = actor(torch.as_tensor(obs))
    return float(np.mean(a == t.numpy()))
