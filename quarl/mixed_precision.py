"""Mixed-precision training against fp32 in one run (the seed's Table 5 question: does training in reduced
precision make RL training faster, and does the policy still learn?).

SB3's gradient updates (``model.train``) run under ``torch.autocast``: bf16 on a CPU, bf16 on a CUDA GPU that
supports it. Acting (rollouts) stays fp32, as in the seed's mixed-precision training where the update is
what is accelerated. fp16 is not offered: SB3 steps its optimizers without loss scaling, and fp16 gradients
underflow without it; bf16 has fp32's exponent range and needs none.

Runs alternate the order per seed (seed 0: fp32 first; seed 1: reduced first...), so slow drift of a shared
machine falls on both; ratios compare runs of the same seed. Torch uses ``threads`` CPU threads (``--threads``;
1 by default, as a study's trials): with more threads than free cores, OpenMP's waiting threads swamp the timing
(a 1k-step CartPole PPO run took 40 times longer on 2 threads of a busy 2-core machine than on 1).

Reported per run: the time inside gradient updates, the whole training wall time, and the final policy's mean
return on the study's seeded episodes (fp32 inference of the trained weights).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from airq_cli import write_json
from quarl.config import EVAL_SEED
from quarl.errors import QuarlError
from quarl.evaluate import episode_returns, evaluation_protocol
from quarl.tasks import EpisodeEnv, make_train_env

DTYPES = ("fp32", "bf16")


@dataclass(frozen=True)
class PrecisionRun:
    seed: int
    dtype: str
    device: str
    order: int
    steps: int
    update_s: float  # wall time inside model.train (the gradient updates)
    train_s: float  # the whole learn(): rollouts + updates
    mean_return: float
    returns: list[float]


def device_and_dtype(dtype: str, device: str):
    # deferred: torch: seconds to import
    import torch

    if dtype not in DTYPES:
        raise QuarlError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    if device == "cuda":
        if not torch.cuda.is_available():
            raise QuarlError("--device cuda: no CUDA GPU is visible to torch on this machine")
        if dtype == "bf16" and not torch.cuda.is_bf16_supported():
            raise QuarlError("--device cuda: this GPU has no bf16 support")
    elif device != "cpu":
        raise QuarlError(f"device must be cpu or cuda, got {device!r}")
    return {"fp32": None, "bf16": torch.bfloat16}[dtype]


def train_once(
    env_id: str, algo: str, seed: int, steps: int, dtype: str, device: str, episodes: int, threads: int = 1
) -> tuple[float, float, list[float]]:
    # deferred: torch: seconds to import
    import torch

    # deferred: torch, stable_baselines3 (via policies.actor, quarl.actor, quarl.zoo): seconds to import
    from policies.actor import torch_policy_fn
    from quarl.actor import actor_from_model
    from quarl.zoo import make_model, zoo_entry

    autocast_dtype = device_and_dtype(dtype, device)
    entry = zoo_entry(env_id, algo)
    torch.manual_seed(seed)
    venv = make_train_env(entry, seed)
    model = make_model(entry, venv, seed, threads=threads)
    if device != "cpu":
        model.policy.to(device)
        model.device = torch.device(device)
    spent = [0.0]
    updates = model.train  # type: ignore[attr-defined]

    def timed_train(*args, **kwargs):
        t0 = time.perf_counter()
        if autocast_dtype is None:
            updates(*args, **kwargs)
        else:
            with torch.autocast(device_type=device, dtype=autocast_dtype):
                updates(*args, **kwargs)
        if device == "cuda":
            torch.cuda.synchronize()
        spent[0] += time.perf_counter() - t0

    model.train = timed_train  # type: ignore[attr-defined]
    t0 = time.perf_counter()
    model.learn(steps)
    train_s = time.perf_counter() - t0
    model.policy.to("cpu")
    vec_normalize = venv if entry.normalize is not None else None
    actor = actor_from_model(model, vec_normalize)
    returns = episode_returns(
        torch_policy_fn(actor),
        lambda: EpisodeEnv(env_id, entry.frame_stack),
        evaluation_protocol(env_id, episodes, EVAL_SEED),
    )
    venv.close()
    return spent[0], train_s, [float(r) for r in returns]


def compare(
    env_id: str,
    algo: str,
    seeds: list[int],
    steps: int,
    dtype: str = "bf16",
    device: str = "cpu",
    episodes: int = 50,
    threads: int = 1,
) -> list[PrecisionRun]:
    device_and_dtype(dtype, device)  # a bad dtype or a missing GPU fails before any training
    if threads < 1:
        raise QuarlError(f"threads must be >= 1, got {threads}")
    runs = []
    for k, seed in enumerate(seeds):
        order = ["fp32", dtype] if k % 2 == 0 else [dtype, "fp32"]
        for i, d in enumerate(order):
            print(
                f"  seed {seed}: training {algo.upper()} on {env_id} for {steps:,} steps in {d} ({device})", flush=True
            )
            update_s, train_s, returns = train_once(env_id, algo, seed, steps, d, device, episodes, threads)
            runs.append(
                PrecisionRun(
                    seed,
                    d,
                    device,
                    2 * k + i,
                    steps,
                    round(update_s, 2),
                    round(train_s, 2),
                    float(np.mean(returns)),
                    returns,
                )
            )
    return runs


def summary(runs: list[PrecisionRun]) -> dict:
    """Per seed: reduced / fp32 time ratios (> 1: reduced precision is slower) and the return difference."""
    rows = []
    for seed in sorted({r.seed for r in runs}):
        by = {r.dtype: r for r in runs if r.seed == seed}
        ref = by["fp32"]
        other = next(r for d, r in by.items() if d != "fp32")
        rows.append(
            {
                "seed": seed,
                "dtype": other.dtype,
                "update_time_ratio": other.update_s / ref.update_s,
                "train_time_ratio": other.train_s / ref.train_s,
                "fp32_return": ref.mean_return,
                "reduced_return": other.mean_return,
            }
        )
    return {"per_seed": rows, "runs": [asdict(r) for r in runs]}


def write_summary(path: Path, value: dict) -> Path:
    return write_json(path, value)
