"""Success rate of torch (fake-quantized) actors on seeded episodes, via nav_env.rollout.

ONNX artifacts are evaluated with ``python -m policies.evaluate``; the n-bit fake-quant actors of the
sweep and QAT only exist in torch, so they go through the same nav_env.rollout.run_episodes /
summarize / paired_difference that policies.evaluate uses. Episode j = reset(seed=seed + j) for every
policy, so results pair up episode by episode.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from nav_env.config import NavConfig
from nav_env.rollout import EpisodeResult, run_episodes, summarize
from nav_env.stats import paired_difference


def torch_policy(actor: nn.Module):
    @torch.no_grad()
    def act(obs: np.ndarray) -> np.ndarray:
        action, _ = actor(torch.as_tensor(obs, dtype=torch.float32))
        return action.numpy()

    return act


def evaluate_actor(
    actor: nn.Module, cfg: NavConfig, episodes: int, seed: int, num_envs: int = 32
) -> list[EpisodeResult]:
    actor.eval()
    return sorted(run_episodes(torch_policy(actor), cfg, episodes, seed, num_envs=num_envs), key=lambda r: r.episode)


def success_vector(results: list[EpisodeResult]) -> np.ndarray:
    return np.array([r.success for r in sorted(results, key=lambda r: r.episode)], dtype=bool)


def compare(reference: list[EpisodeResult], candidate: list[EpisodeResult]) -> dict:
    """summary of the candidate plus its paired success-rate difference to the reference."""
    s = summarize(candidate)
    d = paired_difference(success_vector(reference), success_vector(candidate))
    return {
        "success_rate": s["success_rate"],
        "success_ci95": s["success_ci95"],
        "collision_rate": s["collision_rate"],
        "mean_return": s["mean_return"],
        "paired_diff": d,
    }
