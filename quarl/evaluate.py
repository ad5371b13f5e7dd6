"""Every policy of a trial plays the same seeded episodes: episode i starts from ``reset(seed=protocol.seed + i)``.

The episodes run side by side (one env each) and the policy acts on the batch of the envs still running, so a
torch fake-quant network is called once per time step, not once per env step. Actions depend only on each
env's own observation (policies are deterministic and batch-independent), so the returns are those of the
episodes played one by one.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from quarl.results import EvalProtocol
from quarl.tasks import MINATAR_MAX_STEPS, EpisodeEnv, PolicyFn, task_family

BATCH = 100  # envs alive at once


def evaluation_protocol(env_id: str, episodes: int, seed: int) -> EvalProtocol:
    """``episodes`` episodes from ``seed``, capped where the env has no time limit of its own (MinAtar)."""
    return EvalProtocol(episodes, seed, MINATAR_MAX_STEPS if task_family(env_id) == "minatar" else None)


def episode_returns(
    policy: PolicyFn, make: Callable[[], EpisodeEnv], protocol: EvalProtocol, observe: Callable | None = None
) -> list[float]:
    """Undiscounted return of each episode, in episode order. ``observe(obs_batch)`` sees every observation
    acted on (calibration records them)."""
    returns = [0.0] * protocol.episodes
    envs = [make() for _ in range(min(BATCH, protocol.episodes))]
    try:
        for start in range(0, protocol.episodes, len(envs)):
            ids = list(range(start, min(start + len(envs), protocol.episodes)))
            live = {i: envs[k] for k, i in enumerate(ids)}
            obs = {i: env.reset(protocol.seed + i) for i, env in live.items()}
            steps = 0
            while live and (protocol.max_steps is None or steps < protocol.max_steps):
                order = sorted(live)
                batch = np.stack([obs[i] for i in order])
                if observe is not None:
                    observe(batch)
                actions = policy(batch)
                for i, action in zip(order, actions, strict=True):
                    obs[i], reward, done = live[i].step(action)
                    returns[i] += reward
                    if done:
                        del live[i]
                steps += 1
    finally:
        for env in envs:
            env.close()
    return returns


def recorded_observations(
    policy: PolicyFn, make: Callable[[], EpisodeEnv], protocol: EvalProtocol, limit: int = 20_000
) -> np.ndarray:
    """Observations the policy meets on the protocol's episodes (calibration: ranges of what it really sees),
    thinned evenly to at most ``limit``."""
    seen: list[np.ndarray] = []
    episode_returns(policy, make, protocol, observe=seen.append)
    obs = np.concatenate(seen).astype(np.float32)
    if len(obs) > limit:
        obs = obs[np.linspace(0, len(obs) - 1, limit).astype(int)]
    return obs
