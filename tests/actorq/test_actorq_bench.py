"""actorq.bench on a real local Ray: fp32 and int8 runs of one seed, the paired report; rerun with one seed
more, it keeps the finished runs and resumes an unfinished one from its checkpoint; and a benchmark directory
made with other settings is refused in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BENCH = [sys.executable, "-m", "actorq.bench"]
TINY = [
    "--task", "pendulum", "--actors", "1", "--rollout-steps", "100", "--learning-starts", "200", "--batch-size", "64",
    "--eval-every", "400", "--eval-episodes", "2", "--checkpoint-every", "1", "--no-progress",
]  # fmt: skip


def _run(args: list[str]) -> subprocess.CompletedProcess:
    env = os.environ | {"PYTHONPATH": str(REPO), "RAY_DISABLE_USAGE_STATS": "1"}
    return subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


def test_bench_pairs_seeds_keeps_finished_runs_and_resumes_unfinished_ones(tmp_path):
    out = tmp_path / "bench"
    first = _run([*BENCH, *TINY, "--steps", "400", "--seeds", "0", "--bench-out", str(out)])
    assert first.returncode == 0, first.stderr[-3000:]
    bench = json.loads((out / "bench.json").read_text())
    assert [(r["seed"], r["precision"], r["sitting"]) for r in bench["runs"]] == [
        (0, "fp32", "this run"),
        (0, "int8", "this run"),
    ]
    assert bench["ratios"]["actor_steps_per_s_median"]["per_seed"][0] > 0
    assert bench["final_score_difference"]["n"] == 1 and bench["final_score_difference"]["ci95"] is None
    kept_mtime = (out / "fp32_s0/report.json").stat().st_mtime_ns

    # seed 1's int8 run stopped after its first checkpoint (report.json never written)
    partial = _run([sys.executable, "-m", "actorq.train", *TINY, "--steps", "200", "--seed", "1", "--precision",
                    "int8", "--out", str(out / "int8_s1")])  # fmt: skip
    assert partial.returncode == 0, partial.stderr[-3000:]
    (out / "int8_s1/report.json").unlink()
    state = json.loads((out / "int8_s1/checkpoints/state.json").read_text())
    assert state["env_steps"] == 200

    second = _run([*BENCH, *TINY, "--steps", "400", "--seeds", "0", "1", "--bench-out", str(out)])
    assert second.returncode == 0, second.stderr[-3000:]
    bench = json.loads((out / "bench.json").read_text())
    sittings = {(r["seed"], r["precision"]): r["sitting"] for r in bench["runs"]}
    assert sittings == {(0, "fp32"): "kept", (0, "int8"): "kept", (1, "int8"): "resumed", (1, "fp32"): "this run"}
    assert (out / "fp32_s0/report.json").stat().st_mtime_ns == kept_mtime
    resumed = json.loads((out / "int8_s1/report.json").read_text())
    assert resumed["state"]["env_steps"] == 400
    assert bench["ratios"]["seeds_timed_in_different_sittings"] == [1]
    assert bench["final_score_difference"]["n"] == 2 and len(bench["final_score_difference"]["ci95"]) == 2
    assert "different sittings" in second.stdout

    other = _run([*BENCH, *TINY, "--steps", "800", "--seeds", "0", "--bench-out", str(out)])
    lines = other.stderr.strip().splitlines()
    assert other.returncode != 0 and len(lines) == 1, other.stderr[-3000:]
    assert "other settings" in lines[0] and "steps 400 there, 800 asked" in lines[0]
