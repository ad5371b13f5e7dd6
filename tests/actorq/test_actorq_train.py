"""actorq.train end to end on a real local Ray: int8 actors in separate processes, an fp32 SB3 learner, one actor
killed mid-run (SIGKILL) and replaced, a resumed run, the exported policy loaded like hil loads it; and the bad
input a user can give it, each one line and exit 2."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
TRAIN = [sys.executable, "-m", "actorq.train"]
# a small nav run: Policy I-size network, rounds of 2 x 250 steps, evaluation every 1,000 steps on 10 episodes
SMALL_NAV = [
    "--task", "nav", "--network", "policy1", "--actors", "2", "--rollout-steps", "250",
    "--learning-starts", "500", "--eval-every", "1000", "--eval-episodes", "10", "--checkpoint-every", "2",
    "--no-progress",
]  # fmt: skip


def _env() -> dict[str, str]:
    return os.environ | {"PYTHONPATH": str(REPO), "RAY_DISABLE_USAGE_STATS": "1"}


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def test_int8_training_replaces_a_killed_actor_then_resumes_and_exports(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [*TRAIN, *SMALL_NAV, "--precision", "int8", "--steps", "6000", "--out", str(out)],
        cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    killed = None
    try:
        deadline = time.monotonic() + 120
        while killed is None and time.monotonic() < deadline and proc.poll() is None:
            if len(_rows(out / "metrics.jsonl")) >= 2 and (out / "actors.json").is_file():
                killed = json.loads((out / "actors.json").read_text())["pids"][0]
                os.kill(killed, signal.SIGKILL)
            time.sleep(0.05)
        stdout, stderr = proc.communicate(timeout=240)
    finally:
        proc.kill()
    assert killed is not None, f"the run ended before an actor could be killed:\n{stderr[-2000:]}"
    assert proc.returncode == 0, stderr[-3000:]
    assert "actor 0 died in round" in stderr and "starting a new one" in stderr
    report = json.loads((out / "report.json").read_text())
    state = report["state"]
    assert state["env_steps"] == 6000 and [r["actor"] for r in state["restarts"]] == [0]
    assert json.loads((out / "actors.json").read_text())["pids"][0] != killed
    # the learner never stopped: it trained every round after learning started and published a version each time
    rows = _rows(out / "metrics.jsonl")
    assert [r["round"] for r in rows] == list(range(1, len(rows) + 1)) == list(range(1, 13))
    # learning starts once 500 steps are in (after round 1): 2 x 250 steps x 0.25 updates per step each round
    assert rows[0]["updates"] == 0 and all(r["updates"] == 125 for r in rows[1:])
    assert state["updates"] == 125 * (len(rows) - 1)
    versions = [r["version"] for r in rows]
    assert versions == list(range(1, len(rows) + 1)) or versions == sorted(versions)
    assert versions[-1] == len(rows) - 1
    # each round acts with the version published by the end of the round before it, never a newer or mixed one
    assert [r["acting_version"] for r in rows[1:]] == versions[:-1]
    assert report["staleness"]["max_versions"] == 1
    built = report["versions"]
    assert [v["version"] for v in built] == list(range(len(built))) and all(v["precision"] == "int8" for v in built)
    assert all(v["agreement"] is not None and 0.0 <= v["agreement"] <= 1.0 for v in built)
    assert report["rates"]["actor_steps_per_s_median"] > 0 and report["energy_estimate"]["joules"] > 0
    assert "estimate" in report["energy_estimate"]["note"]
    assert (out / "checkpoints/latest.zip").is_file() and list((out / "tb").iterdir())
    # the exported policy is an ordinary airq policy file: hil and quantize load it as they load any other
    from firmware_bridge.policy import load_policy_file

    policy = load_policy_file(str(out / "policy_fp32.onnx"))
    assert policy.metadata["airq.algorithm"] == "dqn" and policy.metadata["airq.preset"] == "policy1"
    assert policy.setpoint_mapping == "action_table"
    action, _, _ = policy.act(np.zeros((1, policy.obs_dim), np.float32))
    assert 0 <= action < policy.action_size

    # resume: the same run directory, more steps; the run goes on from its checkpoint
    resumed = subprocess.run(
        [*TRAIN, *SMALL_NAV, "--precision", "int8", "--steps", "7000", "--out", str(out), "--resume"],
        cwd=REPO, env=_env(), capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    after = json.loads((out / "report.json").read_text())["state"]
    assert after["env_steps"] == 7000 and after["updates"] > state["updates"]
    assert [r["round"] for r in _rows(out / "metrics.jsonl")] == list(range(1, 15))


def _error(args: list[str], env: dict[str, str] | None = None, tmp: Path | None = None) -> str:
    done = subprocess.run(
        [*TRAIN, *args], cwd=tmp or REPO, env=env or _env(), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr[-2000:]
    return lines[0]


def test_without_ray_it_names_the_extra_to_install(tmp_path):
    # a ray that cannot be imported, as on a machine without the [distributed] extra
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "__init__.py").write_text("raise ImportError('No module named ray')\n")
    env = _env() | {"PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}"}
    line = _error(["--task", "nav", "--steps", "100", "--out", str(tmp_path / "o")], env)
    assert "Ray is not installed" in line and "airq[distributed]" in line


@pytest.mark.parametrize(
    "args, says",
    [
        (["--actors", "0"], "--actors must be >= 1"),
        (["--network", "64,abc"], "neither a known network"),
        (["--updates-per-step", "-1"], "--updates-per-step must be in (0, 64]"),
        (["--learning-starts", "10", "--batch-size", "64"], "--learning-starts (10) must be at least --batch-size"),
        (["--address", "127.0.0.1:1"], "127.0.0.1:1: no Ray head answers there"),
        (["--address", "nonsense"], "expected HOST:PORT"),
        (["--resume"], "nothing to resume"),
    ],
)
def test_bad_input_is_one_line(tmp_path, args, says):
    line = _error(["--task", "nav", "--steps", "1000", *args, "--out", str(tmp_path / "o")])
    assert says in line, line


def test_a_cluster_without_the_actors_resource_is_refused(tmp_path):
    line = _error(
        ["--task", "pendulum", "--steps", "1000", "--actor-resource", "pi_rack", "--out", str(tmp_path / "o")]
    )
    assert "the cluster has 0 of resource 'pi_rack', 2 actors need 1 each" in line


def test_a_corrupt_checkpoint_is_refused_on_resume(tmp_path):
    out = tmp_path / "o"
    (out / "checkpoints").mkdir(parents=True)
    (out / "checkpoints/latest.zip").write_bytes(b"not a zip")
    (out / "checkpoints/state.json").write_text(json.dumps({"round": 1, "env_steps": 500, "episodes": [1, 1]}))
    line = _error(["--task", "pendulum", "--steps", "1000", "--resume", "--out", str(out)])
    assert "not a checkpoint of this learner" in line
