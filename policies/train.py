"""Train a navigation policy with Stable-Baselines3 on nav_env's native vector env.

    python -m policies.train --policy policy1 --algo ppo [--level default] [--steps N] [--seed S]
        [--config configs/train/X.toml] [--out runs/NAME] [--resume]

Every TrainConfig field is also a flag (``--n-epochs 4``); precedence: defaults < --config < flags.
The run directory holds ``config.toml`` (resolved), ``checkpoints/latest.zip`` + ``state.json``
(atomic, for --resume), ``best_model.zip`` (best periodic evaluation on held-out seeds),
``final_model.zip``, ``tb/`` (TensorBoard) and ``metrics.json``.
With --resume the run's own config.toml is used; only --steps (to extend a run) may be changed.
"""

from __future__ import annotations

import os

# 2 cores: numpy's BLAS stays single-threaded (the env is numpy); torch gets torch_threads.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from airq_cli import check_output_dir, run, write_atomic
from policies.config import TRAIN_SEED_BASE, TrainConfig, build_parser, from_run_dir, replace, resolve
from policies.errors import UserError
from policies.presets import get_preset

if TYPE_CHECKING:  # torch and SB3 load in functions: a wrong flag is reported before 3-4 s of imports
    from policies.vec_adapter import NavSB3VecEnv


def make_vec_env(cfg: TrainConfig, restart: int = 0) -> NavSB3VecEnv:
    from policies.vec_adapter import NavSB3VecEnv

    latency = cfg.latency_source()
    venv = NavSB3VecEnv(cfg.num_envs, cfg.env_config(cfg.curriculum), graduate=cfg.curriculum_graduate, latency=latency)
    # Training seeds start at 10M: disjoint from evaluation (0.. and 1M..); a resumed run draws new
    # episodes rather than replaying the first ones.
    seed = TRAIN_SEED_BASE + cfg.seed * 1_000_000 + restart * 10_000
    venv.seed(seed)
    if latency is not None:
        latency.start_episode(seed)  # the delays drawn during training are reproducible too
    return venv


def lr_schedule(cfg: TrainConfig):
    lr = cfg.learning_rate
    if cfg.lr_schedule == "constant":
        return lr
    return lambda progress_remaining: lr * max(progress_remaining, 0.0)


def build_model(cfg: TrainConfig, venv: NavSB3VecEnv, tb_dir: str | None):
    from torch import nn

    from policies.actor import algo_class

    preset = get_preset(cfg.policy)
    common = dict(
        env=venv,
        learning_rate=lr_schedule(cfg),
        gamma=cfg.gamma,
        seed=cfg.seed,
        device="cpu",
        tensorboard_log=tb_dir,
        verbose=0,
    )
    if cfg.algo == "dqn":
        return algo_class("dqn")(
            "MlpPolicy",
            policy_kwargs=dict(net_arch=list(preset.actor), activation_fn=nn.ReLU),
            buffer_size=cfg.buffer_size,
            learning_starts=cfg.learning_starts,
            batch_size=cfg.batch_size,
            train_freq=cfg.train_freq,
            gradient_steps=cfg.gradient_steps,
            target_update_interval=max(cfg.target_update_interval // cfg.num_envs, 1),
            exploration_fraction=cfg.exploration_fraction,
            exploration_final_eps=cfg.exploration_final_eps,
            max_grad_norm=cfg.max_grad_norm,
            **common,
        )
    policy_kwargs = dict(net_arch=dict(pi=list(preset.actor), vf=list(preset.critic)), activation_fn=nn.ReLU)
    if cfg.algo == "a2c":
        return algo_class("a2c")(
            "MlpPolicy",
            policy_kwargs=policy_kwargs,
            n_steps=cfg.n_steps,
            gae_lambda=cfg.gae_lambda,
            ent_coef=cfg.ent_coef,
            vf_coef=cfg.vf_coef,
            max_grad_norm=cfg.max_grad_norm,
            **common,
        )
    return algo_class("ppo")(
        "MlpPolicy",
        policy_kwargs=policy_kwargs,
        n_steps=cfg.n_steps,
        batch_size=cfg.batch_size,
        n_epochs=cfg.n_epochs,
        gae_lambda=cfg.gae_lambda,
        clip_range=cfg.clip_range,
        ent_coef=cfg.ent_coef,
        vf_coef=cfg.vf_coef,
        max_grad_norm=cfg.max_grad_norm,
        **common,
    )


def warm_start(model, source: str) -> None:
    """Copy the actor (policy_net + action_net) from another checkpoint / run dir of the same preset."""
    from policies.actor import load_run

    src = Path(source)
    if src.is_dir():
        _, teacher, _ = load_run(src)
    else:
        from stable_baselines3 import PPO

        if not src.is_file():
            raise UserError(f"init_from not found: {src}")
        teacher = PPO.load(src, device="cpu")
    for name in ("mlp_extractor.policy_net", "action_net"):
        dst_mod, src_mod = model.policy.get_submodule(name), teacher.policy.get_submodule(name)
        try:
            dst_mod.load_state_dict(src_mod.state_dict())
        except RuntimeError:
            raise UserError(f"init_from {src}: {name} has a different architecture") from None


def main(argv: list[str] | None = None) -> int:
    args = build_parser(__doc__.split("\n")[0]).parse_args(argv)
    if args.resume:
        run_dir = Path(args.out) if hasattr(args, "out") else resolve(args).run_dir()
        if not (run_dir / "state.json").is_file():
            raise UserError(f"--resume: no checkpoint in {run_dir} (missing state.json)")
        cfg = from_run_dir(run_dir)
        if hasattr(args, "steps"):
            cfg = replace(cfg, steps=args.steps)
        cfg = replace(cfg, out=str(run_dir), progress=getattr(args, "progress", cfg.progress))
    else:
        cfg = resolve(args)
        run_dir = cfg.run_dir()
        if (run_dir / "state.json").exists():
            raise UserError(f"{run_dir} already holds a run: pass --resume to continue it or choose another --out")
        cfg = replace(cfg, out=str(run_dir))
    cfg.env_config(False)  # fail early on a bad level
    check_output_dir(run_dir, "--out")  # also the default runs/NAME, which argparse never sees
    import torch

    torch.set_num_threads(cfg.torch_threads)
    run_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(run_dir / "config.toml", cfg.to_toml().encode())

    from policies.training_loop import train

    summary = train(cfg, run_dir, resume=args.resume)
    final = summary.get("final_eval") or {}
    print(
        f"{run_dir}: {summary['timesteps']:,} steps in {summary['train_wall_s'] / 60:.1f} min "
        f"({summary['env_steps_per_s']:,.0f} steps/s); held-out success {final.get('success_rate', float('nan')):.1%} "
        f"(best {summary['best']['success_rate']:.1%} at {summary['best']['timesteps']:,})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
