"""Every shipped study config parses and dry-runs (the cluster ones are only ever dry-run here): its trials,
their budgets and a cost estimate from measured rates, without starting Ray."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from quarl.config import load_config

REPO = Path(__file__).resolve().parents[2]
CONFIGS = sorted((REPO / "configs" / "quarl").glob("*.toml"))


def dry_run(config: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-m", "quarl", "run", str(config), "--dry-run", "--out", str(out), *extra],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize("config", CONFIGS, ids=[c.stem for c in CONFIGS])
def test_config_dry_runs_with_every_trial_and_a_cost(config, tmp_path):
    from quarl.tune_runner import plan_study

    study = load_config(config)
    lines = plan_study(study, tmp_path / "out").lines()  # what `python -m quarl run CONFIG --dry-run` prints
    for trial in study.trials():
        row = next((line for line in lines if line.startswith(trial.name + " ")), None)
        assert row is not None, f"{trial.name} missing from the dry run"
        assert row.split()[-1] == "new"
    assert any(line.startswith(f"estimate for the {len(study.trials())} trials to run:") for line in lines)
    assert not any("no measured rate" in line for line in lines)
    assert not (tmp_path / "out").exists(), "a dry run must not create the study"


def test_atari_cluster_config_is_the_seeds_table(tmp_path):
    study = load_config(REPO / "configs" / "quarl" / "atari_cluster.toml")
    games = {c.env_id for c in study.cells}
    assert games == {
        f"{g}NoFrameskip-v4"
        for g in ("Breakout", "SpaceInvaders", "BeamRider", "MsPacman", "Qbert", "Seaquest", "Pong")
    }
    assert {c.algo for c in study.cells} == {"a2c", "dqn", "ppo"} and len(study.seeds) >= 3
    assert all(c.steps is None for c in study.cells)  # the zoo's full budgets


def test_unreachable_cluster_is_one_line_before_anything(tmp_path):
    run = dry_run(REPO / "configs" / "quarl" / "atari_cluster.toml", tmp_path / "out", "--address", "127.0.0.1:9")
    assert run.returncode == 2
    assert run.stderr.strip().count("\n") == 0 and run.stderr.startswith("error: --address 127.0.0.1:9")
