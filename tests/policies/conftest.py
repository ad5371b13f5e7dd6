"""Shared fixtures: one tiny, briefly trained Policy I run (a few thousand steps) per test session."""

from __future__ import annotations

from pathlib import Path

import pytest
from policy_helpers import TINY_ARGS


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> Path:
    from policies.errors import run_cli
    from policies.train import main

    out = tmp_path_factory.mktemp("runs") / "tiny"
    assert run_cli(main, [*TINY_ARGS, "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="session")
def tiny_onnx(tiny_run, tmp_path_factory) -> Path:
    from policies.export import export_run

    out = tmp_path_factory.mktemp("onnx") / "tiny_fp32.onnx"
    export_run(tiny_run, out, eval_episodes=8)
    return out
