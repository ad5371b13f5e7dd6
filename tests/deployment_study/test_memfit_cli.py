"""deployment_study.memfit: bad input exits 2 with one line; a short real run (bridge as a separate process in a
real memory cgroup, real onnxruntime) writes its results; without cgroups the constrained runs are
skipped with the reason. The library (deployment_study.memfit_run) returns its result and writes memfit.json;
deployment_study.render_memfit writes the markdown and the figure from it."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cgroup_support import SUPPORT

import device_emulation.memlimit as memlimit
from deployment_study.memfit_run import MemfitResult, read_onnx_metadata, run_memory_fit
from deployment_study.render_memfit import write_report

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "models" / "policy1_int8.onnx"


def memfit(*args, timeout=60):
    return subprocess.run(
        [sys.executable, "-m", "deployment_study.memfit", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["--model", "no/such.onnx"], "model file not found"),
        (["--model", str(MODEL), "--memory-mb", "10"], "--memory-mb must be from 64"),
        (["--model", str(MODEL), "--memory-mb", "99999999"], "--memory-mb must be from 64"),
        (["--model", str(MODEL), "--swap-mb", "-1"], "--swap-mb must be >= 0"),
        (["--model", str(MODEL), "--episodes", "0"], "--episodes must be >= 1"),
        (["--model", str(MODEL), "--camera", "144by256"], "camera size"),
        (["--model", str(MODEL), "--memory-mb", "lots"], "--memory-mb must be MB or MB:SWAP_MB"),
        (["--model", str(MODEL), "--memory-mb", "900:x"], "--memory-mb must be MB or MB:SWAP_MB"),
        (["--model", str(MODEL), "--memory-mb", "900:-5"], "swap of a limit must be >= 0"),
        (["--model", str(MODEL), "--time-budget-s", "0"], "--time-budget-s must be positive"),
        (["--model", str(MODEL), "--cpu", "999"], "--cpu must be a core"),
        (["--model", str(MODEL), "--level", "nope"], "unknown level"),
        ([], "--model"),
    ],
)
def test_bad_input_exits_2(tmp_path, args, message):
    p = memfit(*args, "--out", str(tmp_path / "o"))
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], p.stderr
    assert not (tmp_path / "o").exists()


def test_metadata_read_without_parsing_the_graph():
    import onnx

    expected = {e.key: e.value for e in onnx.load(str(MODEL)).metadata_props}
    assert read_onnx_metadata(MODEL) == expected and expected["airq.obs_dim"] == "1032"


def test_camera_mismatch_is_bad_input(tmp_path):
    p = memfit("--model", str(MODEL), "--camera", "144x256", "--out", str(tmp_path / "o"))
    assert p.returncode == 2 and "takes 1032 observation values" in p.stderr


@pytest.mark.skipif(not SUPPORT.available, reason=f"no memory cgroup here: {SUPPORT.reason}")
def test_short_run_constrained_and_baseline(tmp_path):
    before = {c.name for c in SUPPORT.root.iterdir() if c.name.startswith("airq-memfit")}
    p = memfit(
        "--model",
        str(MODEL),
        "--memory-mb",
        "256",
        "--swap-mb",
        "0",
        "--episodes",
        "2",
        "--max-steps",
        "40",
        "--out",
        str(tmp_path / "o"),
    )
    assert p.returncode == 0, p.stderr
    result = json.loads((tmp_path / "o" / "memfit.json").read_text())
    assert result["command"].startswith(f"python -m deployment_study.memfit --model {MODEL} --memory-mb 256 ")
    again = MemfitResult.from_dict(result)  # read back as the study's memory stage does
    assert again.limits == [(256, 0)] and again.config.models == [MODEL] and again.rows[1].vs_unconstrained.loop_hz
    rows = result["rows"]
    assert [r["condition"] for r in rows] == ["unconstrained", "constrained"]
    for r in rows:
        assert r["loaded"] and r["flown"] and r["episodes"] == 2 and r["steps"] > 0
        assert 0 < r["infer_p50_ms"] <= r["infer_p99_ms"]
        assert r["peak_rss_bytes"] > 20 * 2**20 and r["cgroup_samples"]
        assert r["oom_kills"] == 0 and r["swap_max_bytes"] == 0
    assert rows[1]["cgroup"]["memory_mb"] == 256 and rows[1]["cgroup_peak_bytes"] <= 256 * 2**20
    assert set(rows[1]["vs_unconstrained"]) >= {"infer_p50_ms", "loop_hz"}
    assert (tmp_path / "o" / "memory_over_time.png").stat().st_size > 1000
    assert "| policy1_int8.onnx | constrained (256 MB, swap 0 MB) | yes |" in (tmp_path / "o" / "memfit.md").read_text()
    after = {c.name for c in SUPPORT.root.iterdir() if c.name.startswith("airq-memfit")}
    assert after <= before  # its cgroups were removed (another run may have its own)


@pytest.mark.skipif(not SUPPORT.available, reason=f"no memory cgroup here: {SUPPORT.reason}")
def test_too_small_without_swap_does_not_load(tmp_path):
    # Policy III fp32 (27.5 MB of weights, held in several copies while onnxruntime loads it: about
    # 100 MB of the bridge's own pages) cannot load in 64 MB without swap: the OOM killer ends it
    result = run_memory_fit(
        [ROOT / "models" / "policy3_fp32.onnx"],
        memory_mb=64,
        swap_mb=0,
        episodes=1,
        out_dir=tmp_path,
        baseline=False,
        max_steps=10,
        load_timeout_s=60,
    )
    assert len(result.rows) == 1
    r = result.rows[0]
    assert not r.loaded and r.oom_kills >= 1 and r.exit_code not in (0, None)
    assert "did not start" in r.error
    write_report(result)
    assert "| **no** (exit" in (tmp_path / "memfit.md").read_text()


def test_without_cgroups_constrained_runs_are_skipped_with_reason(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(memlimit, "_is_root", lambda: False)
    result = run_memory_fit([MODEL], memory_mb=256, swap_mb=0, episodes=1, out_dir=tmp_path, max_steps=20)
    rows = result.rows
    assert [r.condition for r in rows] == ["unconstrained", "constrained"]
    assert rows[0].flown and rows[0].cgroup is None
    assert "not root" in rows[1].skipped
    assert "constrained runs skipped: not root" in capsys.readouterr().err
    assert not (tmp_path / "memfit.md").exists()  # the experiment returns data; rendering is the caller's
    assert write_report(result) == [tmp_path / "memfit.md", tmp_path / "memory_over_time.png"]
    assert "skipped: not root" in (tmp_path / "memfit.md").read_text()
    assert json.loads((tmp_path / "memfit.json").read_text())["command"] is None  # a library call types no command


def test_time_budget_stops_starting_episodes(tmp_path, monkeypatch):
    monkeypatch.setattr(memlimit, "_is_root", lambda: False)  # the baseline alone, no cgroup needed
    rows = run_memory_fit(
        [MODEL], memory_mb="256:0", episodes=3, out_dir=tmp_path, max_steps=10, time_budget_s=1e-3
    ).rows
    assert rows[0].time_budget_hit and rows[0].episodes == 1 and rows[0].steps <= 10
    assert rows[1].memory_limit_mb == 256 and rows[1].swap_limit_mb == 0 and rows[1].skipped
