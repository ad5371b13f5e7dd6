"""Seeded evaluation: episode ``j`` is played from ``reset(seed=seed + j)`` whatever the policy, so
two policies' results pair up episode by episode."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode

from nav_env.config import NavConfig
from nav_env.latency import LatencySource
from nav_env.stats import wilson_interval
from nav_env.vector import NavVectorEnv

Policy = Callable[[np.ndarray], np.ndarray]


@dataclass
class EpisodeResult:
    episode: int
    seed: int
    zone: int
    outcome: str  # "success", "collision" or "timeout"
    steps: int
    episode_return: float
    path_length: float
    start_distance: float
    straight_distance: float  # from the start to the edge of the goal's success radius
    flight_time: float | None = None  # simulated seconds (None: a row recorded before it was kept)
    physics: dict[str, float] | None = None  # what the episode flew, where the dynamics randomize it
    tilt: dict[str, float] | None = None  # the airframe's max_deg and mean_deg tilt, where the vehicle tilts

    @property
    def success(self) -> bool:
        return self.outcome == "success"


def episode_outcome(info: dict, i: int | np.integer | None = None) -> str:
    """How an episode ended, from the env's final ``info`` (a vector env's with the env's index ``i``):
    "success" (reached the goal), "collision" or "timeout" (truncated)."""
    success, collision = (
        (info["is_success"], info["collision"]) if i is None else (info["is_success"][i], info["collision"][i])
    )
    return "success" if success else "collision" if collision else "timeout"


def run_episodes(
    policy: Policy,
    cfg: NavConfig,
    episodes: int,
    seed: int = 0,
    num_envs: int = 16,
    latency: LatencySource | None = None,
    backend: str = "embedded",
    dynamics: Any = None,
) -> Iterator[EpisodeResult]:
    """Play ``episodes`` seeded episodes in a vector env; yield each result as it ends. ``latency`` (fixed or
    replay): every action lands a delay drawn from it, with a generator per episode seeded by the episode's
    seed, so two policies meet the same delays episode by episode. ``backend``: the simulator (``embedded`` or
    ``mujoco``, with ``dynamics``: a dynamics TOML or config); the same seeds give the same episodes (arena, start,
    goal) on both."""
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    n = min(num_envs, episodes)
    env = NavVectorEnv(n, config=cfg, autoreset_mode=AutoresetMode.DISABLED, backend=backend, dynamics=dynamics)
    assigned = np.arange(n)  # episode index per env, -1 when idle
    obs, _ = env.reset(seed=[seed + int(j) for j in assigned])
    rngs = [latency.episode_generator(seed + int(j)) for j in assigned] if latency is not None else []
    returns = np.zeros(n)
    next_episode = n
    while (assigned >= 0).any():
        if latency is not None:
            env.set_latency(np.array([latency.delay_from(r) for r in rngs]))
        obs, reward, terminated, truncated, info = env.step(policy(obs))
        returns += reward
        done = (terminated | truncated) & (assigned >= 0)
        if not done.any():
            continue
        mask = np.zeros(n, bool)
        seeds: list[int | None] = [None] * n
        for i in np.flatnonzero(done):
            outcome = episode_outcome(info, i)
            yield EpisodeResult(
                episode=int(assigned[i]),
                seed=seed + int(assigned[i]),
                zone=int(info["zone"][i]),
                outcome=outcome,
                steps=int(info["steps"][i]),
                episode_return=float(returns[i]),
                path_length=float(info["path_length"][i]),
                start_distance=float(info["start_distance"][i]),
                straight_distance=float(info["start_distance"][i]) - cfg.task.success_radius,
                flight_time=float(info["flight_time"][i]),
                physics={k: float(v[i]) for k, v in info["physics"].items()} if "physics" in info else None,
                tilt={k: float(v[i]) for k, v in info["tilt"].items()} if "tilt" in info else None,
            )
            returns[i] = 0.0
            if next_episode < episodes:
                assigned[i], seeds[i], mask[i] = next_episode, seed + next_episode, True
                if latency is not None:
                    rngs[i] = latency.episode_generator(seed + next_episode)
                next_episode += 1
            else:
                assigned[i] = -1
        if mask.any():
            obs, _ = env.reset(seed=seeds, options={"reset_mask": mask})


# what a model card or a training log keeps of a summary (summarize gives more)
HEADLINE_FIELDS = (
    "success_rate",
    "success_ci95",
    "collision_rate",
    "timeout_rate",
    "mean_return",
    "mean_steps",
    "path_efficiency",
    "success_rate_by_zone",
)


def summarize(results: list[EpisodeResult]) -> dict:
    """Rates with Wilson 95% intervals, mean return, steps and path efficiency."""
    n = len(results)
    outcomes = [r.outcome for r in results]
    out: dict = {"episodes": n}
    for name in ("success", "collision", "timeout"):
        k = outcomes.count(name)
        lo, hi = wilson_interval(k, n)
        out[f"{name}_rate"], out[f"{name}_ci95"] = k / n if n else 0.0, [lo, hi]
    out["mean_return"] = float(np.mean([r.episode_return for r in results])) if n else 0.0
    out["mean_steps"] = float(np.mean([r.steps for r in results])) if n else 0.0
    succ = [r for r in results if r.success]
    out["path_efficiency"] = (
        float(np.mean([r.path_length / max(r.straight_distance, 1e-9) for r in succ])) if succ else None
    )
    # time to goal and path length of the successful flights: what latency changes before it costs a crash
    timed = [r.flight_time for r in succ if r.flight_time is not None]
    out["mean_time_to_goal_s"] = float(np.mean(timed)) if timed else None
    out["mean_path_length_m"] = float(np.mean([r.path_length for r in succ])) if succ else None
    zones = sorted({r.zone for r in results})
    out["success_rate_by_zone"] = {str(z): float(np.mean([r.success for r in results if r.zone == z])) for z in zones}
    return out


def episode_row(result: EpisodeResult) -> dict:
    """An episode as a dict (a report's or a run log's row); ``physics`` only where the episode drew its physics,
    ``tilt`` only where the vehicle tilts."""
    row = asdict(result)
    for key in ("physics", "tilt"):
        if row[key] is None:
            del row[key]
    return row


def as_rows(results: list[EpisodeResult]) -> list[dict]:
    """One :func:`episode_row` per episode, in episode order."""
    return [episode_row(r) for r in sorted(results, key=lambda r: r.episode)]


def flat_row(row: dict) -> dict:
    """An :func:`as_rows` row with its ``physics`` and ``tilt`` as ``physics_<name>`` and ``tilt_<name>`` columns
    (a CSV row)."""
    nested = {"physics", "tilt"}
    flat = {k: v for k, v in row.items() if k not in nested}
    for key in sorted(nested):
        flat |= {f"{key}_{k}": v for k, v in (row.get(key) or {}).items()}
    return flat
