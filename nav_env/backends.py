"""Simulator backends behind one factory: the embedded simulator (default), MuJoCo rigid-body flight, or AirSim."""

from __future__ import annotations

from typing import Any

from nav_env.config import ConfigError, NavConfig
from nav_env.sim import BatchSim, SingleSim

BACKENDS = ("embedded", "mujoco", "airsim")
SIM_BACKENDS = ("embedded", "mujoco")  # the ones nav_env's own envs (NavEnv, NavVectorEnv) run in-process


def simulator(
    cfg: NavConfig, n: int, backend: str = "embedded", dynamics: Any = None, single: bool = False
) -> BatchSim:
    """The batch simulator of ``n`` envs on ``backend``: the embedded one (``single``: its one-env fast path)
    or ``mujoco`` (``dynamics``: a :class:`nav_env.dynamics.config.DynamicsConfig`, a TOML path, or None for
    the shipped Iris)."""
    if backend == "embedded":
        if dynamics is not None:
            raise ConfigError("the embedded simulator has no vehicle dynamics to configure (dynamics= is for 'mujoco')")
        return SingleSim(cfg) if single and n == 1 else BatchSim(cfg, n)
    if backend == "mujoco":
        from nav_env.dynamics.config import DynamicsConfig, load_dynamics

        try:
            from nav_env.dynamics.world import MujocoSim
        except ImportError as e:
            raise ConfigError(str(e)) from None
        if not isinstance(dynamics, DynamicsConfig):
            dynamics = load_dynamics(dynamics)
        return MujocoSim(cfg, n, dynamics)
    raise ConfigError(f"unknown simulator backend {backend!r} (nav_env runs: {', '.join(SIM_BACKENDS)})")


def make_env(cfg: NavConfig, backend: str = "embedded", render_mode: str | None = None, **backend_options: Any):
    """A single env for ``cfg`` on ``backend``; ``backend_options`` go to the backend (``dynamics`` for
    ``mujoco``; the AirSim host and port). Every backend gives the same observation, actions and episode logic."""
    if backend in SIM_BACKENDS:
        unknown = sorted(set(backend_options) - ({"dynamics"} if backend == "mujoco" else set()))
        if unknown:
            raise ValueError(f"the {backend} simulator takes no backend options {unknown}")
        from nav_env.env import NavEnv

        return NavEnv(config=cfg, render_mode=render_mode, backend=backend, **backend_options)
    if backend == "airsim":
        try:
            from nav_env.airsim import AirSimNavEnv
        except ImportError as e:
            raise RuntimeError(f"the AirSim backend is not available: {e}") from None
        return AirSimNavEnv(config=cfg, render_mode=render_mode, **backend_options)
    raise ValueError(f"unknown simulator backend {backend!r} (known: {', '.join(BACKENDS)})")
