"""hil.run end to end: a real bridge process over TCP, real onnxruntime, the embedded simulator."""

import json
import subprocess
import sys
import time

import pytest

from firmware_bridge.toy_policy import build_mlp_policy


def hil_run(*args, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "hil.run", "--quiet", *map(str, args)], capture_output=True, text=True, timeout=timeout
    )


def test_sim_only_run_reports_consistent_figures(toy_policies, tmp_path):
    small, big = toy_policies
    # a generous deadline: this test checks bookkeeping, a CI hiccup must not turn an act into a fail-safe
    r = hil_run(
        "--policy",
        small,
        "--policy",
        big,
        "--sim-only",
        "--episodes",
        "4",
        "--level",
        "easy",
        "--deadline-ms",
        "2000",
        "--out",
        tmp_path,
    )
    assert r.returncode == 0, r.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert [run["policy"] for run in report["runs"]] == [str(small), str(big)]
    for run in report["runs"]:
        o = run["outcomes"]
        assert o["episodes"] == 4 == len(run["episodes"])
        assert sum(e["outcome"] == "success" for e in run["episodes"]) == round(o["success_rate"] * 4)
        assert abs(o["success_rate"] + o["collision_rate"] + o["timeout_rate"] - 1) < 1e-9
        assert run["steps"] == sum(e["steps"] for e in run["episodes"]) > 0
        # every act the host counted reached the device exactly once, in order
        assert run["device_counters"]["acts"] == run["steps"] and run["device_counters"]["errors"] == 0
        assert run["act_seq_increasing"]
        assert run["actuation_hz"] > 0 and run["round_trip_us"]["p50"] > run["device_inference_us"]["p50"] > 0
        assert run["round_trip_us"]["p50"] <= run["round_trip_us"]["p95"] <= run["round_trip_us"]["p99"]
        mem = run["device_memory"]
        assert 0 < mem["rss_bytes"] <= mem["peak_rss_bytes"] and len(mem["samples"]) >= 2
        assert run["model_bytes"] > 0 and run["deadline_misses"] == 0
    # same seeded episodes for both policies: starts and zones pair up
    a, b = (run["episodes"] for run in report["runs"])
    assert [(e["seed"], e["zone"], e["start_distance"]) for e in a] == [
        (e["seed"], e["zone"], e["start_distance"]) for e in b
    ]
    (cmp,) = report["comparisons"]
    assert cmp["model_size_ratio"] < 1 and cmp["success_difference"]["n"] == 4
    for name in ("latency_histogram.png", "memory_over_time.png"):
        assert (tmp_path / name).stat().st_size > 1000
    assert "speed-up" in r.stdout and "small.onnx" in r.stdout
    # the versions it was measured with: this host's packages, and the device's from the bridge
    import numpy
    import onnxruntime

    host = report["host_versions"]
    assert host["numpy"] == numpy.__version__ and host["onnxruntime"] == onnxruntime.__version__
    assert {"airq", "python", "torch", "gymnasium", "pyzmq", "msgpack"} <= set(host)
    assert report["device"]["device"]["onnxruntime_version"] == onnxruntime.__version__
    assert f"onnxruntime {onnxruntime.__version__}" in r.stdout


def test_paced_run_counts_deadline_misses(toy_policies, tmp_path):
    small, _ = toy_policies
    # 20 kHz is beyond what the loop can do: nearly every step misses its deadline
    r = hil_run(
        "--policy", small, "--sim-only", "--episodes", "1", "--level", "easy", "--rate-hz", "20000", "--out", tmp_path
    )
    assert r.returncode == 0, r.stderr
    run = json.loads((tmp_path / "report.json").read_text())["runs"][0]
    assert run["deadline_misses"] > 0.5 * run["steps"]
    r = hil_run(
        "--policy", small, "--sim-only", "--episodes", "1", "--level", "easy", "--rate-hz", "200", "--out", tmp_path
    )
    run = json.loads((tmp_path / "report.json").read_text())["runs"][0]
    assert run["actuation_hz"] < 210


def test_profile_pins_the_bridge(toy_policies, tmp_path):
    small, _ = toy_policies
    r = hil_run(
        "--policy", small, "--sim-only", "--profile", "pi3b", "--episodes", "1", "--level", "easy", "--out", tmp_path
    )
    assert r.returncode == 0, r.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["profile"]["name"] == "pi3b"
    assert report["device"]["device"]["usable_cores"] == 1
    assert "not emulated" in r.stdout


def test_missing_policy_and_bad_level_exit_2(toy_policies, tmp_path):
    r = hil_run("--policy", tmp_path / "nope.onnx", "--sim-only")
    assert r.returncode == 2 and r.stderr.strip() == f"error: policy file not found: {tmp_path / 'nope.onnx'}"
    r = hil_run("--policy", toy_policies[0], "--sim-only", "--level", "moon")
    assert r.returncode == 2 and "unknown level 'moon'" in r.stderr and r.stderr.count("\n") == 1
    (tmp_path / "notes.onnx").write_text("not a model\n")
    r = hil_run("--policy", tmp_path / "notes.onnx", "--sim-only", "--out", tmp_path / "run")
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith(f"error: {tmp_path / 'notes.onnx'}: not a loadable ONNX model")


def test_observation_size_mismatch_is_a_clear_error(tmp_path):
    wrong = tmp_path / "wrong.onnx"
    wrong.write_bytes(build_mlp_policy(100, 16))
    r = hil_run("--policy", wrong, "--sim-only", "--episodes", "1", "--out", tmp_path)
    assert r.returncode == 2 and "takes 100 observations but level 'default' gives 1032" in r.stderr


def test_the_run_gives_the_policies_the_observation_they_were_trained_on(tmp_path):
    """A policy on the versioned observation flies a level named alone with the attitude values its metadata asks
    for, through the bridge; policies trained on different observations cannot share the run's one simulator."""
    from attitude_models import plain_and_attitude_policies

    plain, attitude = plain_and_attitude_policies("easy")
    (tmp_path / "plain.onnx").write_bytes(plain)
    (tmp_path / "attitude.onnx").write_bytes(attitude)
    flown = {}
    for name in ("plain", "attitude"):
        r = hil_run("--policy", tmp_path / f"{name}.onnx", "--sim-only", "--backend", "mujoco", "--level", "easy",
                    "--episodes", "2", "--deadline-ms", "2000", "--out", tmp_path / name)  # fmt: skip
        assert r.returncode == 0, r.stderr
        report = json.loads((tmp_path / name / "report.json").read_text())
        (run,) = report["runs"]
        assert run["device_counters"]["acts"] == run["steps"] > 0 and run["device_counters"]["errors"] == 0
        flown[name] = (report["obs_dim"], [(e["outcome"], e["steps"]) for e in run["episodes"]])
    # the attitude values reach the device (5 more) and change nothing else: zero weights fly the same episodes
    assert flown["plain"][0] == 1032 and flown["attitude"][0] == 1037 and flown["plain"][1] == flown["attitude"][1]
    r = hil_run("--policy", tmp_path / "plain.onnx", "--policy", tmp_path / "attitude.onnx", "--sim-only",
                "--level", "easy", "--out", tmp_path / "mixed")  # fmt: skip
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "trained on different observations" in r.stderr and "observation.attitude=True" in r.stderr
    assert not (tmp_path / "mixed" / "run.jsonl").exists()


def test_unreachable_and_unresolvable_hosts_fail_fast(toy_policies, tmp_path):
    for host, words in (("127.0.0.1", "connection refused"), ("nonexistent.invalid", "cannot resolve host")):
        t0 = time.monotonic()
        r = hil_run("--policy", toy_policies[0], "--host", host, "--port", "1", "--timeout", "0.5", "--out", tmp_path)
        assert time.monotonic() - t0 < 20
        assert r.returncode == 1 and words in r.stderr and r.stderr.count("\n") == 1, r.stderr


@pytest.mark.parametrize("scheme", ["u8s7", "u8s8"])
def test_report_says_which_int8_kernels_and_warns_on_a_saturating_file(tmp_path, scheme):
    """The header and report.json name the device's int8 kernel class; a u8s8 file (full-range weights) flown
    where the device's U8S8 kernels saturate gets a one-line warning, kept in the report; u8s7 never does."""
    from pathlib import Path

    from firmware_bridge.int8_kernels import int8_kernels
    from quantize.ptq import StaticInt8Options, quantize_file

    model = tmp_path / f"policy1_{scheme}.onnx"
    src = Path(__file__).resolve().parents[2] / "models" / "policy1_fp32.onnx"
    quantize_file(
        src, "int8", model, calibration_episodes=2, heldout_episodes=0, options=StaticInt8Options(scheme=scheme)
    )
    r = hil_run(
        "--policy",
        model,
        "--sim-only",
        "--episodes",
        "1",
        "--level",
        "easy",
        "--deadline-ms",
        "2000",
        "--out",
        tmp_path / "out",
    )
    assert r.returncode == 0, r.stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["device"]["device"]["int8_kernels"] == int8_kernels().as_dict()
    assert f"device {int8_kernels().describe()}" in r.stdout
    saturates = scheme == "u8s8" and not int8_kernels().u8s8_exact
    warnings = [line for line in r.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == int(saturates) and len(report.get("warnings", [])) == int(saturates)
    if saturates:
        assert "policy1_u8s8.onnx" in warnings[0] and "not computed exactly" in warnings[0]
