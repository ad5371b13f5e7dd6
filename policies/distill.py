"""Policy III warm start: distil a trained teacher (e.g. Policy II) into the Policy III actor by
behaviour cloning with DAgger, then (optionally) fine-tune with PPO via ``--init-from``.

    python -m policies.distill --teacher runs/policy2_default --out runs/policy3_default_bc
        [--iterations 4] [--samples-per-iteration 60000] [--epochs 1] [--seed 0]

Why: Policy III's PPO update costs ~36-69 min per million steps on 2 cores, while the student only
needs to imitate a policy that already succeeds ~98%. Iteration 0 records the teacher's own
rollouts; later iterations let the student fly (with the teacher taking over a shrinking share of
steps) and label every visited observation with the teacher's action, so the student learns to
recover from its own mistakes (DAgger). Loss: cross-entropy to the teacher's argmax action, the
only thing a deterministic deployment uses. The result is a normal run directory (SB3 PPO zip with
the Policy III actor and its small critic untrained), so export, evaluate and
``policies.train --init-from`` work on it unchanged.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from gymnasium.vector import AutoresetMode

from airq_cli import ArgumentParser, output_dir, run, write_atomic, write_json
from nav_env.config import load_level
from nav_env.vector import NavVectorEnv
from policies.builders import build_model, make_vec_env
from policies.config import TRAIN_SEED_BASE, TrainConfig, load_toml, replace
from policies.errors import UserError
from policies.machine import machine_info

if TYPE_CHECKING:  # torch loads in functions: a wrong flag is reported before seconds of imports
    import torch
    from torch import nn

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "train" / "policy3_default.toml"


def collect(
    teacher,
    student,
    cfg,
    n_samples: int,
    teacher_share: float,
    seed: int,
    num_envs: int = 64,
    backend: str = "embedded",
    dynamics=None,
):
    """Fly a mixture (teacher acts with probability ``teacher_share`` per env-step, else the student)
    and return the visited observations with the teacher's labels. ``backend`` and ``dynamics``: the simulator
    the teacher trained in (the student learns on the vehicle the teacher flies)."""
    # deferred: torch: seconds to import
    import torch

    env = NavVectorEnv(num_envs, config=cfg, autoreset_mode=AutoresetMode.SAME_STEP, backend=backend, dynamics=dynamics)
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    xs: list[np.ndarray] = []
    ys: list[np.ndarray] = []
    with torch.no_grad():
        while len(xs) * num_envs < n_samples:
            t_obs = torch.from_numpy(obs)
            label = teacher(t_obs)[0].numpy()
            action = label if teacher_share >= 1 else student(t_obs)[0].numpy()
            take = rng.random(num_envs) < teacher_share
            action = np.where(take, label, action)
            xs.append(obs)
            ys.append(label)
            obs, *_ = env.step(action)
    return np.concatenate(xs)[:n_samples], np.concatenate(ys)[:n_samples]


def fit(
    student_modules: nn.Module,
    student,
    x: np.ndarray,
    y: np.ndarray,
    epochs: int,
    batch: int,
    optimizer: torch.optim.Optimizer,
    rng: np.random.Generator,
) -> dict:
    # deferred: torch: seconds to import
    import torch
    from torch import nn

    student_modules.train()
    loss_fn = nn.CrossEntropyLoss()
    losses, correct, seen = [], 0, 0
    for _ in range(epochs):
        order = rng.permutation(len(x))
        for start in range(0, len(x), batch):
            idx = order[start : start + batch]
            xb, yb = torch.from_numpy(x[idx]), torch.from_numpy(y[idx]).long()
            logits = student(xb)[1]
            loss = loss_fn(logits, yb)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            correct += int((logits.argmax(1) == yb).sum())
            seen += len(idx)
    student_modules.eval()
    return {"loss": float(np.mean(losses[-50:])), "train_agreement": correct / max(seen, 1)}


def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="python -m policies.distill", description=__doc__.split("\n")[0])
    p.add_argument("--teacher", required=True, help="run directory of the teacher (e.g. runs/policy2_default)")
    p.add_argument("--out", required=True, type=output_dir, help="run directory to create")
    p.add_argument("--policy", default="policy3")
    p.add_argument("--iterations", type=int, default=4)
    p.add_argument("--samples-per-iteration", type=int, default=60_000)
    p.add_argument("--epochs", type=int, default=1, help="passes over the aggregated data per iteration")
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--eval-episodes", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--torch-threads", type=int, default=1)
    args = p.parse_args(argv)
    if min(args.iterations, args.samples_per_iteration, args.epochs, args.batch_size) < 1:
        raise UserError("--iterations, --samples-per-iteration, --epochs and --batch-size must be >= 1")
    out = Path(args.out)
    if (out / "state.json").exists():
        raise UserError(f"{out} already holds a run; choose another --out")
    # deferred: torch (seconds to import), after the argument checks: a wrong flag answers at once
    import torch
    from torch import nn

    # deferred: torch (via policies.actor): seconds to import
    from policies.actor import actor_from_model, load_run

    torch.set_num_threads(args.torch_threads)
    torch.manual_seed(args.seed)

    # deferred: torch, stable_baselines3 (via policies.training_loop): seconds to import
    from policies.training_loop import evaluate_model, save_atomic

    t_cfg, teacher_model, teacher_ckpt = load_run(args.teacher)
    teacher = actor_from_model(teacher_model)
    base = load_toml(CONFIG) if CONFIG.is_file() else {}
    cfg = replace(
        TrainConfig(**base),
        policy=args.policy,
        algo="ppo",
        level=t_cfg.level,
        backend=t_cfg.backend,
        dynamics=t_cfg.dynamics,
        seed=args.seed,
        out=str(out),
        init_from="",
    ).validate()
    env_cfg = load_level(cfg.level)
    venv = make_vec_env(cfg)
    model = build_model(cfg, venv, tb_dir=None)
    actor_modules = nn.ModuleList([model.policy.mlp_extractor.policy_net, model.policy.action_net])
    optimizer = torch.optim.Adam(actor_modules.parameters(), lr=args.lr)

    def student(obs: torch.Tensor):
        logits = model.policy.action_net(model.policy.mlp_extractor.policy_net(obs))
        return logits.argmax(1), logits

    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "config.toml", cfg.to_toml().encode())
    rng = np.random.default_rng(args.seed)
    xs: list[np.ndarray] = []
    ys: list[np.ndarray] = []
    history: list[dict] = []
    best = {"iteration": -1, "success_rate": -1.0}
    t0 = time.perf_counter()
    for it in range(args.iterations):
        share = 1.0 if it == 0 else 0.5**it
        x, y = collect(
            teacher,
            student,
            env_cfg,
            args.samples_per_iteration,
            share,
            seed=TRAIN_SEED_BASE + 500_000 + args.seed * 10_000 + it * 1_000,
            backend=cfg.backend,
            dynamics=cfg.dynamics_config(),
        )
        xs.append(x)
        ys.append(y)
        fit_stats = fit(
            actor_modules, student, np.concatenate(xs), np.concatenate(ys), args.epochs, args.batch_size, optimizer, rng
        )
        result = evaluate_model(model, cfg, args.eval_episodes, cfg.eval_seed)
        entry = {
            "iteration": it,
            "teacher_share": share,
            "samples": int(sum(len(a) for a in xs)),
            "wall_s": round(time.perf_counter() - t0, 1),
            **fit_stats,
            **result,
        }
        history.append(entry)
        print(
            f"[iteration {it}] {entry['samples']:,} samples, loss {entry['loss']:.3f}, agreement "
            f"{entry['train_agreement']:.1%}, held-out success {result['success_rate']:.1%}, "
            f"{entry['wall_s'] / 60:.1f} min",
            file=sys.stderr,
        )
        if result["success_rate"] >= best["success_rate"]:  # ties go to the student trained on more data
            best = {"iteration": it, "timesteps": 0, "success_rate": result["success_rate"]}
            save_atomic(model, out / "best_model.zip")
        metrics = {
            "config": vars(cfg),
            "machine": machine_info(),
            "method": "behaviour cloning with DAgger",
            "teacher": {"run": str(args.teacher), "checkpoint": str(teacher_ckpt)},
            "distill_args": vars(args),
            "evals": history,
            "best": best,
            "timesteps": 0,
            "train_wall_s": entry["wall_s"],
            "done": it == args.iterations - 1,
        }
        write_json(out / "metrics.json", metrics)
    save_atomic(model, out / "final_model.zip")
    save_atomic(model, out / "checkpoints" / "latest.zip")
    write_atomic(
        out / "state.json",
        json.dumps(
            {
                "restarts": 0,
                "timesteps": 0,
                "train_wall_s": history[-1]["wall_s"],
                "curriculum_zone": 0,
                "graduated": True,
            }
        ).encode(),
    )
    print(
        f"{out}: best held-out success {best['success_rate']:.1%} (iteration {best['iteration']}), "
        f"{history[-1]['wall_s'] / 60:.1f} min"
    )
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
