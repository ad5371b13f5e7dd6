"""quarl.mixed_precision: real PPO training on CartPole in fp32 and under bf16 autocast, in alternating order, timed
and evaluated on the study's seeded episodes; the per-seed summary; and bad input refused before any training."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from quarl.errors import QuarlError
from quarl.mixed_precision import compare, summary

STEPS = 1024  # PPO CartPole: 8 envs x 32 steps a rollout, 4 rollouts and their updates per run
EPISODES = 3


def _check_runs(runs, device: str) -> None:
    # seed 0 (the first) trains fp32 first, seed 1 bf16 first: machine drift falls on both
    assert [(r.seed, r.dtype, r.order) for r in runs] == [
        (0, "fp32", 0),
        (0, "bf16", 1),
        (1, "bf16", 2),
        (1, "fp32", 3),
    ]
    for r in runs:
        assert r.device == device and r.steps == STEPS
        assert r.update_s > 0 and r.train_s >= r.update_s  # the updates are part of learn()
        assert len(r.returns) == EPISODES and all(x >= 1 for x in r.returns)  # CartPole: returns are lengths
        assert r.mean_return == pytest.approx(float(np.mean(r.returns)))
    by = {(r.seed, r.dtype): r for r in runs}

    result = summary(runs)
    assert [row["seed"] for row in result["per_seed"]] == [0, 1]
    for row in result["per_seed"]:
        fp32, bf16 = by[(row["seed"], "fp32")], by[(row["seed"], "bf16")]
        assert row["dtype"] == "bf16"
        assert row["update_time_ratio"] == pytest.approx(bf16.update_s / fp32.update_s)
        assert row["train_time_ratio"] == pytest.approx(bf16.train_s / fp32.train_s)
        assert (row["fp32_return"], row["reduced_return"]) == (fp32.mean_return, bf16.mean_return)
    assert [r["order"] for r in result["runs"]] == [0, 1, 2, 3]


def test_bf16_against_fp32_on_cpu():
    runs = compare("CartPole-v1", "ppo", [0, 1], STEPS, "bf16", "cpu", episodes=EPISODES)
    _check_runs(runs, "cpu")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU on this machine")
def test_bf16_against_fp32_on_cuda():
    runs = compare("CartPole-v1", "ppo", [0, 1], STEPS, "bf16", "cuda", episodes=EPISODES)
    _check_runs(runs, "cuda")


@pytest.mark.parametrize(
    ("dtype", "device", "says"),
    [
        ("fp8", "cpu", "dtype must be one of fp32, bf16, got 'fp8'"),
        ("bf16", "tpu", "device must be cpu or cuda, got 'tpu'"),
        ("bf16", "cpu", "threads must be >= 1, got 0"),
        pytest.param(
            "bf16",
            "cuda",
            "no CUDA GPU is visible to torch",
            marks=pytest.mark.skipif(
                torch.cuda.is_available(), reason="this machine has a CUDA GPU: the no-GPU error cannot happen here"
            ),
        ),
    ],
)
def test_bad_input_fails_before_any_training(dtype, device, says, capsys):
    threads = 0 if says.startswith("threads") else 1
    t0 = time.perf_counter()
    with pytest.raises(QuarlError) as e:
        compare("CartPole-v1", "ppo", [0], 100_000, dtype, device, episodes=100, threads=threads)
    assert time.perf_counter() - t0 < 5
    assert says in str(e.value) and "\n" not in str(e.value)
    assert "training" not in capsys.readouterr().out  # compare prints a line before each training run
