"""Checks of network addresses a user gives (standard library only)."""

from __future__ import annotations

import os
import socket

from airq_cli.contract import UserError


def ray_environment() -> None:
    """Set before Ray is imported (it reads them then), unless the user set them. Ray 2.60 authenticates drivers
    by token (a driver joining a `ray start` cluster needs RAY_AUTH_MODE=token). Ray runs its workers at niceness
    15 by default; airq's workers do the run's work (trials, learner, actors), so they get the CPU like the driver
    (RayConfig reads RAY_<name> when Ray starts)."""
    os.environ.setdefault("RAY_AUTH_MODE", "token")
    os.environ.setdefault("RAY_worker_niceness", "0")


def check_ray_head(address: str, error: type[UserError] = UserError, timeout_s: float = 5.0) -> None:
    """A one-line error for a Ray head address nothing answers at (``HOST:PORT``; ``auto`` passes), before
    Ray's own minute of retries. ``error``: the caller's UserError subclass."""
    if address == "auto":
        return
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise error(f"--address {address!r}: expected HOST:PORT of a Ray head (ray start --head), or auto")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            pass
    except OSError as e:
        raise error(f"--address {address}: no Ray head answers there ({e.strerror or e})") from None
