"""Checkpoints are resumable: --resume continues the step count, the curriculum and the metrics."""

from __future__ import annotations

import json

from policy_helpers import TINY_ARGS

from policies.errors import run_cli
from policies.train import main


def test_resume_continues_from_latest_checkpoint(tmp_path, capsys):
    run = tmp_path / "run"
    assert run_cli(main, [*TINY_ARGS, "--steps", "2048", "--out", str(run)]) == 0
    first = json.loads((run / "state.json").read_text())
    assert first["timesteps"] >= 2048 and first["restarts"] == 0
    evals_before = len(json.loads((run / "metrics.json").read_text())["evals"])

    # without --resume an existing run is never overwritten
    assert run_cli(main, [*TINY_ARGS, "--steps", "4096", "--out", str(run)]) == 2
    assert "--resume" in capsys.readouterr().err

    assert run_cli(main, ["--resume", "--out", str(run), "--steps", "4096", "--progress", "false"]) == 0
    state = json.loads((run / "state.json").read_text())
    assert state["restarts"] == 1 and state["timesteps"] >= 4096
    metrics = json.loads((run / "metrics.json").read_text())
    assert len(metrics["evals"]) > evals_before
    assert metrics["evals"][-1]["timesteps"] >= 4096
    assert metrics["train_wall_s"] >= first["train_wall_s"]  # wall time accumulates across restarts


def test_resume_without_checkpoint_is_a_user_error(tmp_path, capsys):
    assert run_cli(main, ["--resume", "--out", str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "\n" not in err
