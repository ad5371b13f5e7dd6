"""scripts/observation_table.py: the observation experiment's arms paired over the same episodes, per training seed
and pooled, and a folder without evaluations is a one-line error."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def write(folder: Path, name: str, outcomes: list[bool]) -> None:
    episodes = [{"episode": j, "outcome": "success" if ok else "collision"} for j, ok in enumerate(outcomes)]
    (folder / f"{name}.json").write_text(json.dumps({"policies": {name: {"episodes": episodes}}}))


def run(folder: Path, runs: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "scripts" / "observation_table.py"), "--dir", str(folder), "--runs", str(runs)],
        capture_output=True, text=True, check=False, cwd=REPO,
    )  # fmt: skip


def test_arms_are_paired_per_seed_and_pooled(tmp_path):
    v1 = [True] * 80 + [False] * 20
    better = [True] * 90 + [False] * 10  # wins the 10 episodes v1 lost from 80 to 89
    for seed, attitude in (("0", better), ("1", v1)):
        write(tmp_path, f"hard_v1_s{seed}_nominal", v1)
        write(tmp_path, f"hard_attitude_s{seed}_nominal", attitude)
    run_dir = tmp_path / "runs" / "hard_v1_s0"
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.json").write_text(json.dumps({"best": {"timesteps": 750_016, "success_rate": 0.79},
                                                      "train_wall_s": 1242.0}))  # fmt: skip
    done = run(tmp_path, tmp_path / "runs")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    seed0 = next(line for line in lines if line.startswith("| hard | Iris (nominal) | 0 |"))
    assert "80.0%" in seed0 and "90.0%" in seed0 and "| +10.0 (" in seed0
    seed1 = next(line for line in lines if line.startswith("| hard | Iris (nominal) | 1 |"))
    assert "| +0.0 (" in seed1
    pooled = next(line for line in lines if line.startswith("| hard | Iris (nominal) | all 2 |"))
    assert "80.0%" in pooled and "85.0%" in pooled and "| +5.0 (" in pooled
    assert "| hard_v1_s0 | 0.75 M, best 79.0%, 20.7 min |" in lines


def test_no_evaluations_is_a_one_line_error(tmp_path):
    done = run(tmp_path, tmp_path)
    assert done.returncode != 0 and done.stderr.strip().count("\n") == 0 and "no evaluations" in done.stderr
