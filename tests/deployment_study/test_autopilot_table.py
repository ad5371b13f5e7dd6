"""python -m deployment_study.autopilot_table: its refusals (no autopilot, a binary that is not one, SITL outside a
private network namespace), and the table it makes of real hil.run reports (the same seeds on two vehicles: success
counted per episode, paired by seed). The flights against ArduCopter and PX4 SITL builds are measured in
docs/autopilot.md; tests/firmware_bridge/test_mavlink_sitl.py flies them when the binaries are given."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from deployment_study.autopilot_table import Args, markdown, table
from nav_env.stats import wilson_interval

REPO = Path(__file__).resolve().parents[2]
MODELS = [str(REPO / "models" / "policy1_quadrotor_int8.onnx"), str(REPO / "models" / "policy2_quadrotor_int8.onnx")]


def table_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "deployment_study.autopilot_table", *args],
        capture_output=True, text=True, timeout=120, check=False, cwd=REPO,
    )  # fmt: skip


def test_it_refuses_what_it_cannot_fly_in_one_line(tmp_path):
    done = table_cli("--models", MODELS[0], "--out", str(tmp_path / "out"))
    assert done.returncode == 2 and "give --ardupilot BIN --ardupilot-params PARM, --px4 BIN, or both" in done.stderr
    done = table_cli("--models", MODELS[0], "--px4", str(tmp_path / "px4"), "--out", str(tmp_path / "out"))
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        f"error: --px4: {tmp_path / 'px4'} is not an executable file"
    ]
    done = table_cli("--models", MODELS[0], "--ardupilot", shutil.which("true"), "--out", str(tmp_path / "out"))
    assert done.returncode == 2 and "ArduCopter needs its defaults file" in done.stderr
    # a px4 build tree's layout, and this test's network namespace (which has more than loopback, or CI's has)
    (tmp_path / "build" / "bin").mkdir(parents=True)
    (tmp_path / "build" / "etc").mkdir()
    px4 = tmp_path / "build" / "bin" / "px4"
    shutil.copy(shutil.which("true"), px4)
    done = table_cli("--models", MODELS[0], "--px4", str(px4), "--out", str(tmp_path / "out"))
    interfaces = [name for _, name in __import__("socket").if_nameindex()]
    if interfaces == ["lo"]:
        pytest.skip("this test runs in a private network namespace already: the refusal cannot be seen here")
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "error: SITL listens on every interface: run this in a private network namespace "
        "(sudo unshare -n python -m deployment_study.autopilot_table ...)"
    ]
    assert not (tmp_path / "out").exists()  # nothing started, nothing written


def hil_run(backend: str, out: Path) -> dict:
    cmd = [sys.executable, "-m", "hil.run", *[x for m in MODELS for x in ("--policy", m)], "--sim-only",
           "--backend", backend, "--level", "default", "--episodes", "6", "--seed", "3", "--out", str(out), "--quiet"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False, cwd=REPO, env=os.environ)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads((out / "report.json").read_text())


def test_the_table_pairs_each_vehicle_with_the_simulators_episode_by_episode(tmp_path):
    reports = {v: hil_run(v, tmp_path / v) for v in ("embedded", "mujoco")}
    a = Args(models=MODELS, episodes=6, seed=3, out=tmp_path)
    data = table(a, reports)
    assert [(r["vehicle"], Path(r["policy"]).name) for r in data["rows"]] == [
        ("embedded", "policy1_quadrotor_int8.onnx"), ("mujoco", "policy1_quadrotor_int8.onnx"),
        ("embedded", "policy2_quadrotor_int8.onnx"), ("mujoco", "policy2_quadrotor_int8.onnx"),
    ]  # fmt: skip
    for r in data["rows"]:
        i = MODELS.index(r["policy"])
        episodes = {e["seed"]: e["outcome"] for e in reports[r["vehicle"]]["runs"][i]["episodes"]}
        assert sorted(episodes) == list(range(3, 9))
        won = sum(o == "success" for o in episodes.values())
        assert (r["episodes"], r["successes"]) == (6, won)
        assert (r["wilson_low"], r["wilson_high"]) == pytest.approx(wilson_interval(won, 6))
        assert len(r["failures"]) == 6 - won
        # each vehicle against the other simulator on the same seeds: its success minus the other's
        other = "embedded" if r["vehicle"] == "mujoco" else "mujoco"
        base = {e["seed"]: e["outcome"] for e in reports[other]["runs"][i]["episodes"]}
        only_this = sum(episodes[s] == "success" and base[s] != "success" for s in episodes)
        only_other = sum(base[s] == "success" and episodes[s] != "success" for s in episodes)
        assert list(r["against"]) == [other]
        d = r["against"][other]
        assert (d["only_second"], d["only_first"]) == (only_this, only_other)
        assert d["diff"] == pytest.approx((only_this - only_other) / 6)
        assert r["autopilot"] is None and r["actuation_hz"] is None  # lockstep simulators
    text = markdown(data)
    assert text.count("\n") == 2 + len(data["rows"]) and "| policy1_quadrotor_int8 | MuJoCo quadrotor |" in text
