"""hil.bench runs the real loop, its in-process baseline and the bare-echo loop, and writes consistent figures."""

import json
import subprocess
import sys

from firmware_bridge.toy_policy import build_mlp_policy


def test_bench_reports_loop_baseline_and_echo_per_repeat(tmp_path):
    policy = tmp_path / "p.onnx"
    policy.write_bytes(build_mlp_policy(1032, 32))
    out = tmp_path / "bench.json"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "hil.bench",
            "--policy",
            str(policy),
            "--episodes",
            "2",
            "--level",
            "easy",
            "--repeats",
            "2",
            "--spin-us",
            "0",
            "--spin-us",
            "300",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert r.returncode == 0, r.stderr
    rows = json.loads(out.read_text())["rows"]
    assert [row["spin_us"] for row in rows] == [0, 300]  # one row per (policy, spin), both in the same run
    for row in rows:
        assert row["steps"] > 0 and row["actuation_hz"] > 0 and row["in_process_hz"] > 0
        assert abs(row["closed_loop_over_in_process"] - row["actuation_hz"] / row["in_process_hz"]) < 1e-9
        assert row["round_trip_us"]["p50"] > row["device_inference_us"]["p50"] > 0
        assert [rep["repeat"] for rep in row["repeats"]] == [0, 1]
        assert len(row["overhead_p50_us_by_repeat"]) == len(row["echo_round_trip_p50_us_by_repeat"]) == 2
        assert all(e > 0 for e in row["echo_round_trip_p50_us_by_repeat"])
        assert row["overhead_minus_echo_p50_us_by_repeat"] == [
            o - e for o, e in zip(row["overhead_p50_us_by_repeat"], row["echo_round_trip_p50_us_by_repeat"])
        ]
        assert row["echo_round_trip_us"]["p50"] > 0 and row["steps"] == rows[0]["steps"]
        assert all(rep["echo_deadline_misses"] >= 0 and rep["deadline_misses"] >= 0 for rep in row["repeats"])
    assert "ovh p50 (min-max)" in r.stdout and "policy" in r.stdout
    # on what int8 kernels and with which packages it was measured
    from firmware_bridge.int8_kernels import int8_kernels

    report = json.loads(out.read_text())
    assert report["int8_kernels"] == int8_kernels().as_dict() and "onnxruntime" in report["versions"]
    assert int8_kernels().describe() in r.stdout.splitlines()[0]


def test_bench_bad_arguments_are_clear_errors(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "hil.bench", "--policy", str(tmp_path / "missing.onnx")], capture_output=True, text=True
    )
    assert r.returncode == 2 and "policy file not found" in r.stderr
    policy = tmp_path / "p.onnx"
    policy.write_bytes(build_mlp_policy(1032, 32))
    for flags, fragment in (
        (["--repeats", "0"], "--repeats must be >= 1"),
        (["--spin-us", "-5"], "--spin-us must be >= 0"),
        (["--spin-us", "5", "--spin-us", "5"], "must differ"),
    ):
        r = subprocess.run(
            [sys.executable, "-m", "hil.bench", "--policy", str(policy), *flags], capture_output=True, text=True
        )
        assert r.returncode == 2 and fragment in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
