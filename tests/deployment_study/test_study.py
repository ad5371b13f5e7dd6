"""python -m deployment_study end to end: real bridge processes, real onnxruntime, TCP; and its bad inputs."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cgroup_support import SUPPORT

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "models"


def study(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "deployment_study", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


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


def memory_args(cache: Path) -> list[str]:
    """A cheap memory stage: Policy I widened to a 64 x 64 camera (1.1 MB), its int8 calibrated on 2
    episodes, two RAM limits without swap (no swap file needed), one episode per run."""
    return [
        "--memory-source",
        str(MODELS / "policy1_fp32.onnx"),
        "--memory-camera",
        "64x64",
        "--memory-limits",
        "256:0",
        "128:0",
        "--memory-episodes",
        "1",
        "--memory-calibration-episodes",
        "2",
        "--memory-cache",
        str(cache),
    ]


@pytest.fixture(scope="module")
def finished(tiny_models, tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    out = tmp_path_factory.mktemp("study")
    cache = tmp_path_factory.mktemp("memcache")
    proc = study(
        "--sim-only",
        "--profile",
        "pi3b",
        "--models",
        *map(str, tiny_models),
        "--episodes",
        "3",
        "--levels",
        "default",
        "hard",
        "--timing-rounds",
        "2",
        "--timing-acts",
        "30",
        "--out",
        str(out),
        "--quiet",
        *memory_args(cache),
    )
    return out, proc


def test_study_writes_consistent_results(finished):
    out, proc = finished
    assert proc.returncode == 0, proc.stderr[-2000:]
    for name in ("study.json", "study.md", "latency.png", "memory_over_time.png", "success.png", "machine.json"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    data = json.loads((out / "study.json").read_text())
    assert data["complete"] is True
    rows = data["rows"]
    assert sorted((r["level"], r["precision"]) for r in rows) == [
        ("default", "fp32"),
        ("default", "int8"),
        ("hard", "fp32"),
        ("hard", "int8"),
    ]
    for r in rows:
        cell = data["cells"][f"{r['level']}/tiny"]
        run = next(x for x in cell["runs"] if x["policy"] == r["model"])
        outcomes = [e["outcome"] for e in run["episodes"]]
        assert r["episodes"] == 3 == len(outcomes)
        assert r["successes"] == outcomes.count("success")
        assert r["success_ci95"][0] <= r["success_rate"] <= r["success_ci95"][1]
        assert [e["seed"] for e in run["episodes"]] == [0, 1, 2]  # every precision flies the same seeded episodes
        assert r["speedup_vs_fp32"] > 0 and r["model_size_ratio_vs_fp32"] > 0 and r["peak_rss_ratio_vs_fp32"] > 0
        assert (
            r["timing_inference_us"]["p50"] > 0 and r["timing_inference_us"]["p99"] >= r["timing_inference_us"]["p50"]
        )
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
    assert "shared_cache_bytes" in machine and machine["private_cache_bytes"] >= 0
    for e in data["roofline"]:
        c = e["check"]
        assert c["predicted_s"] > 0 and c["measured_s"] > 0
        assert c["agrees"] == (0.5 <= c["measured_s"] / c["predicted_s"] <= 2.0)
        if c["other_predicted_s"]:  # two cache states were possible: the judged one is the nearer
            assert abs(math.log(c["measured_s"] / c["predicted_s"])) <= abs(
                math.log(c["measured_s"] / c["other_predicted_s"])
            )
        for board, p in e["predicted_on_pi"].items():
            assert not p["shown"] or c["agrees"], board  # no Pi prediction without an agreeing check here


def test_study_latency_stage_flies_each_model_at_its_predicted_pi_time(finished):
    """Every model with a shown pi3b prediction flies lockstep and at that delay, in process; its lockstep
    flights are the closed loop's, episode by episode; the fp32/int8 sweep covers every delay."""
    from deployment_study.latency_stage import SWEEP_DELAYS_MS

    out, proc = finished
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads((out / "study.json").read_text())
    lat = data["latency"]
    assert lat["board"] == "pi3b" and lat["episodes"] == 3
    shown = {
        e["model"]: e["predicted_on_pi"]["pi3b"]["predicted_s"]
        for e in data["roofline"]
        if e["predicted_on_pi"]["pi3b"]["shown"]
    }
    flown = {(r["level"], r["model"]) for r in lat["rows"]}
    assert flown == {(level, m) for level in ("default", "hard") for m in shown}
    for model in {e["model"] for e in data["roofline"]} - set(shown):  # left out, and said why
        assert any(Path(model).stem in why for why in lat["skipped"]), lat["skipped"]
    for r in lat["rows"]:
        assert r["predicted_ms"] == pytest.approx(shown[r["model"]] * 1e3)
        assert r["lockstep"]["delay_ms"] == 0 and r["at_board"]["delay_ms"] == pytest.approx(
            r["predicted_ms"], abs=1e-3
        )
        assert len(r["lockstep"]["outcomes"]) == len(r["at_board"]["outcomes"]) == 3
        assert r["lockstep_matches_loop"] == 3  # in process or through the bridge, the same flights
        assert r["paired"]["n"] == 3
    if data["memory"]["status"] == "done":  # its source (policy1) is not one of these models: said so
        assert "Air Learning-sized" in " ".join(lat["skipped"])
    if shown:
        assert {c["precision"] for c in lat["sweep"]} <= {"fp32", "int8"} and lat["sweep"]
        for c in lat["sweep"]:
            assert [f["delay_ms"] for f in c["flights"]] == list(SWEEP_DELAYS_MS)
        assert (out / "latency_sweep.png").stat().st_size > 0
    md = (out / "study.md").read_text()
    assert "## At the pi3b board's speed (latency stage)" in md and "a prediction, not a measurement" in md


def test_study_markdown_has_the_tables(finished):
    out, _ = finished
    md = (out / "study.md").read_text()
    assert "Honest labelling: sim-only, profile `pi3b`" in md
    assert "predicted on Pi (pi3b) (roofline)" in md
    assert md.count("| tiny | fp32 |") == 2 and md.count("| tiny | int8 |") == 2  # one row per level
    assert "## Targets (measured in this run)" in md
    data = json.loads((out / "study.json").read_text())
    assert f"{data['rows'][0]['successes']}/3" in md
    # the versions it was measured with, in study.json and in study.md
    import onnxruntime

    assert data["host_versions"]["onnxruntime"] == onnxruntime.__version__ and "torch" in data["host_versions"]
    assert data["sessions"][0]["host_versions"] == data["host_versions"]
    assert f"Host versions: airq {data['host_versions']['airq']}, python" in md
    # and on what kind of int8 kernels (the device's probe, here this machine's)
    from firmware_bridge.int8_kernels import int8_kernels

    assert data["device"]["device"]["int8_kernels"] == int8_kernels().as_dict()
    assert f"Device {int8_kernels().describe()}." in md


def test_study_html_shows_study_json_in_chromium(finished):
    """study.html in headless Chromium (tests/report_pages.py): no console error, nothing fetched, not blank,
    every figure shown, and the numbers of every section equal study.json's."""
    from report_pages import check_page

    out, proc = finished
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads((out / "study.json").read_text())
    row_keys = ("success_rate", "success_ci95.0", "timing_inference_us.p50", "speedup_vs_fp32", "peak_rss_bytes")
    required = [f"rows.{i}.{k}" for i in range(len(data["rows"])) for k in row_keys]
    required += [f"seed.table.{g}.{k}" for g in data["seed"]["table"] for k in ("fp32_ms", "int8_ms", "speedup")]
    required += [f"roofline.{k}.check.predicted_s" for k in range(len(data["roofline"]))]
    lat, mem = data["latency"], data["memory"]
    required += [f"latency.rows.{k}.at_board.success_rate" for k in range(len(lat["rows"]))]
    required += [
        f"latency.sweep.{c}.flights.{f}.success_rate"
        for c, s in enumerate(lat["sweep"])
        for f in range(len(s["flights"]))
    ]
    expected = {"latency.png", "success.png", "memory_over_time.png"} | (
        {"latency_sweep.png"} if lat["sweep"] else set()
    )
    if mem["status"] == "done":
        required += [f"memory.rows.{k}.infer_p50_ms" for k in range(len(mem["rows"]))]
        expected.add("memory_fit_over_time.png")
    figures = (
        "[...document.querySelectorAll('figure img')].map(i => [i.closest('figure').dataset.figure, i.naturalWidth])"
    )
    loaded = check_page(out / "study.html", data, required, figures)
    assert {name for name, width in loaded.found if width > 0} == expected


def test_study_rerun_continues_without_flying_again(finished, tiny_models):
    out, _ = finished
    logs = sorted((out / "cells").rglob("run.jsonl"))
    before = [p.read_bytes() for p in logs]
    data = json.loads((out / "study.json").read_text())
    cache = Path(data["args"]["memory_cache"])
    proc = study(
        "--sim-only",
        "--profile",
        "pi3b",
        "--models",
        *map(str, tiny_models),
        "--episodes",
        "3",
        "--levels",
        "default",
        "hard",
        "--timing-rounds",
        "2",
        "--timing-acts",
        "30",
        "--out",
        str(out),
        "--quiet",
        *memory_args(cache),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "already done" in proc.stderr
    assert [p.read_bytes() for p in logs] == before  # no episode flown twice
    if SUPPORT.available:  # the memory stage's models come from the cache, its finished runs are not run again
        assert proc.stderr.count("memory stage: reusing") == 2 and proc.stderr.count("memory stage [") == 2
        assert "deployment_study.memfit:" not in proc.stderr
    other = study("--sim-only", "--models", *map(str, tiny_models), "--episodes", "4", "--out", str(out))
    assert other.returncode == 2 and "other arguments" in other.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--sim-only", "--profile", "pi9"], "unknown device profile 'pi9'"),
        (["--sim-only", "--models", "nowhere/p_fp32.onnx"], "model file not found: nowhere/p_fp32.onnx"),
        (["--sim-only", "--episodes", "0"], "--episodes must be >= 1"),
        (["--sim-only", "--levels", "nosuchlevel"], "nosuchlevel"),
        (["--sim-only", "--models", str(MODELS / "policy1_int8.onnx")], "policy1 has no fp32 model"),
        (["--sim-only", "--models", str(MODELS / "policy1.md")], "cannot tell the precision"),
        (["--host", "raspberrypi.local", "--profile", "native"], "has no roofline figures"),
        (["--sim-only", "--memory-study"], "--memory-study needs --memory-limits or a --profile with a memory size"),
        (["--sim-only", "--profile", "pi3b", "--memory-limits", "lots"], "--memory-limits must be MB or MB:SWAP_MB"),
        (["--sim-only", "--profile", "pi3b", "--memory-limits", "10"], "--memory-limits: RAM must be from 64"),
        (["--sim-only", "--profile", "pi3b", "--memory-limits", "256", "256"], "--memory-limits lists a limit twice"),
        (["--sim-only", "--profile", "pi3b", "--memory-episodes", "0"], "--memory-episodes must be >= 1"),
        (["--sim-only", "--profile", "pi3b", "--memory-swap-mb", "-1"], "--memory-swap-mb must be >= 0"),
        (
            ["--sim-only", "--profile", "pi3b", "--memory-source", "nowhere/p_fp32.onnx"],
            "--memory-source: model file not found",
        ),
        (["--sim-only", "--profile", "pi3b", "--memory-camera", "144by256"], "--memory-camera"),
    ],
)
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
        proc = study(
            "--host",
            "127.0.0.1",
            "--port",
            port,
            "--profile",
            "pi3b",
            "--models",
            *map(str, tiny_models),
            "--episodes",
            "2",
            "--levels",
            "default",
            "--timing-rounds",
            "2",
            "--timing-acts",
            "10",
            "--out",
            str(tmp_path / "s"),
            "--quiet",
        )
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads((tmp_path / "s" / "study.json").read_text())
    assert data["machine"] is None and data["mode"] == f"device 127.0.0.1:{port}"
    assert [r["episodes"] for r in data["rows"]] == [2, 2]
    assert all(t["acts"] == 20 for t in data["timing"]["tiny"]["models"].values())
    for e in data["roofline"]:  # checked against the pi3b figures, with the device's own measurement
        assert e["check"]["where"].startswith("the device") and e["check"]["measured_s"] > 0
    md = (tmp_path / "s" / "study.md").read_text()
    assert "Measured on the device at 127.0.0.1" in md
    # memory: no cgroup around a device's process; the device's RAM (its hello) and each model's RSS are reported
    assert data["memory"]["status"] == "device"
    ram = data["device"]["device"]["ram_bytes"]
    section = md[md.index("## Does it fit in a Pi 3b's memory?") :]
    assert f"**{ram / 2**20:,.0f} MB**" in section
    rss = next(r for r in data["rows"] if r["precision"] == "int8")["rss_bytes"]
    assert f"| tiny_int8 | {rss / 2**20:,.0f} |" in section


def test_study_memory_stage(finished):
    """The memory stage's results: measured in memory cgroups where this machine allows (CI: root). Without a
    memory cgroup the study still succeeds and its section gives the reason, then this test skips with it;
    AIRQ_REQUIRE_CGROUP=1 makes that a collection error instead (cgroup_support)."""
    out, proc = finished
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads((out / "study.json").read_text())
    mem = data["memory"]
    md = (out / "study.md").read_text()
    assert "## Does it fit in a Pi 3b's memory?" in md
    if not SUPPORT.available:
        assert mem["status"] == "skipped" and mem["reason"] == SUPPORT.reason
        assert f"**skipped: {SUPPORT.reason}**" in md
        pytest.skip(f"no memory cgroup here: {SUPPORT.reason}")
    assert mem["status"] == "done", mem
    fp32, int8 = mem["models"]["fp32"], mem["models"]["int8"]
    assert Path(fp32["path"]).name == "policy1_64x64_fp32.onnx" and Path(int8["path"]).name == "policy1_64x64_int8.onnx"
    assert (
        "memory stage: widening policy1_fp32.onnx to a 64x64 camera" in proc.stderr
    )  # a fresh cache: built, then stored
    assert Path(fp32["path"]).parent.parent == Path(data["args"]["memory_cache"]) and Path(int8["path"]).is_file()
    assert int8["source_sha256"] == fp32["sha256"] and 0.5 < int8["heldout_agreement"] <= 1.0
    assert fp32["bytes"] == Path(fp32["path"]).stat().st_size > int8["bytes"] * 3
    rows = mem["rows"]
    assert [(Path(r["model"]).stem, r["condition"], r["memory_limit_mb"]) for r in rows] == [
        ("policy1_64x64_fp32", "unconstrained", None),
        ("policy1_64x64_fp32", "constrained", 256),
        ("policy1_64x64_fp32", "constrained", 128),
        ("policy1_64x64_int8", "unconstrained", None),
        ("policy1_64x64_int8", "constrained", 256),
        ("policy1_64x64_int8", "constrained", 128),
    ]
    for r in rows:
        assert r["loaded"] and r["flown"] and r["episodes"] == 1 and r["steps"] > 0
        assert 0 < r["infer_p50_ms"] <= r["infer_p99_ms"] and r["oom_kills"] == 0
        assert "cgroup_samples" not in r  # the time series stay in memory/PART/memfit.json
        if r["condition"] == "constrained":
            assert r["swap_limit_mb"] == 0 and r["cgroup_peak_bytes"] <= r["memory_limit_mb"] * 2**20
            assert r["vs_unconstrained"]["infer_p50_ms"] > 0
    for part in mem["parts"].values():  # the stage keeps memfit.json; the study renders beside it
        assert "cgroup_samples" in json.loads((Path(part) / "memfit.json").read_text())["rows"][0]
        assert "| constrained (" in (Path(part) / "memfit.md").read_text()
        assert (Path(part) / "memory_over_time.png").stat().st_size > 1000
    assert mem["plot"] == "memory_fit_over_time.png" and (out / mem["plot"]).stat().st_size > 1000
    stage = json.loads((out / "memory" / "stage.json").read_text())  # kept for re-renders of the study
    assert (
        mem["measured"] == stage
        and stage["build_s"]["fp32"] > 0
        and f"Stage wall time: {stage['wall_s'] / 60:.1f} min" in md
    )
    assert (
        md.count("| policy1_64x64_fp32.onnx | ") == 3
        and "| policy1_64x64_int8.onnx | 128 MB RAM, no swap | yes |" in md
    )
    assert f"{rows[0]['infer_p50_ms']:,.2f} / {rows[0]['infer_p99_ms']:,.2f}" in md
    assert "every slowdown here is a lower bound" in md and "Swap: none (no limit asks for it)." in md
    ratio = rows[1]["infer_p50_ms"] / rows[4]["infer_p50_ms"]  # fp32 against int8 at 256 MB
    assert (
        f"256 MB RAM, no swap: fp32 {rows[1]['infer_p50_ms']:,.2f} ms, int8 {rows[4]['infer_p50_ms']:,.2f} ms (**{ratio:,.1f}x**)"
        in md
    )


def test_study_memory_stage_skipped_without_root(tiny_models, tmp_path, monkeypatch, capsys):
    """Not root: the section says why and the study still succeeds; no model is built."""
    import signal

    import device_emulation.memlimit as memlimit
    from deployment_study.study import main

    monkeypatch.setattr(memlimit, "_is_root", lambda: False)
    handler = signal.getsignal(signal.SIGTERM)
    try:
        rc = main(
            [
                "--sim-only",
                "--profile",
                "pi3b",
                "--models",
                *map(str, tiny_models),
                "--episodes",
                "1",
                "--levels",
                "default",
                "--timing-rounds",
                "1",
                "--timing-acts",
                "5",
                "--out",
                str(tmp_path / "s"),
                "--quiet",
                # the latency stage does not read the memory stage's status (it is checked, memory stage done
                # or skipped, by the `finished` study above): left out here, where only the memory stage is
                "--no-latency-study",
                *memory_args(tmp_path / "cache"),
            ]
        )
    finally:
        signal.signal(signal.SIGTERM, handler)
    assert rc == 0
    data = json.loads((tmp_path / "s" / "study.json").read_text())
    assert (
        data["complete"] and data["memory"]["status"] == "skipped" and data["memory"]["reason"].startswith("not root")
    )
    assert "**skipped: not root" in (tmp_path / "s" / "study.md").read_text()
    assert "memory stage skipped: not root" in capsys.readouterr().err
    assert not (tmp_path / "cache").exists() and not (tmp_path / "s" / "memory").exists()


def test_memory_runs_below_the_weights_are_short():
    from deployment_study.memory_stage import plan_parts

    mb = 2**20
    limits = [(900, 2048), (900, 0), (512, 2048)]
    parts = plan_parts([("big_fp32.onnx", 615 * mb), ("big_int8.onnx", 154 * mb)], limits, episodes=5, thrash_acts=8)
    assert [(p.name, p.limits, p.baseline, p.episodes, p.max_steps) for p in parts] == [
        ("big_fp32", [(900, 2048), (900, 0)], True, 5, None),
        ("big_fp32_below_weights", [(512, 2048)], False, 1, 8),  # 512 MB cannot hold 615 MB of weights
        ("big_int8", limits, True, 5, None),
    ]
    only_below = plan_parts([("huge_fp32.onnx", 2000 * mb)], limits, episodes=5, thrash_acts=8)
    assert [(p.limits, p.baseline, p.max_steps) for p in only_below] == [(limits, True, 8)]  # baseline: the same acts


def test_memory_readings_follow_the_measurements():
    from deployment_study.memfit_run import MemfitRow
    from deployment_study.memory_stage import classify, verdict

    def row(**fields) -> MemfitRow:  # a row as memfit.json holds it
        return MemfitRow.from_dict({"model": "m.onnx", "name": "m.onnx", "condition": "constrained"} | fields)

    mb = 2**20
    base = {"loaded": True, "flown": True, "swap_max_bytes": 0}
    oom = row(loaded=False, oom_kills=1)
    assert classify(oom) == "oom" and "OOM-killed while loading" in verdict(oom)
    assert classify(row(loaded=False, oom_kills=0, error="x")) == "no-load"
    thrashes = row(**base, vs_unconstrained={"infer_p50_ms": 155.0})
    assert classify(thrashes) == "thrashes" and "155x slower" in verdict(thrashes)
    swapped = row(**base | {"swap_max_bytes": 888 * mb}, vs_unconstrained={"infer_p50_ms": 1.08, "load_s": 3.78})
    assert classify(swapped) == "swapped" and "swapping out 888 MB (loading 3.8x slower)" in verdict(swapped)
    assert classify(row(**base, vs_unconstrained={"infer_p50_ms": 2.9})) == "fits"
    assert classify(row(**base | {"condition": "unconstrained"})) == "baseline"
    assert classify(row(skipped="not root")) == "skipped"


def test_memory_stage_rebuilds_an_int8_of_another_recipe(tmp_path):
    """A cached memory-stage int8 is reused only when it was made from this fp32, with this calibration,
    in the current recipe (u8s7 per-tensor): a full-range u8s8 file of an older airq is rebuilt."""
    import onnx

    from deployment_study.memory_stage import INT8_RECIPE_METADATA, cached_ok, sha256_file
    from firmware_bridge.toy_policy import build_mlp_policy

    fp32, int8 = tmp_path / "w_fp32.onnx", tmp_path / "w_int8.onnx"

    def save(path, meta):
        model = onnx.load_from_string(build_mlp_policy(1032, 8, seed=1))
        model.metadata_props.extend(onnx.StringStringEntryProto(key=k, value=v) for k, v in meta.items())
        onnx.save(model, path)

    save(fp32, {"airq.widen.source_sha256": "src", "airq.widen.camera": "144x256"})
    current = {"airq.quant.source_sha256": sha256_file(fp32), "airq.quant.calibration_episodes": "20 per level"}
    save(int8, current | INT8_RECIPE_METADATA)
    assert cached_ok(fp32, int8, "src", "144x256", 20)[:2] == (True, True)
    save(int8, current | {"airq.quant.scheme": "u8s8", "airq.quant.per_channel": "false"})
    assert cached_ok(fp32, int8, "src", "144x256", 20)[:2] == (True, False)
    save(int8, current)  # made before schemes were recorded
    assert cached_ok(fp32, int8, "src", "144x256", 20)[:2] == (True, False)


def test_records_read_back_from_an_earlier_session(tmp_path):
    """A resumed study reads its folder back: timing/GROUP.json, the sessions and the memory stage's own
    measuring from an earlier study.json (also from before fields were added: they take their defaults)."""
    from airq_cli import write_json
    from deployment_study.memory_stage import StageMeasured, previous_measured
    from deployment_study.results import Latency, ModelTiming, Session, TimingPass

    us = Latency(p50=50.0, p95=60.0, p99=70.0, mean=52.0, max=90.0)
    timing = TimingPass(2, 30, 30, {"m_fp32.onnx": ModelTiming("fp32", 1000, us, us, 60)})
    write_json(tmp_path / "t.json", timing)
    assert TimingPass.from_dict(json.loads((tmp_path / "t.json").read_text())) == timing
    old_session = {"date": "2026-01-01 00:00:00 UTC", "wall_s": 12.5}  # before host_versions were recorded
    assert Session.from_dict(old_session) == Session("2026-01-01 00:00:00 UTC", 12.5, None)
    measured = {"wall_s": 60.0, "date": "2026-01-01", "code": "abc123", "build_s": {"fp32": 3.0, "int8": 9.0}}
    assert previous_measured({"measured": measured}) == StageMeasured(
        60.0, "2026-01-01", {"fp32": 3.0, "int8": 9.0}, "abc123"
    )
    # a study.json from before "measured": the build times its models recorded
    legacy = {"models": {"fp32": {"build_s": 3.0}, "int8": {"reused": True, "build_s": None}}}
    assert previous_measured(legacy) == StageMeasured(None, None, {"fp32": 3.0, "int8": None})
    assert previous_measured(None) is None and previous_measured({"status": "skipped"}) is None


def test_the_memory_stages_slowdown_scales_the_pi_prediction_but_never_shrinks_it():
    """A RAM limit with swap makes inference slower or leaves it alone; a measured speed-up is noise."""
    from deployment_study.memory_stage import DevicePlan, MemoryResult, StageRow
    from deployment_study.study import memory_slowdown

    def stage(free_ms: float, limited_ms: float | None) -> MemoryResult:
        rows = [StageRow(model="big.onnx", name="big.onnx", condition="unconstrained", infer_p50_ms=free_ms)]
        rows.append(
            StageRow(
                model="big.onnx",
                name="big.onnx",
                condition="constrained",
                memory_limit_mb=900,
                swap_limit_mb=2048,
                loaded=limited_ms is not None,
                infer_p50_ms=limited_ms,
            )
        )
        return MemoryResult(status="done", plan=DevicePlan(), rows=rows)

    factor, where = memory_slowdown(stage(60.0, 90.0), "big.onnx", 900)
    assert factor == pytest.approx(1.5) and where == "memory stage, 900 MB + 2048 MB swap, measured here"
    factor, where = memory_slowdown(stage(60.0, 56.4), "big.onnx", 900)
    assert factor == 1.0 and where.endswith("measured here: 0.94x, no slowdown")
    factor, where = memory_slowdown(stage(60.0, None), "big.onnx", 900)
    assert factor is None and where == "does not load at 900 MB (memory stage)"


def test_a_group_trained_for_a_level_flies_that_level_in_the_groups_place(tmp_path):
    models = []
    for suffix, source in (("", "policy1"), ("_hard", "policy1_hard")):
        for prec in ("fp32", "int8"):
            models.append(tmp_path / f"tiny{suffix}_{prec}.onnx")
            shutil.copy(MODELS / f"{source}_{prec}.onnx", models[-1])
    out = tmp_path / "study"
    proc = study(
        "--sim-only", "--models", *map(str, models), "--episodes", "2", "--levels", "default", "hard",
        "--timing-rounds", "1", "--timing-acts", "10", "--out", str(out), "--quiet",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = json.loads((out / "study.json").read_text())
    flown = {key: [Path(r["policy"]).name for r in cell["runs"]] for key, cell in result["cells"].items()}
    assert flown == {
        "default/tiny": ["tiny_fp32.onnx", "tiny_int8.onnx"],
        "hard/tiny": ["tiny_hard_fp32.onnx", "tiny_hard_int8.onnx"],
    }
    assert {(r["level"], r["group"], Path(r["model"]).name) for r in result["rows"]} == {
        ("default", "tiny", "tiny_fp32.onnx"), ("default", "tiny", "tiny_int8.onnx"),
        ("hard", "tiny", "tiny_hard_fp32.onnx"), ("hard", "tiny", "tiny_hard_int8.onnx"),
    }  # fmt: skip
    assert {Path(m).name for m in result["timing"]["tiny"]["models"]} == {p.name for p in models}


def test_a_level_group_without_its_own_fp32_is_one_line(tmp_path):
    for name, source in (
        ("tiny_fp32", "policy1_fp32"),
        ("tiny_int8", "policy1_int8"),
        ("tiny_hard_int8", "policy1_hard_int8"),
    ):
        shutil.copy(MODELS / f"{source}.onnx", tmp_path / f"{name}.onnx")
    proc = study(
        "--sim-only", "--models", *sorted(map(str, tmp_path.glob("*.onnx"))), "--levels", "default", "hard",
        "--out", str(tmp_path / "s"),
    )  # fmt: skip
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0
    assert "tiny_hard has no fp32 model (tiny_hard_fp32.onnx)" in proc.stderr


def test_the_timing_pass_feeds_each_model_the_observation_it_takes(tmp_path):
    """A group whose level models take the attitude values (a level's own models join its group) is timed with
    each model on its own observation, recorded from the same flights; one hil.run flies one observation."""
    from attitude_models import plain_and_attitude_policies

    from airq_cli import UserError
    from deployment_study.study import Model, StudyArgs, recorded_observations, timing_pass
    from hil.setup import policy_metadata, shared_observation

    plain, attitude = plain_and_attitude_policies("easy")
    (tmp_path / "plain.onnx").write_bytes(plain)
    (tmp_path / "attitude.onnx").write_bytes(attitude)
    versioned = recorded_observations(["easy"], 0, 12, policy_metadata(str(tmp_path / "attitude.onnx")))
    level = recorded_observations(["easy"], 0, 12, policy_metadata(str(tmp_path / "plain.onnx")))
    assert versioned.shape == (12, 1037) and level.shape == (12, 1032)
    assert np.array_equal(versioned[:, :1032], level)  # the same flights: the heuristic reads depth and state only
    models = [Model(str(tmp_path / "plain.onnx"), "toy", "fp32"), Model(str(tmp_path / "attitude.onnx"), "toy", "int8")]
    args = StudyArgs(models=[m.path for m in models], sim_only=True, timing_rounds=1, timing_acts=12)
    timed = timing_pass(models, {models[0].path: level, models[1].path: versioned}, args, None)
    assert all(t.device_inference_us.p50 > 0 for t in timed.models.values()) and len(timed.models) == 2
    with pytest.raises(UserError, match="trained on different observations"):
        shared_observation([m.path for m in models])


def test_the_delay_flights_give_each_model_its_own_observation(tmp_path):
    """The latency stage and the dynamics-gap cells rebuild a level by name: an attitude model flies it with the
    attitude values and the same episodes as its plain twin."""
    from attitude_models import plain_and_attitude_policies

    from deployment_study import dynamics_gap, latency_stage

    paths = {}
    for name, onnx in zip(("plain", "attitude"), plain_and_attitude_policies("easy")):
        paths[name] = tmp_path / f"{name}.onnx"
        paths[name].write_bytes(onnx)
    delayed = {
        n: latency_stage.fly(str(p), "easy", 4, 0, 120.0, num_envs=2, backend="mujoco") for n, p in paths.items()
    }
    assert delayed["plain"].outcomes == delayed["attitude"].outcomes
    cells = {n: dynamics_gap.fly(tmp_path / n, str(p), "easy", "mujoco", 4, 0, 2, 0.3) for n, p in paths.items()}
    assert (
        cells["plain"].success == cells["attitude"].success
        and cells["plain"].tilt_max_deg == cells["attitude"].tilt_max_deg
    )


def test_a_cell_whose_model_file_changed_is_not_taken_as_finished(finished, tiny_models, tmp_path):
    """A finished cell is reused only for the same model files: a retrained or re-quantized model under the same
    name is flown again (and its group timed again), never reported with the old file's episodes."""
    from deployment_study.study import _finished_report

    out, proc = finished
    assert proc.returncode == 0, proc.stderr[-2000:]
    cell = next(p.parent for p in (out / "cells").rglob("report.json"))
    report = json.loads((cell / "report.json").read_text())
    paths = [r["policy"] for r in report["runs"]]
    assert _finished_report(cell, paths, 3) is not None
    copies = []
    for p in paths:  # the same files elsewhere, one of them changed by a byte of metadata
        copies.append(tmp_path / Path(p).name)
        shutil.copy(p, copies[-1])
    moved = json.loads((cell / "report.json").read_text())
    for run, copy in zip(moved["runs"], copies):
        run["policy"] = str(copy)
    (tmp_path / "cell").mkdir()
    (tmp_path / "cell" / "report.json").write_text(json.dumps(moved))
    assert _finished_report(tmp_path / "cell", list(map(str, copies)), 3) is not None
    import onnx

    model = onnx.load(str(copies[-1]))
    onnx.helper.set_model_props(model, {**{m.key: m.value for m in model.metadata_props}, "airq.note": "retrained"})
    onnx.save(model, str(copies[-1]))
    assert _finished_report(tmp_path / "cell", list(map(str, copies)), 3) is None
    timing = json.loads(next((out / "timing").glob("*.json")).read_text())
    assert all(len(t["sha256"]) == 64 for t in timing["models"].values())  # what the timing pass is checked against
