"""Calibration observations: what the policy itself sees when it flies (seeded env rollouts).

The seed's Pi deployment lost 11-15 points of success because activations were quantized without
calibration; ranges here come from the observation distribution the policy creates by acting, on
seeds disjoint from training (10M+), training-time evaluation (1M+) and reported evaluation (0..N).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
from onnxruntime.quantization import CalibrationDataReader

from nav_env.common import observation_space
from nav_env.config import NavConfig
from nav_env.rollout import run_episodes
from quantize.errors import QuantizeError

CALIBRATION_SEED = 2_000_000  # default calibration episodes: 2M + j
HELDOUT_SEED = 3_000_000  # default held-out rollouts for action agreement: 3M + j


def collect_observations(
    policy: Callable[[np.ndarray], np.ndarray],
    cfg: NavConfig,
    episodes: int,
    seed: int,
    max_samples: int | None = None,
    num_envs: int = 16,
    backend: str = "embedded",
    dynamics: Any = None,
) -> np.ndarray:
    """Every observation the policy acted on in ``episodes`` seeded episodes (float32 [N, obs_dim]) on the
    simulator ``backend`` with vehicle ``dynamics`` (None: the backend's own); a random subset of ``max_samples`` rows
    if given (seeded, so reproducible)."""
    if episodes < 1:
        raise QuantizeError(f"calibration needs at least 1 episode, got {episodes}")
    seen: list[np.ndarray] = []

    def recording_policy(obs: np.ndarray) -> np.ndarray:
        seen.append(np.array(obs, dtype=np.float32, copy=True))
        return policy(obs)

    for _ in run_episodes(
        recording_policy, cfg, episodes, seed, num_envs=min(num_envs, episodes), backend=backend, dynamics=dynamics
    ):
        pass
    obs = np.concatenate(seen)
    # run_episodes keeps stepping envs whose episode has ended (until all are done); after a collision
    # their depth can leave [0, 1] (seen: -336), which would stretch the input's int8 range 300x. The
    # policy never acts on those, so only observations inside the documented space calibrate.
    space = observation_space(cfg)
    inside = np.all((obs >= space.low - 1e-5) & (obs <= space.high + 1e-5), axis=1)
    obs = obs[inside]
    if len(obs) == 0:
        raise QuantizeError("no valid observations recorded for calibration")
    if max_samples is not None and len(obs) > max_samples:
        rows = np.random.default_rng(seed).choice(len(obs), max_samples, replace=False)
        obs = obs[np.sort(rows)]
    return obs


class ObservationReader(CalibrationDataReader):
    """Feeds recorded observations to onnxruntime's calibrator in batches (the batch dim is dynamic)."""

    def __init__(self, obs: np.ndarray, batch: int = 512, equal_batches: bool = False):
        # equal_batches: onnxruntime's histogram calibrators (percentile, entropy) stack the batches
        # and fail on a shorter last one, so the remainder (< batch rows) is dropped for them.
        end = len(obs) - len(obs) % batch if equal_batches and len(obs) >= batch else len(obs)
        self.batches: Iterator[np.ndarray] = iter([obs[i : i + batch] for i in range(0, end, batch)])

    def get_next(self) -> dict[str, np.ndarray] | None:
        batch = next(self.batches, None)
        return None if batch is None else {"obs": np.ascontiguousarray(batch, dtype=np.float32)}
