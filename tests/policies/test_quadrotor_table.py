"""scripts/quadrotor_table.py: the quadrotor policies' table pairs each comparison over the same episodes and marks
every missed target with by how much."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def report(outcomes: dict[str, list[bool]], latency: str | None = None) -> dict:
    return {
        "latency": {"source": latency} if latency else None,
        "policies": {
            name: {"episodes": [{"episode": j, "outcome": "success" if ok else "collision"} for j, ok in enumerate(o)]}
            for name, o in outcomes.items()
        },
    }


def write(folder: Path, name: str, data: dict) -> None:
    (folder / f"{name}.json").write_text(json.dumps(data))


def run(folder: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "scripts" / "quadrotor_table.py"), "--dir", str(folder)],
        capture_output=True, text=True, check=False, cwd=REPO,
    )  # fmt: skip


def test_targets_met_and_missed(tmp_path):
    n = 1000
    fp32 = [True] * 780 + [False] * 220  # 78%: 2 points under the hard level's 80%
    int8 = fp32[:]  # identical: +0.0
    int8[0] = False
    x500 = [True] * 700 + [False] * 300  # 8 points under the Iris: beyond -5
    kinematic = [True] * 500 + [False] * 500
    names = {
        "policy2_quadrotor_hard_fp32.onnx": fp32,
        "policy2_quadrotor_hard_int8.onnx": int8,
        "policy2_quadrotor_hard_fp16.onnx": fp32,
        "policy2_hard_fp32.onnx": kinematic,
    }
    write(tmp_path, "policy2_hard_nominal", report(names))
    write(tmp_path, "policy2_hard_x500", report({k: x500 for k in names}))
    write(tmp_path, "policy2_hard_pi3b_fp32", report({"policy2_quadrotor_hard_fp32.onnx": fp32}, "fixed:0.4"))
    write(tmp_path, "policy2_hard_pi3b_int8", report({"policy2_quadrotor_hard_int8.onnx": [False] * n}, "fixed:0.3"))
    done = run(tmp_path)
    assert done.returncode == 0, done.stderr
    row = done.stdout.strip().splitlines()[-1].split(" | ")
    assert row[2] == "78.0% **-2.0 vs 80%**"
    assert row[3].startswith("-0.1 (") and "outside" not in row[3]
    assert row[4] == "-"  # no s8s8 file
    assert "**-3.0 beyond -5**" in row[5] and "**-2.9 beyond -5**" in row[6]
    assert row[7] == "78.0% at 0.4 ms: +0.0 (-0.3..+0.3)" and "**74.9 beyond +-3**" in row[8]
    assert row[9] == "policy2_hard_fp32: 50.0% (70.0%)" and row[10].rstrip(" |") == "-"


def test_no_evaluations_is_a_one_line_error(tmp_path):
    done = run(tmp_path)
    assert done.returncode == 2 and done.stderr.strip().count("\n") == 0 and "no evaluations" in done.stderr
