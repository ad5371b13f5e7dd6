"""Helpers shared by the policies tests (a uniquely named module: test folders are not packages)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Small enough to train in a few seconds on 2 cores; the network is the real Policy I preset.
TINY_ARGS = [
    "--policy",
    "policy1",
    "--algo",
    "ppo",
    "--level",
    "default",
    "--steps",
    "4096",
    "--seed",
    "3",
    "--num-envs",
    "8",
    "--n-steps",
    "128",
    "--batch-size",
    "256",
    "--n-epochs",
    "2",
    "--eval-every",
    "2048",
    "--eval-episodes",
    "8",
    "--checkpoint-every",
    "2048",
    "--progress",
    "false",
]


def run_module(module: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """python -m MODULE ARGS from the repo root, as a user would run it."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    return subprocess.run(
        [sys.executable, "-m", module, *args], cwd=REPO, capture_output=True, text=True, timeout=timeout, env=env
    )
