"""python -m hil.study end to end: real bridge processes, real onnxruntime, TCP; and its bad inputs."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "models"


def study(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hil.study", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory) -> list[Path]:
    """Policy I (3 x 64) fp32 and its static int8, copied under a group name of their own."""
    d = tmp_path_factory.mktemp("models")
    out = []
    for prec in ("fp32", "int8"):
        dst = d / f"tiny_{prec}.onnx"
        shutil.copy(MODELS / f"policy1_{prec}.onnx", dst)
        out.append(dst)
    return out


@pytest.fixture(scope="module")
def finished(tiny_models, tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    out = tmp_path_factory.mktemp("study")
    proc = study("--sim-only", "--profile", "pi3b", "--models", *map(str, tiny_models), "--episodes", "3",
                 "--levels", "default", "hard", "--timing-rounds", "2", "--timing-acts", "30", "--out", str(out), "--quiet")
    return out, proc


def test_study_writes_consistent_results(finished):
    out, proc = finished
    assert proc.returncode == 0, proc.stderr[-2000:]
    for name in ("study.json", "study.md", "latency.png", "memory_over_time.png", "success.png", "machine.json"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    data = json.loads((out / "study.json").read_text())
    assert data["complete"] is True
    rows = data["rows"]
    assert sorted((r["level"], r["precision"]) for r in rows) == [("default", "fp32"), ("default", "int8"), ("hard", "fp32"), ("hard", "int8")]
    for r in rows:
        cell = data["cells"][f"{r['level']}/tiny"]
        run = next(x for x in cell["runs"] if x["policy"] == r["model"])
        outcomes = [e["outcome"] for e in run["episodes"]]
        assert r["episodes"] == 3 == len(outcomes)
        assert r["successes"] == outcomes.count("success")
        assert r["success_ci95"][0] <= r["success_rate"] <= r["success_ci95"][1]
        assert [e["seed"] for e in run["episodes"]] == [0, 1, 2]  # every precision flies the same seeded episodes
        assert r["speedup_vs_fp32"] > 0 and r["model_size_ratio_vs_fp32"] > 0 and r["peak_rss_ratio_vs_fp32"] > 0
        assert r["timing_inference_us"]["p50"] > 0 and r["timing_inference_us"]["p99"] >= r["timing_inference_us"]["p50"]
        assert r["actuation_hz"] > 0 and r["peak_rss_bytes"] >= r["rss_bytes"] > 0
        if r["precision"] == "fp32":
            assert r["paired_vs_fp32"] is None and r["speedup_vs_fp32"] == pytest.approx(1.0)
        else:
            d = r["paired_vs_fp32"]
            fp32 = next(x for x in rows if x["level"] == r["level"] and x["precision"] == "fp32")
            assert d["n"] == 3 and d["diff"] == pytest.approx((r["successes"] - fp32["successes"]) / 3)
            assert r["model_size_ratio_vs_fp32"] == pytest.approx(fp32["model_bytes"] / r["model_bytes"])
    timing = data["timing"]["tiny"]["models"]
    assert all(t["acts"] == 60 for t in timing.values())  # 2 rounds x 30 acts, every model
    machine = data["machine"]
    assert machine["dram_bandwidth_gbs"] > 0 and all(v > 0 for v in machine["throughput_gops"].values())
    for e in data["roofline"]:
        c = e["check"]
        assert c["predicted_s"] > 0 and c["measured_s"] > 0
        assert c["agrees"] == (0.5 <= c["measured_s"] / c["predicted_s"] <= 2.0)
        for board, p in e["predicted_on_pi"].items():
            assert not p["shown"] or c["agrees"], board  # no Pi prediction without an agreeing check here


def test_study_markdown_has_the_tables(finished):
    out, _ = finished
    md = (out / "study.md").read_text()
    assert "Honest labelling: sim-only, profile `pi3b`" in md
    assert "predicted on Pi (pi3b) (roofline)" in md
    assert md.count("| tiny | fp32 |") == 2 and md.count("| tiny | int8 |") == 2  # one row per level
    assert "## Targets (measured in this run)" in md
    data = json.loads((out / "study.json").read_text())
    assert f"{data['rows'][0]['successes']}/3" in md


def test_study_rerun_continues_without_flying_again(finished, tiny_models):
    out, _ = finished
    logs = sorted((out / "cells").rglob("run.jsonl"))
    before = [p.read_bytes() for p in logs]
    proc = study("--sim-only", "--profile", "pi3b", "--models", *map(str, tiny_models), "--episodes", "3",
                 "--levels", "default", "hard", "--timing-rounds", "2", "--timing-acts", "30", "--out", str(out), "--quiet")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "already done" in proc.stderr
    assert [p.read_bytes() for p in logs] == before  # no episode flown twice
    other = study("--sim-only", "--models", *map(str, tiny_models), "--episodes", "4", "--out", str(out))
    assert other.returncode == 2 and "other arguments" in other.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["--sim-only", "--profile", "pi9"], "unknown device profile 'pi9'"),
    (["--sim-only", "--models", "nowhere/p_fp32.onnx"], "model file not found: nowhere/p_fp32.onnx"),
    (["--sim-only", "--episodes", "0"], "--episodes must be >= 1"),
    (["--sim-only", "--levels", "nosuchlevel"], "nosuchlevel"),
    (["--sim-only", "--models", str(MODELS / "policy1_int8.onnx")], "policy1 has no fp32 model"),
    (["--sim-only", "--models", str(MODELS / "policy1.md")], "cannot tell the precision"),
    (["--host", "raspberrypi.local", "--profile", "native"], "has no roofline figures"),
])
def test_study_bad_input_exits_2_with_one_line(args, message, tmp_path):
    proc = study(*args, "--out", str(tmp_path / "s"))
    assert proc.returncode == 2
    assert message in proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and proc.stderr.startswith("error: ")
    assert not (tmp_path / "s").exists()  # nothing started


def test_study_bad_episodes_type_is_a_usage_error(tmp_path):
    proc = study("--sim-only", "--episodes", "many", "--out", str(tmp_path / "s"))
    assert proc.returncode == 2 and "invalid int value" in proc.stderr


def test_study_against_a_device_by_host(tiny_models, tmp_path):
    """--host: one bridge (here a real separate process on loopback) serves every model in turn."""
    from firmware_bridge.launcher import BridgeProcess

    with BridgeProcess(["--threads", "1", "--actuator", "mock"]) as bridge:
        port = bridge.endpoint.rsplit(":", 1)[1]
        proc = study("--host", "127.0.0.1", "--port", port, "--profile", "pi3b", "--models", *map(str, tiny_models),
                     "--episodes", "2", "--levels", "default", "--timing-rounds", "2", "--timing-acts", "10",
                     "--out", str(tmp_path / "s"), "--quiet")
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads((tmp_path / "s" / "study.json").read_text())
    assert data["machine"] is None and data["mode"] == f"device 127.0.0.1:{port}"
    assert [r["episodes"] for r in data["rows"]] == [2, 2]
    assert all(t["acts"] == 20 for t in data["timing"]["tiny"]["models"].values())
    for e in data["roofline"]:  # checked against the pi3b figures, with the device's own measurement
        assert e["check"]["where"].startswith("the device") and e["check"]["measured_s"] > 0
    assert "Measured on the device at 127.0.0.1" in (tmp_path / "s" / "study.md").read_text()
