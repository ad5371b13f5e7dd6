"""Stable-Baselines3 ``VecEnv`` over nav_env's native batched env.

SB3 does not accept a Gymnasium ``VectorEnv``; wrapping N single envs in ``DummyVecEnv`` would step
them one by one in Python. This adapter keeps the batched simulation and gives SB3 what it expects:
``step_wait`` returns (obs, rewards, dones, infos) with auto-reset in the same step, and each env
that just finished gets ``terminal_observation``, ``TimeLimit.truncated`` (time limit without a
terminal state, so PPO bootstraps from the value), ``is_success`` and a Monitor-style ``episode``
{r, l, t}. Only finished envs get a populated info dict: the others get an empty one, so a step
costs a list of empty dicts rather than N rich ones.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode
from stable_baselines3.common.vec_env import VecEnv
from stable_baselines3.common.vec_env.base_vec_env import VecEnvIndices, VecEnvObs, VecEnvStepReturn

from nav_env.config import NavConfig
from nav_env.latency import LatencySource
from nav_env.vector import NavVectorEnv


class NavSB3VecEnv(VecEnv):
    """``num_envs`` navigation episodes in one :class:`nav_env.NavVectorEnv` (SAME_STEP autoreset).

    ``graduate``: with the curriculum on, once its last goal zone is unlocked the env switches to
    drawing goals uniformly over all zones, which is the distribution policies are evaluated on.
    ``latency``: each step's actions land delays drawn from it (nav_env's set_latency), one per env.
    ``backend``: the simulator (nav_env's ``embedded`` or ``mujoco``); ``dynamics``: its vehicle dynamics (a config or
    a TOML path; None: the backend's default).
    """

    def __init__(
        self,
        num_envs: int,
        cfg: NavConfig,
        graduate: bool = True,
        latency: LatencySource | None = None,
        backend: str = "embedded",
        dynamics: Any = None,
    ):
        self.venv = NavVectorEnv(
            num_envs, config=cfg, autoreset_mode=AutoresetMode.SAME_STEP, backend=backend, dynamics=dynamics
        )
        self.graduate = graduate
        self.latency = latency  # latency-aware training: every env-step's action lands a drawn delay late
        self.graduated = False
        super().__init__(num_envs, self.venv.single_observation_space, self.venv.single_action_space)
        self._actions: np.ndarray | None = None
        self._returns = np.zeros(num_envs, dtype=np.float64)
        self._lengths = np.zeros(num_envs, dtype=np.int64)
        self._t0 = time.perf_counter()

    # --------------------------------------------------------------- curriculum
    @property
    def curriculum_zone(self) -> int:
        """The goal zone being trained on, or -1 once graduated to all zones (or without curriculum)."""
        if self.graduated or not self.venv.cfg.curriculum.enabled:
            return -1
        return int(self.venv.curriculum.zone)

    def set_curriculum_state(self, zone: int, graduated: bool) -> None:
        """Restore the curriculum after a resume."""
        if graduated:
            self._graduate()
        elif self.venv.cfg.curriculum.enabled:
            self.venv.curriculum.zone = int(zone)

    def _graduate(self) -> None:
        cfg = self.venv.cfg
        self.venv.cfg = dataclasses.replace(cfg, curriculum=dataclasses.replace(cfg.curriculum, enabled=False))
        self.graduated = True

    # --------------------------------------------------------------- VecEnv API
    def reset(self) -> VecEnvObs:
        seeds = None if all(s is None for s in self._seeds) else list(self._seeds)
        obs, _ = self.venv.reset(seed=seeds)
        self._reset_seeds()
        self._reset_options()
        self._returns[:] = 0.0
        self._lengths[:] = 0
        self.reset_infos = [{} for _ in range(self.num_envs)]
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = np.asarray(actions).reshape(self.num_envs).astype(np.int64)

    def step_wait(self) -> VecEnvStepReturn:
        if self.latency is not None:
            self.venv.set_latency(self.latency.draw(self.num_envs))
        obs, rewards, terminated, truncated, info = self.venv.step(self._actions)
        self._returns += rewards
        self._lengths += 1
        dones = terminated | truncated
        infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        if dones.any():
            elapsed = round(time.perf_counter() - self._t0, 6)
            final_obs = info["final_obs"]
            for i in np.flatnonzero(dones):
                infos[i] = {
                    "terminal_observation": final_obs[i],
                    "TimeLimit.truncated": bool(truncated[i] and not terminated[i]),
                    "is_success": bool(info["is_success"][i]),
                    "collision": bool(info["collision"][i]),
                    "zone": int(info["zone"][i]),
                    "episode": {"r": float(self._returns[i]), "l": int(self._lengths[i]), "t": elapsed},
                }
            self._returns[dones] = 0.0
            self._lengths[dones] = 0
            if self.graduate and not self.graduated and self.venv.cfg.curriculum.enabled:
                if self.venv.curriculum.zone == len(self.venv.cfg.task.goal_zones) - 1:
                    self._graduate()
        return obs, rewards.astype(np.float32), dones, infos

    def close(self) -> None:
        self.venv.close()

    # The simulation is one batched object: attributes and methods are the vector env's, shared by
    # every index.
    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        value = getattr(self.venv, attr_name)
        return [value for _ in self._get_indices(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        setattr(self.venv, attr_name, value)

    def env_method(self, method_name: str, *method_args, indices: VecEnvIndices = None, **method_kwargs) -> list[Any]:
        result = getattr(self.venv, method_name)(*method_args, **method_kwargs)
        return [result for _ in self._get_indices(indices)]

    def env_is_wrapped(self, wrapper_class: type, indices: VecEnvIndices = None) -> list[bool]:
        return [False for _ in self._get_indices(indices)]

    def seed(self, seed: int | None = None) -> Sequence[int | None]:
        """Seeds for the next reset: env i gets ``seed + i`` (SB3's convention)."""
        return super().seed(seed)

    def _get_indices(self, indices: VecEnvIndices) -> list[int]:
        if indices is None:
            return list(range(self.num_envs))
        if isinstance(indices, int):
            return [indices]
        return list(indices)
