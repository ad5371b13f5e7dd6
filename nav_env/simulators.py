"""The simulators nav_env's own envs (NavEnv, NavVectorEnv) run in-process: the embedded one and MuJoCo's."""

from __future__ import annotations

from typing import Any

from nav_env.config import ConfigError, NavConfig
from nav_env.sim import BatchSim, SingleSim

SIM_BACKENDS = ("embedded", "mujoco")


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
