"""Pieces shared by the single and the vector env: spaces, action checking, curriculum."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from nav_env.actions import DISCRETE_ACTIONS, N_DISCRETE_ACTIONS
from nav_env.config import N_STATE_FEATURES, ConfigError, NavConfig, load_level
from nav_env.render import render_frame

if TYPE_CHECKING:
    from nav_env.arena import Episode
    from nav_env.sim import BatchSim

# Gymnasium's reset and step returns, for every single env here: observation, info; observation, reward,
# terminated, truncated, info
ResetReturn = tuple[np.ndarray, dict[str, Any]]
StepReturn = tuple[np.ndarray, float, bool, bool, dict[str, Any]]


def resolve_config(level: str, config: NavConfig | None, overrides: dict | None) -> NavConfig:
    if config is not None:
        if overrides:
            raise ValueError("pass either config or overrides, not both")
        return config
    return load_level(level, overrides)


def observation_space(cfg: NavConfig) -> spaces.Box:
    n_pix = cfg.camera.width * cfg.camera.height
    low = np.zeros(cfg.obs_dim, dtype=np.float32)
    high = np.ones(cfg.obs_dim, dtype=np.float32)
    low[n_pix + 1 : n_pix + 7] = -1.0  # bearing sin/cos, body velocities, yaw rate
    low[n_pix + N_STATE_FEATURES :] = -1.0  # roll, pitch, body rates (observation.attitude)
    return spaces.Box(low, high, dtype=np.float32)


def action_space(cfg: NavConfig) -> spaces.Space:
    if cfg.task.action_type == "discrete":
        return spaces.Discrete(N_DISCRETE_ACTIONS)
    v = cfg.vehicle
    high = np.array([v.max_speed, v.max_speed, v.max_speed, v.max_yaw_rate], dtype=np.float32)
    return spaces.Box(-high, high, dtype=np.float32)


def commands(actions: Any, cfg: NavConfig, n: int) -> np.ndarray:
    """Map a batch of actions to body-frame setpoints (n, 4); raise on anything outside the space."""
    if cfg.task.action_type == "discrete":
        a = np.asarray(actions)
        if a.shape != (n,) or not np.issubdtype(a.dtype, np.integer):
            if a.shape == (n,) and np.issubdtype(a.dtype, np.floating) and np.all(a == np.round(a)):
                a = a.astype(np.int64)
            else:
                raise ValueError(f"actions must be {n} integers in [0, {N_DISCRETE_ACTIONS}), got {actions!r}")
        if np.any((a < 0) | (a >= N_DISCRETE_ACTIONS)):
            bad = a[(a < 0) | (a >= N_DISCRETE_ACTIONS)][0]
            raise ValueError(f"action {bad} is outside Discrete({N_DISCRETE_ACTIONS})")
        return DISCRETE_ACTIONS[a]
    a = np.asarray(actions, dtype=np.float64)
    if a.shape != (n, 4):
        raise ValueError(f"actions must have shape ({n}, 4) [vx, vy, vz, yaw_rate], got {a.shape}")
    v = cfg.vehicle
    high = np.array([v.max_speed, v.max_speed, v.max_speed, v.max_yaw_rate])
    bad = ~np.isfinite(a) | (np.abs(a) > high * (1 + 1e-6))
    if np.any(bad):
        raise ValueError(f"action {a[np.any(bad, axis=1)][0].tolist()} is outside the box bounds +-{high.tolist()}")
    return a


def check_latency(
    delay_s: float | np.ndarray, period_s: float | np.ndarray | None, n: int
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """``set_latency``'s arguments as (n,) arrays (None: lockstep, the vehicle.dt period); ValueError
    naming the problem for a negative or non-finite delay or a period that is not positive and finite."""
    if isinstance(delay_s, float | int) and isinstance(period_s, float | int | None):
        # the loop sets one delay per step: plain numbers need no array checks (a fifth of a step's time)
        if not math.isfinite(delay_s) or delay_s < 0:
            raise ValueError(f"delay_s must be finite and >= 0 seconds, got {delay_s!r}")
        if period_s is not None and (not math.isfinite(period_s) or period_s <= 0):
            raise ValueError(f"period_s must be finite and > 0 seconds, got {period_s!r}")
        return (
            np.full(n, float(delay_s)) if delay_s else None,
            None if period_s is None else np.full(n, float(period_s)),
        )
    delay = np.asarray(delay_s, dtype=np.float64)
    if delay.shape not in ((), (n,)):
        raise ValueError(f"delay_s must be a number or {n} numbers, got shape {delay.shape}")
    if not np.all(np.isfinite(delay)) or np.any(delay < 0):
        raise ValueError(f"delay_s must be finite and >= 0 seconds, got {delay_s!r}")
    period = None
    if period_s is not None:
        period = np.asarray(period_s, dtype=np.float64)
        if period.shape not in ((), (n,)):
            raise ValueError(f"period_s must be a number or {n} numbers, got shape {period.shape}")
        if not np.all(np.isfinite(period)) or np.any(period <= 0):
            raise ValueError(f"period_s must be finite and > 0 seconds, got {period_s!r}")
        period = np.broadcast_to(period, (n,)).copy()
    return (np.broadcast_to(delay, (n,)).copy() if np.any(delay) else None), period


def choose_zone(options: dict, cfg: NavConfig, curriculum: ZoneCurriculum) -> int | None:
    """The goal zone a reset asks for: ``options["zone"]`` (validated), else the curriculum's zone when
    it is enabled, else None (drawn with the episode)."""
    zone = options.get("zone")
    n_zones = len(cfg.task.goal_zones)
    if zone is not None and not (isinstance(zone, (int, np.integer)) and 0 <= zone < n_zones):
        raise ValueError(f"options['zone'] must be an integer in [0, {n_zones}), got {zone!r}")
    if zone is None and cfg.curriculum.enabled:
        zone = curriculum.zone
    return None if zone is None else int(zone)  # a numpy integer from options comes back as an int


class ZoneCurriculum:
    """Air Learning's goal-zone curriculum: start in zone 0, move to the next zone when the success
    rate over the last ``window`` episodes of the current zone reaches ``threshold``."""

    def __init__(self, n_zones: int, window: int, threshold: float):
        self.n_zones, self.window, self.threshold = n_zones, window, threshold
        self.zone = 0
        self._results: deque[bool] = deque(maxlen=window)

    @classmethod
    def from_config(cls, cfg: NavConfig) -> ZoneCurriculum:
        return cls(len(cfg.task.goal_zones), cfg.curriculum.window, cfg.curriculum.threshold)

    def record(self, zone: int, success: bool) -> None:
        if zone != self.zone:
            return
        self._results.append(bool(success))
        if (
            self.zone < self.n_zones - 1
            and len(self._results) == self.window
            and sum(self._results) >= self.threshold * self.window
        ):
            self.zone += 1
            self._results.clear()

    @property
    def success_rate(self) -> float:
        return sum(self._results) / len(self._results) if self._results else 0.0


class TaskEnv(gym.Env):
    """What every single-env backend of the task (NavEnv, AirSimNavEnv, AutopilotNavEnv) does alike: set up the
    level's config, the render mode, the spaces and the goal-zone curriculum; pick a reset's episode; draw the map."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}
    cfg: NavConfig
    curriculum: ZoneCurriculum
    sim: BatchSim  # the backend's simulator, or its bookkeeping copy of the vehicle and the world
    episode: Episode | None
    trajectory: list[np.ndarray]

    def next_episode(
        self, options: dict | None, draw: Callable[[np.random.Generator, NavConfig, int | None], Episode]
    ) -> Episode:
        """``options["episode"]`` (a hand-built scene), else ``draw`` for the zone the options or the curriculum
        ask for, with the env's seeded generator."""
        options = options or {}
        if "episode" in options:
            return options["episode"]
        return draw(self.np_random, self.cfg, choose_zone(options, self.cfg, self.curriculum))

    def render(self) -> np.ndarray | None:  # type: ignore[override]  # an RGB frame, as render_mode promises
        if self.render_mode != "rgb_array":
            return None
        if self.episode is None:
            raise RuntimeError("render() called before reset()")

        return render_frame(self.cfg, self.sim, 0, np.array(self.trajectory))

    def set_up_task(
        self,
        level: str,
        render_mode: str | None,
        config: NavConfig | None,
        overrides: dict | None,
        senses_attitude: bool = True,
    ) -> None:
        """What a backend's ``__init__`` calls first: ``cfg`` (``config``, else the level's with ``overrides``; not
        both), the render mode, the observation and action spaces and the goal-zone curriculum. A backend that does
        not read its vehicle's attitude (``senses_attitude`` False) refuses a level with ``observation.attitude``."""
        self.cfg = resolve_config(level, config, overrides)
        if self.cfg.observation.attitude and not senses_attitude:
            raise ConfigError(
                f"{type(self).__name__} does not read the vehicle's attitude and body rates: fly a level without "
                "observation.attitude"
            )
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"unsupported render_mode {render_mode!r} (supported: 'rgb_array')")
        self.render_mode = render_mode
        self.observation_space = observation_space(self.cfg)
        self.action_space = action_space(self.cfg)
        self.curriculum = ZoneCurriculum.from_config(self.cfg)
