"""Simulator backends behind one factory: the embedded simulator (default), MuJoCo rigid-body flight, AirSim, or a
real autopilot's vehicle (ArduPilot / PX4 over MAVLink, flown by the bridge; nav_env.autopilot)."""

from __future__ import annotations

from typing import Any

from nav_env.config import NavConfig
from nav_env.simulators import SIM_BACKENDS

BACKENDS = ("embedded", "mujoco", "airsim", "autopilot")
__all__ = ["BACKENDS", "SIM_BACKENDS", "make_env"]


def make_env(cfg: NavConfig, backend: str = "embedded", render_mode: str | None = None, **backend_options: Any):
    """A single env for ``cfg`` on ``backend``; ``backend_options`` go to the backend (``dynamics`` for
    ``mujoco``; the AirSim host and port; ``telemetry`` for ``autopilot``). Every backend gives the same observation,
    actions and episode logic."""
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
    if backend == "autopilot":
        from nav_env.autopilot import AutopilotNavEnv

        return AutopilotNavEnv(config=cfg, render_mode=render_mode, **backend_options)
    raise ValueError(f"unknown simulator backend {backend!r} (known: {', '.join(BACKENDS)})")
