"""Training throughput per preset: env steps per second including the SB3 updates (a benchmark, not
a test). Each preset trains briefly with its shipped config (configs/train/PRESET_default.toml, or
the defaults) and the rate is measured after a warm-up rollout.

    python -m policies.bench [--presets policy1 policy2 policy3] [--algo ppo] [--rollouts 3]
        [--torch-threads 1] [--out FILE]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from airq_cli import ArgumentParser, output_file, run, write_json
from policies.builders import build_model, make_vec_env
from policies.config import TrainConfig, load_toml, replace
from policies.errors import UserError
from policies.machine import machine_info
from policies.presets import PRESETS, check_algorithm, get_preset

if TYPE_CHECKING:
    from stable_baselines3.common.callbacks import BaseCallback

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs" / "train"


def rollout_clock(marks: list[tuple[float, int]]) -> BaseCallback:
    """A callback appending (time, steps) to ``marks`` at the start of every rollout: the interval between
    two covers one rollout plus the update that follows it. Built here so SB3 loads only once a bench runs."""
    # deferred: stable_baselines3: seconds to import
    from stable_baselines3.common.callbacks import BaseCallback

    class RolloutClock(BaseCallback):
        def _on_rollout_start(self) -> None:
            marks.append((time.perf_counter(), self.num_timesteps))

        def _on_step(self) -> bool:
            return True

    return RolloutClock()


def preset_config(preset: str, algo: str) -> TrainConfig:
    path = CONFIG_DIR / f"{preset}_default.toml"
    values = load_toml(path) if path.is_file() else {"policy": preset}
    values.pop("init_from", None)  # throughput does not depend on the starting weights
    return replace(TrainConfig(**values), algo=algo, progress=False, curriculum=False).validate()


def bench_preset(cfg: TrainConfig, rollouts: int) -> dict:
    venv = make_vec_env(cfg)
    model = build_model(cfg, venv, tb_dir=None)
    per_rollout = cfg.num_envs * (cfg.n_steps if cfg.algo != "dqn" else 1)
    steps = per_rollout * (rollouts + 1) if cfg.algo != "dqn" else max(cfg.learning_starts + 20_000, 40_000)
    marks: list[tuple[float, int]] = []
    clock = rollout_clock(marks)
    t0 = time.perf_counter()
    model.learn(steps, callback=clock)
    t_end, n_end = time.perf_counter(), model.num_timesteps
    venv.close()
    # skip the first rollout + update (allocation, first-call overheads)
    t1, n1 = marks[1] if len(marks) > 1 else (t0, 0)
    return {
        "preset": cfg.policy,
        "algo": cfg.algo,
        "num_envs": cfg.num_envs,
        "n_steps": cfg.n_steps,
        "batch_size": cfg.batch_size,
        "n_epochs": cfg.n_epochs,
        "measured_steps": n_end - n1,
        "env_steps_per_s": round((n_end - n1) / (t_end - t1), 1),
        "minutes_per_million_steps": round((t_end - t1) / (n_end - n1) * 1e6 / 60, 2),
    }


def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="python -m policies.bench", description=__doc__.split("\n")[0])
    p.add_argument("--presets", nargs="+", default=list(PRESETS))
    p.add_argument("--algo", default="ppo")
    p.add_argument(
        "--rollouts", type=int, default=3, help="measured rollouts (+ updates) per preset, after one warm-up"
    )
    p.add_argument("--torch-threads", type=int, default=1)
    p.add_argument("--out", type=output_file, help="write the figures as JSON here")
    args = p.parse_args(argv)
    for name in args.presets:
        get_preset(name)
    check_algorithm(args.algo)
    if args.rollouts < 1 or args.torch_threads < 1:
        raise UserError("--rollouts and --torch-threads must be >= 1")
    # deferred: torch (seconds to import), after the argument checks: a wrong flag answers at once
    import torch

    torch.set_num_threads(args.torch_threads)
    results = []
    for name in args.presets:
        cfg = replace(preset_config(name, args.algo), torch_threads=args.torch_threads)
        results.append(bench_preset(cfg, args.rollouts))
        r = results[-1]
        print(
            f"{name}: {r['env_steps_per_s']:,.0f} env-steps/s ({r['minutes_per_million_steps']:.1f} min per 1M steps)",
            file=sys.stderr,
        )
    info = machine_info() | {"load_average_1min_at_end": round(os.getloadavg()[0], 2)}
    print(
        f"training throughput, {args.algo}, env steps/s including updates ({info['cpu']}, {info['cores']} cores, "
        f"{args.torch_threads} torch thread(s); load average {info['load_average_1min_at_end']}: "
        f"other jobs on the cores slow every figure)"
    )
    print(f"{'preset':<10}{'envs x steps':>14}{'batch':>7}{'epochs':>8}{'steps/s':>10}{'min/1M':>9}")
    for r in results:
        shape = f"{r['num_envs']} x {r['n_steps']}"
        print(
            f"{r['preset']:<10}{shape:>14}{r['batch_size']:>7}{r['n_epochs']:>8}"
            f"{r['env_steps_per_s']:>10,.0f}{r['minutes_per_million_steps']:>9.1f}"
        )
    if args.out:
        write_json(args.out, {"results": results, "machine": info})
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
