"""The closed loop for one policy: env observation -> bridge -> action -> env, episode after episode.

Episode ``j`` is ``reset(seed=seed + j)``, so every policy meets the same episodes.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from hil.client import BridgeClient
from nav_env.config import NavConfig
from nav_env.backends import make_env
from nav_env.rollout import EpisodeResult

STATUS_PERIOD_S = 0.5  # how often device memory is sampled during a run


@dataclass
class LoopRecord:
    """Everything measured in one policy's run."""

    episodes: list[EpisodeResult] = field(default_factory=list)
    rtt_ns: list[int] = field(default_factory=list)
    infer_ns: list[int] = field(default_factory=list)
    seqs: list[int] = field(default_factory=list)
    loop_s: float = 0.0  # wall time of the flying (first act to last env step of each episode)
    deadline_misses: int = 0
    memory: list[tuple[float, int, int]] = field(default_factory=list)  # (t since start, rss, peak)
    trajectories: dict[int, np.ndarray] = field(default_factory=dict)
    frames: dict[int, np.ndarray] = field(default_factory=dict)
    status_start: dict = field(default_factory=dict)
    status_end: dict = field(default_factory=dict)


def run_closed_loop(
    client: BridgeClient,
    cfg: NavConfig,
    episodes: int,
    seed: int,
    rate_hz: float | None = None,
    keep_trajectories: int = 3,
    on_episode: Callable[[EpisodeResult, LoopRecord], None] | None = None,
    env=None,
) -> LoopRecord:
    """Fly ``episodes`` seeded episodes; ``env`` defaults to the embedded simulator for ``cfg``."""
    env = env if env is not None else make_env(cfg, render_mode="rgb_array")
    rec = LoopRecord()
    period_ns = int(1e9 / rate_hz) if rate_hz else 0
    t_start = time.perf_counter()
    rec.status_start = client.status()
    next_status = t_start + STATUS_PERIOD_S
    _sample_memory(rec, rec.status_start, t_start)
    for j in range(episodes):
        obs, info = env.reset(seed=seed + j)
        client.reset()
        ret, done = 0.0, False
        t_ep = time.perf_counter_ns()
        deadline = t_ep + period_ns
        while not done:
            result = client.act(obs)
            obs, reward, terminated, truncated, info = env.step(result.action)
            ret += reward
            done = terminated or truncated
            rec.rtt_ns.append(result.rtt_ns)
            rec.infer_ns.append(result.infer_ns)
            rec.seqs.append(result.seq)
            if period_ns:
                now = time.perf_counter_ns()
                if now > deadline:
                    rec.deadline_misses += 1
                    deadline = now + period_ns  # re-phase after an overrun instead of bursting to catch up
                else:
                    _sleep_until(deadline)
                    deadline += period_ns
        rec.loop_s += (time.perf_counter_ns() - t_ep) / 1e9
        outcome = "success" if info["is_success"] else "collision" if info["collision"] else "timeout"
        ep = EpisodeResult(
            episode=j, seed=seed + j, zone=info["zone"], outcome=outcome, steps=info["steps"], episode_return=ret,
            path_length=info["path_length"], start_distance=info["start_distance"],
            straight_distance=info["start_distance"] - cfg.task.success_radius,
        )
        rec.episodes.append(ep)
        if j < keep_trajectories and hasattr(env, "trajectory"):
            rec.trajectories[j] = np.array(env.trajectory)
            frame = env.render()
            if frame is not None:
                rec.frames[j] = frame
        now = time.perf_counter()
        if now >= next_status or j == episodes - 1:
            _sample_memory(rec, client.status(), t_start)
            next_status = now + STATUS_PERIOD_S
        if on_episode:
            on_episode(ep, rec)
    rec.status_end = client.status()
    return rec


def _sample_memory(rec: LoopRecord, status: dict, t_start: float) -> None:
    rec.memory.append((time.perf_counter() - t_start, int(status.get("rss_bytes") or 0), int(status.get("peak_rss_bytes") or 0)))


def _sleep_until(deadline_ns: int) -> None:
    # sleep most of the wait, then spin: time.sleep overshoots by tens of microseconds
    remaining = deadline_ns - time.perf_counter_ns()
    if remaining > 300_000:
        time.sleep((remaining - 200_000) / 1e9)
    while time.perf_counter_ns() < deadline_ns:
        pass
