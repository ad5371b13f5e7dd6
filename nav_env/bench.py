"""Environment throughput: single env, Gymnasium's SyncVectorEnv over it, and the native vector env.

    python -m nav_env.bench [--level default] [--num-envs 64] [--seconds 2] [--rounds 3] [--out FILE]
    python -m nav_env.bench --camera 144x256      # Air Learning-sized depth image (default 32x32)
    python -m nav_env.bench --backend mujoco      # also the rigid-body backend's single and native vector env

Random actions, autoresets included, one thread. The three are measured in the same run, in rounds of
``--seconds`` each, and within a round in turns of ``--seconds / --slices`` (single, Sync, native, single,
...): on a shared host the machine's speed drifts over seconds, and the turns expose all three to the
same drift. Two ratios are reported from the medians: native / Sync, and single / native, the single
env's env-step rate over the native vector env's (the price of stepping one env at a time, as the HIL
loop does, against the batched cost of one env-step), also per round. With ``--backend mujoco`` each turn
also runs the mujoco backend's single env and native vector env (nav_env.dynamics), in the same rounds.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import platform
import sys
import time
from statistics import median

import gymnasium as gym
import numpy as np

from airq_cli import ArgumentParser, UserError, output_file, run, write_json

# stdlib only: the one description of a CPU, device, host and package versions
from firmware_bridge.device import cpu_model, format_versions, package_versions
from nav_env.backends import DEFAULT_BACKEND, backend_names, get_backend
from nav_env.config import camera_overrides, load_level
from nav_env.env import NavEnv
from nav_env.vector import NavVectorEnv


def _actions(n: int, batch: int | None, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 25, size=(n, batch) if batch else n)


class SingleRun:
    """One NavEnv flown with random actions (resetting at each episode's end), in turns of given length."""

    def __init__(self, level: str, overrides: dict | None = None, backend: str = DEFAULT_BACKEND):
        self.env = NavEnv(level, overrides=overrides, backend=backend)
        self.env.reset(seed=0)
        self.acts = _actions(256, None).tolist()
        self.t = 0

    def run(self, seconds: float) -> tuple[int, float]:
        """(env-steps, seconds) of one turn of at least ``seconds``."""
        env, acts, steps, t0 = self.env, self.acts, 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            for _ in range(32):
                _, _, te, tr, _ = env.step(acts[self.t % len(acts)])
                self.t += 1
                steps += 1
                if te or tr:
                    env.reset()
        return steps, time.perf_counter() - t0


class VectorRun:
    """A vector env of ``num_envs`` stepped with random actions (autoreset), in turns of given length."""

    def __init__(self, envs: gym.vector.VectorEnv, num_envs: int) -> None:
        self.envs, self.num_envs = envs, num_envs
        self.envs.reset(seed=0)
        self.acts = _actions(32, num_envs)
        self.t = 0

    def run(self, seconds: float) -> tuple[int, float]:
        steps, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            self.envs.step(self.acts[self.t % len(self.acts)])
            self.t += 1
            steps += self.num_envs
        return steps, time.perf_counter() - t0


def bench_single(level: str, seconds: float, overrides: dict | None = None) -> float:
    """Env-steps/s of one NavEnv over ``seconds``."""
    steps, elapsed = SingleRun(level, overrides).run(seconds)
    return steps / elapsed


def bench_vector(envs: gym.vector.VectorEnv, num_envs: int, seconds: float) -> float:
    """Env-steps/s of a vector env over ``seconds``."""
    steps, elapsed = VectorRun(envs, num_envs).run(seconds)
    return steps / elapsed


def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="python -m nav_env.bench", description=__doc__.split("\n")[0])
    p.add_argument("--level", default="default")
    p.add_argument("--num-envs", type=int, default=64)
    p.add_argument("--seconds", type=float, default=2.0, help="per measurement")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--slices", type=int, default=8, help="turns per round (each env runs seconds/slices per turn)")
    p.add_argument("--out", type=output_file, help="write the figures as JSON here")
    p.add_argument(
        "--backend",
        choices=backend_names(in_process=True),
        default=DEFAULT_BACKEND,
        help="another in-process backend (mujoco: the rigid-body quadrotor) to measure beside the embedded one",
    )
    p.add_argument(
        "--camera", default=None, help="depth image HEIGHTxWIDTH, e.g. 144x256 (default: the level's, 32x32)"
    )
    args = p.parse_args(argv)
    if args.num_envs < 1 or args.seconds <= 0 or args.rounds < 1 or args.slices < 1:
        raise UserError("--num-envs, --seconds, --rounds and --slices must be positive")
    overrides = camera_overrides(args.camera) if args.camera else None
    load_level(args.level, overrides)

    native = NavVectorEnv(args.num_envs, level=args.level, overrides=overrides)
    sync = gym.vector.SyncVectorEnv([lambda: NavEnv(args.level, overrides=overrides) for _ in range(args.num_envs)])
    runs: dict[str, list[float]] = {"single": [], "sync_vector": [], "native_vector": []}
    other = None if get_backend(args.backend).is_default else args.backend  # measured beside the default backend
    if other:
        other_native = NavVectorEnv(args.num_envs, level=args.level, overrides=overrides, backend=other)
        runs |= {f"{other}_single": [], f"{other}_native_vector": []}
    for r in range(args.rounds):
        # fresh envs each round, as the episodes they start from; then turns in a fixed order
        runners: dict[str, SingleRun | VectorRun] = {
            "single": SingleRun(args.level, overrides),
            "sync_vector": VectorRun(sync, args.num_envs),
            "native_vector": VectorRun(native, args.num_envs),
        }
        if other:
            runners[f"{other}_single"] = SingleRun(args.level, overrides, backend=other)
            runners[f"{other}_native_vector"] = VectorRun(other_native, args.num_envs)
        done = {k: 0 for k in runners}
        took = {k: 0.0 for k in runners}
        for _ in range(args.slices):
            for k, runner in runners.items():
                steps, elapsed = runner.run(args.seconds / args.slices)
                done[k] += steps
                took[k] += elapsed
        for k in runners:
            runs[k].append(done[k] / took[k])
        print(
            f"round {r + 1}/{args.rounds}: " + ", ".join(f"{k} {v[-1]:,.0f}" for k, v in runs.items()), file=sys.stderr
        )
    med = {k: median(v) for k, v in runs.items()}
    result = {
        "level": args.level,
        "camera": args.camera or "32x32",
        "num_envs": args.num_envs,
        "seconds": args.seconds,
        "rounds": args.rounds,
        "slices": args.slices,
        "env_steps_per_s": med,
        "native_over_sync": med["native_vector"] / med["sync_vector"],
        "single_over_native": med["single"] / med["native_vector"],
        "single_over_native_by_round": [s / n for s, n in zip(runs["single"], runs["native_vector"])],
        "backends": [DEFAULT_BACKEND, *([other] if other else [])],
        "machine": {
            "cpu": cpu_model(),
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "numpy": np.__version__,
        },
        "versions": package_versions(),
    }
    print(
        f"level {args.level}, camera {args.camera or '32x32'}, {args.num_envs} envs, random actions with autoreset, one thread ({result['machine']['cpu']})"
    )
    print(f"{'env':<22}{'env-steps/s':>14}")
    for k, v in med.items():
        print(f"{k:<22}{v:>14,.0f}")
    print(f"native / SyncVectorEnv: {result['native_over_sync']:.1f}x")
    by_round = result["single_over_native_by_round"]
    print(
        f"single / native (env-steps/s of one NavEnv over the native vector env's): "
        f"{result['single_over_native']:.2f} ({result['single_over_native']:.0%}; rounds {min(by_round):.2f}-{max(by_round):.2f})"
    )
    if other:
        for kind in ("single", "native_vector"):
            result[f"{other}_over_{DEFAULT_BACKEND}_{kind}"] = med[f"{other}_{kind}"] / med[kind]
        print(
            f"{other} / {DEFAULT_BACKEND}: single {result[f'{other}_over_{DEFAULT_BACKEND}_single']:.2f}, "
            f"native vector {result[f'{other}_over_{DEFAULT_BACKEND}_native_vector']:.2f}"
        )
    print(format_versions(result["versions"]))
    if args.out:
        write_json(args.out, result, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
