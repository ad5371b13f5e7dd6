"""deployment_study.dynamics_gap's latency sweep records the airframe's tilt and the kinds of failure per delay,
and a rerun reads finished cells back instead of flying them again."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MODEL = str(REPO / "models" / "policy1_quadrotor_fp32.onnx")


def gap(out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "deployment_study.dynamics_gap", "--models", MODEL, "--levels", "default",
         "--episodes", "3", "--sweep-ms", "0", "300", "--sweep-episodes", "3", "--sweep-models", MODEL,
         "--out", str(out)],
        capture_output=True, text=True, check=False, cwd=REPO,
    )  # fmt: skip


def test_the_sweep_reports_the_tilt_on_the_quadrotor_only(tmp_path):
    done = gap(tmp_path)
    assert done.returncode == 0, done.stderr
    result = json.loads((tmp_path / "gap.json").read_text())
    assert [row["delay_ms"] for row in result["sweep"]] == [0, 300]
    for row in result["sweep"]:
        point_mass, quadrotor = row["compare"]["first"], row["compare"]["second"]
        assert point_mass["tilt_mean_deg"] is None
        assert 0.5 < quadrotor["tilt_mean_deg"] < quadrotor["tilt_max_deg"] < 60.0
        assert 0.0 <= quadrotor["collision"] <= 1.0
    cells = [json.loads(p.read_text())["cell"] for p in (tmp_path / "cells").glob("*mujoco*.json")]
    assert cells and all(len(c["tilt_max_deg"]) == len(c["success"]) == 3 for c in cells)
    assert "mujoco tilt: mean / largest per episode (deg)" in (tmp_path / "gap.md").read_text()
    before = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "cells").iterdir()}
    again = gap(tmp_path)
    assert again.returncode == 0, again.stderr
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "cells").iterdir()} == before  # read back, not flown
    assert json.loads((tmp_path / "gap.json").read_text())["sweep"] == result["sweep"]
