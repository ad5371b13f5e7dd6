"""Native vector env: N navigation episodes stepped in one batch of numpy, with autoreset."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from nav_env.arena import sample_episode
from nav_env.backends import simulator
from nav_env.common import ZoneCurriculum, action_space, check_latency, commands, observation_space, resolve_config
from nav_env.config import NavConfig
from nav_env.render import render_frame
from nav_env.sim import BatchSim

INFO_KEYS = (
    "is_success",
    "collision",
    "distance_to_goal",
    "start_distance",
    "path_length",
    "steps",
    "flight_time",
    "zone",
)


class NavVectorEnv(VectorEnv):
    """``num_envs`` copies of :class:`nav_env.env.NavEnv` (see its docstring for the contract).

    Env ``i`` reset with seed ``s`` plays exactly the episode ``NavEnv`` plays after ``reset(seed=s)``;
    ``reset(seed=s)`` seeds env ``i`` with ``s + i`` (Gymnasium's convention) and a list seeds each.

    ``autoreset_mode``: ``NEXT_STEP`` (Gymnasium's default: the step after an episode ends resets
    that env and ignores its action), ``SAME_STEP`` (the env resets in the step that ended it; the
    final observation is in ``info["final_obs"]``, rows valid where ``info["_final_obs"]``), or
    ``DISABLED`` (reset envs yourself with ``reset(seed=..., options={"reset_mask": mask})``).

    ``info`` holds arrays of length ``num_envs`` for ``is_success``, ``collision``,
    ``distance_to_goal``, ``start_distance``, ``path_length``, ``steps``, ``flight_time`` and ``zone`` (the
    ``mujoco`` backend adds ``tilt``, a dict of ``max_deg`` and ``mean_deg`` arrays, and ``physics`` where it
    randomizes); on the step that ends an episode they describe that episode.

    ``backend`` and ``dynamics``: the simulator, as for ``NavEnv`` (## Backends); ``mujoco`` flies every env in
    one MuJoCo model, its flight controller vectorized over them.

    ``set_latency(delay_s, period_s=None)`` takes a number or one per env (``NavEnv``'s ## Latency):
    env ``i`` with delays ``d`` flies exactly what ``NavEnv`` flies with the same delays.
    """

    metadata = {"render_modes": ["rgb_array"], "autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(
        self,
        num_envs: int = 1,
        level: str = "default",
        config: NavConfig | None = None,
        overrides: dict[str, Any] | None = None,
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
        render_mode: str | None = None,
        backend: str = "embedded",
        dynamics: Any = None,
    ):
        if not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive integer, got {num_envs!r}")
        self.cfg = resolve_config(level, config, overrides)
        self.num_envs = int(num_envs)
        self.autoreset_mode = AutoresetMode(autoreset_mode)
        self.metadata = {**self.metadata, "autoreset_mode": self.autoreset_mode}
        self.render_mode = render_mode
        self.single_observation_space = observation_space(self.cfg)
        self.single_action_space = action_space(self.cfg)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.curriculum = ZoneCurriculum.from_config(self.cfg)
        self.backend = backend
        self.sim: BatchSim = simulator(self.cfg, self.num_envs, backend, dynamics)
        self._delay: np.ndarray | None = None  # lockstep
        self._period: np.ndarray | None = None
        self._rngs: list[np.random.Generator] = [seeding.np_random()[0] for _ in range(self.num_envs)]
        self._needs_reset = np.ones(self.num_envs, dtype=bool)  # NEXT_STEP bookkeeping
        self._ready = False
        self._all = np.ones(self.num_envs, dtype=bool)

    # ------------------------------------------------------------------ reset
    def reset(
        self, *, seed: int | Sequence[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        options = options or {}
        mask = np.asarray(options.get("reset_mask", self._all), dtype=bool)
        if mask.shape != (self.num_envs,):
            raise ValueError(f"options['reset_mask'] must have shape ({self.num_envs},), got {mask.shape}")
        if not self._ready and not mask.all():
            raise RuntimeError("the first reset() must reset every env")
        if seed is None:
            seeds: list[int | None] = [None] * self.num_envs
        elif isinstance(seed, (int, np.integer)):
            seeds = [int(seed) + i for i in range(self.num_envs)]
        else:
            seeds = list(seed)
            if len(seeds) != self.num_envs:
                raise ValueError(f"seed list must have {self.num_envs} entries, got {len(seeds)}")
        idx = np.flatnonzero(mask)
        for i in idx:
            env_seed = seeds[i]
            if env_seed is not None:
                self._rngs[i] = seeding.np_random(int(env_seed))[0]
        self._reset_envs(idx, options.get("zone"))
        self._ready = True
        obs = self.sim.observe()
        return obs, self._info(np.zeros(self.num_envs, bool), np.zeros(self.num_envs, bool))

    def _reset_envs(self, idx: np.ndarray, zone: int | None = None) -> None:
        if zone is None and self.cfg.curriculum.enabled:
            zone = self.curriculum.zone
        episodes = [sample_episode(self._rngs[i], self.cfg, zone) for i in idx]
        self.sim.load(idx, episodes)
        self._needs_reset[idx] = False

    def set_latency(self, delay_s: float | np.ndarray = 0.0, period_s: float | np.ndarray | None = None) -> None:
        """Delays (and step lengths) of every following step, a number or one per env."""
        self._delay, self._period = check_latency(delay_s, period_s, self.num_envs)

    # ------------------------------------------------------------------ step
    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        if not self._ready:
            raise RuntimeError("step() called before reset()")
        cmd = commands(actions, self.cfg, self.num_envs)
        reward, terminated, truncated, collision, success = self.sim.step(cmd, self._delay, self._period)
        mode = self.autoreset_mode

        if mode is AutoresetMode.NEXT_STEP and self._needs_reset.any():
            # these envs finished last step: this step only resets them
            idx = np.flatnonzero(self._needs_reset)
            self._reset_envs(idx)
            reward[idx] = 0.0
            terminated[idx] = truncated[idx] = collision[idx] = success[idx] = False

        done = terminated | truncated
        info = self._info(collision, success)
        if done.any():
            idx = np.flatnonzero(done)
            if self.cfg.curriculum.enabled:
                for i in idx:
                    self.curriculum.record(int(self.sim.zone[i]), bool(success[i]))
            if mode is AutoresetMode.NEXT_STEP:
                self._needs_reset[idx] = True
            elif mode is AutoresetMode.SAME_STEP:
                info["final_obs"] = self.sim.observe()
                info["_final_obs"] = done
                self._reset_envs(idx)
                info["final_obs"][~done] = 0.0
        obs = self.sim.observe()
        return obs, reward, terminated, truncated, info

    def _info(self, collision: np.ndarray, success: np.ndarray) -> dict[str, Any]:
        s = self.sim
        info: dict[str, Any] = {
            "is_success": success,
            "collision": collision,
            "distance_to_goal": s.prev_dist.copy(),
            "start_distance": s.start_dist.copy(),
            "path_length": s.path_length.copy(),
            "steps": s.steps.copy(),
            "flight_time": s.flight_time.copy(),
            "zone": s.zone.copy(),
        }
        for k in INFO_KEYS:
            info["_" + k] = self._all
        physics = s.episode_physics()
        if physics is not None:  # what each env flew this step (copied before any autoreset draws anew)
            info["physics"], info["_physics"] = physics.arrays(), self._all
        tilt = s.episode_tilt()
        if tilt is not None:  # the airframe's largest and mean tilt so far this episode (deg)
            info["tilt"], info["_tilt"] = tilt, self._all
        return info

    def render(self) -> list[np.ndarray] | None:  # type: ignore[override]  # one RGB frame per env
        if self.render_mode != "rgb_array":
            return None

        return [render_frame(self.cfg, self.sim, i, None) for i in range(self.num_envs)]
