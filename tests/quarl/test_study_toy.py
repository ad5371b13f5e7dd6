"""The study end to end at toy scale (the CI run): configs/quarl/toy.toml (CartPole, PPO and A2C, two
seeds, two bit widths) through a real local Ray Tune, then the report: its table, CSV, figures and reading."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from quarl.results import TrialResult

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "configs" / "quarl" / "toy.toml"
POLICIES = {"fp32", "fp16", "int8", "int8-w7", "int8-dynamic", "ptq-8bit", "ptq-4bit", "qat-8bit", "qat-4bit"}


def quarl(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-m", "quarl", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("toy") / "study"
    run = quarl("run", str(CONFIG), "--out", str(out))
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    return out


def test_every_trial_runs_through_tune_and_records_every_policy(study):
    record = json.loads((study / "study.json").read_text())
    assert record["status"] == "done"
    assert record["counts"] == {"trials": 4, "done": 4, "failed": 0, "unfinished": 0}
    names = sorted(t["name"] for t in record["trials"])
    assert names == ["CartPole-v1_a2c_s0", "CartPole-v1_a2c_s1", "CartPole-v1_ppo_s0", "CartPole-v1_ppo_s1"]
    for name in names:
        result = TrialResult.load(study / "trials" / name / "trial.json")
        assert {p.name for p in result.policies} == POLICIES
        assert all(len(p.returns) == 10 for p in result.policies)
        assert (study / "trials" / name / "log.txt").stat().st_size > 0
        for f in ("fp32", "fp16", "int8", "int8-w7", "int8-dynamic"):
            assert (study / "trials" / name / f"{f}.onnx").is_file()
    # the gate: PPO's 25k steps reach CartPole's 475 on both seeds, A2C's 4k cannot
    for seed in (0, 1):
        assert TrialResult.load(study / "trials" / f"CartPole-v1_ppo_s{seed}" / "trial.json").baseline.passed
        assert not TrialResult.load(study / "trials" / f"CartPole-v1_a2c_s{seed}" / "trial.json").baseline.passed


def test_rerun_resumes_without_running_anything_again(study):
    stamps = {p: p.stat().st_mtime_ns for p in (study / "trials").rglob("stages/*.json")}
    run = quarl("run", str(CONFIG), "--out", str(study))
    assert run.returncode == 0, run.stderr[-2000:]
    assert {p: p.stat().st_mtime_ns for p in (study / "trials").rglob("stages/*.json")} == stamps


def test_report_table_figures_and_reading(study, tmp_path):
    out = tmp_path / "report"
    run = quarl("report", str(study), "--out", str(out))
    assert run.returncode == 0, run.stderr[-2000:]
    table = (out / "table2.md").read_text()
    ppo = next(line for line in table.splitlines() if line.startswith("| CartPole-v1 | PPO"))
    a2c = next(line for line in table.splitlines() if line.startswith("| CartPole-v1 | A2C"))
    assert "baseline failed" in a2c and "baseline failed" not in ppo
    assert "500.0 / 500.0 / 500.0" in ppo  # the seed's CartPole PPO row beside ours
    rows = list(csv.DictReader((out / "table2.csv").open()))
    assert {(r["env_id"], r["algo"]) for r in rows} == {("CartPole-v1", "ppo"), ("CartPole-v1", "a2c")}
    fp32_means = [
        TrialResult.load(study / "trials" / f"CartPole-v1_ppo_s{s}" / "trial.json").policy("fp32").mean for s in (0, 1)
    ]
    ppo_row = next(r for r in rows if r["algo"] == "ppo")
    assert float(ppo_row["fp32_mean"]) == pytest.approx(sum(fp32_means) / 2, abs=0.01)
    assert ppo_row["status"] != "baseline failed" and ppo_row["seed_fp32"] == "500.0"
    for png in ("reward_vs_bits_CartPole-v1_ppo.png", "weights_CartPole-v1_ppo.png", "weight_widths.png"):
        data = (out / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000, png
    reading = (out / "reading.md").read_text()
    assert "CartPole-v1 PPO" in reading
    assert "Baseline failed" in reading and "CartPole-v1 A2C" in reading
