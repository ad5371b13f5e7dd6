"""Baseline policies that act on the flat observation alone: a scripted go-to-goal heuristic with
depth-based obstacle avoidance, and uniform random actions. Both take a batch (n, obs_dim)."""

from __future__ import annotations

import math

import numpy as np

from nav_env.actions import ACTION_NAMES, N_DISCRETE_ACTIONS
from nav_env.config import NavConfig

A = {name: i for i, name in enumerate(ACTION_NAMES)}
FORWARD = np.array([A["forward 1"], A["forward 2"], A["forward 3"], A["forward 4"], A["forward 5"]])
YAW_LEFT = np.array([A["yaw left 15"], A["yaw left 30"], A["yaw left 45"], A["yaw left 60"], A["yaw left 90"]])
YAW_RIGHT = np.array([A["yaw right 15"], A["yaw right 30"], A["yaw right 45"], A["yaw right 60"], A["yaw right 90"]])
YAW_DEG = np.array([15.0, 30.0, 45.0, 60.0, 90.0])


class RandomPolicy:
    name = "random"

    def __init__(self, cfg: NavConfig, seed: int = 0):
        self.rng = np.random.default_rng(seed)

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        return self.rng.integers(0, N_DISCRETE_ACTIONS, size=len(obs))


class HeuristicPolicy:
    """Face the most goal-ward open corridor, then fly forward at a speed the free range allows.

    Per image column it takes the obstacle range from the rows just above the horizon (which see
    neither floor nor, within range, ceiling), robust to dropout (zeros ignored) and noise (the
    second-nearest reading). A candidate heading (one per column) is open when no depth point lies
    in a corridor of half-width ``half_width`` along it for ``lookahead`` metres (or up to the goal).
    """

    name = "heuristic"

    def __init__(self, cfg: NavConfig, lookahead: float = 4.0, half_width: float = 0.75):
        c = cfg.camera
        self.cfg, self.w, self.h = cfg, c.width, c.height
        self.max_range = c.max_range
        self.lookahead, self.half_width = lookahead, half_width
        f = (c.width / 2) / math.tan(math.radians(c.fov_deg) / 2)
        self.col_angle = np.degrees(np.arctan((c.width / 2 - (np.arange(c.width) + 0.5)) / f))
        rad = np.radians(self.col_angle)
        self.col_cos = np.cos(rad)
        # rel[j, i]: angle of column i seen from candidate heading j
        rel = rad[None, :] - rad[:, None]
        self.rel_cos, self.rel_sin = np.cos(rel), np.abs(np.sin(rel))
        top = max(0, c.height // 2 - max(2, c.height // 8))
        self.rows = slice(top, c.height // 2)
        self.dist_scale = math.hypot(cfg.arena.size_x, cfg.arena.size_y)
        self.half_fov = c.fov_deg / 2

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        n = len(obs)
        band = obs[:, : self.w * self.h].reshape(n, self.h, self.w)[:, self.rows, :]
        band = np.where(band > 0, band, 1.0)  # dropout reads 0: treat as no return
        planar = np.sort(band, axis=1)[:, min(1, band.shape[1] - 1), :] * self.max_range
        ray = planar / self.col_cos  # along-ray range per column
        # free[k, j]: how far heading j is clear of every depth point within the corridor
        fwd = ray[:, None, :] * self.rel_cos[None]
        lateral = ray[:, None, :] * self.rel_sin[None]
        blocks = (lateral < self.half_width) & (fwd > 0)
        free = np.where(blocks, fwd, self.max_range).min(axis=2)
        feats = obs[:, self.w * self.h :]
        goal_dist = feats[:, 0] * self.dist_scale
        bearing = np.degrees(np.arctan2(feats[:, 1], feats[:, 2]))
        need = np.minimum(self.lookahead, goal_dist + 0.5)[:, None]
        cost = np.abs(self.col_angle[None, :] - np.clip(bearing, -self.half_fov, self.half_fov)[:, None])
        cost = np.where(free > need, cost, np.inf)
        best = np.argmin(cost, axis=1)
        has_open = np.isfinite(cost[np.arange(n), best])
        target = np.where(has_open, self.col_angle[best], 0.0)
        # goal behind the field of view: turn toward it first
        target = np.where(np.abs(bearing) > self.half_fov + 10, bearing, target)

        ahead = free[:, self.w // 2 - 1 : self.w // 2 + 1].min(axis=1)
        speed_idx = np.clip(((np.minimum(ahead, goal_dist + 1.0) - 1.5) / 1.5).astype(int), 0, 4)
        yaw_idx = np.clip(np.searchsorted(YAW_DEG, np.abs(target) * 0.7), 0, 4)
        actions = np.where(target > 0, YAW_LEFT[yaw_idx], YAW_RIGHT[yaw_idx])
        go = (np.abs(target) < 8.0) & has_open & (ahead > 1.2)
        actions = np.where(go, FORWARD[speed_idx], actions)
        # boxed in: nothing open ahead: turn hard toward the side with more room
        trapped = ~has_open & (np.abs(bearing) <= self.half_fov + 10)
        left_space = free[:, : self.w // 2].max(axis=1) > free[:, self.w // 2 :].max(axis=1)
        actions = np.where(trapped, np.where(left_space, YAW_LEFT[4], YAW_RIGHT[4]), actions)
        return actions.astype(np.int64)


BASELINES = {"heuristic": HeuristicPolicy, "random": RandomPolicy}
