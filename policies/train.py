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

from airq_cli import check_output_dir, run, write_atomic
from policies.config import build_parser, from_run_dir, replace, resolve
from policies.errors import UserError


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
    # deferred: torch: seconds to import
    import torch

    torch.set_num_threads(cfg.torch_threads)
    run_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(run_dir / "config.toml", cfg.to_toml().encode())

    # deferred: torch, stable_baselines3 (via policies.training_loop): seconds to import
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
