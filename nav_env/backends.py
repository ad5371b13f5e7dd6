"""Simulator backends behind one factory: the embedded simulator (default) or AirSim."""

from __future__ import annotations

from typing import Any

from nav_env.config import NavConfig

BACKENDS = ("embedded", "airsim")


def make_env(cfg: NavConfig, backend: str = "embedded", render_mode: str | None = None, **backend_options: Any):
    """A single env for ``cfg`` on ``backend``; ``backend_options`` go to the backend (e.g. the
    AirSim host and port). Both backends give the same observation, actions and episode logic."""
    if backend == "embedded":
        if backend_options:
            raise ValueError(f"the embedded simulator takes no backend options, got {sorted(backend_options)}")
        from nav_env.env import NavEnv

        return NavEnv(config=cfg, render_mode=render_mode)
    if backend == "airsim":
        try:
            from nav_env.airsim import AirSimNavEnv
        except ImportError as e:
            raise RuntimeError(f"the AirSim backend is not available: {e}") from None
        return AirSimNavEnv(config=cfg, render_mode=render_mode, **backend_options)
    raise ValueError(f"unknown simulator backend {backend!r} (known: {', '.join(BACKENDS)})")
