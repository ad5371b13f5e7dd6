"""hil.bench runs the real loop and its in-process baseline and writes consistent figures."""
import json
import subprocess
import sys

from firmware_bridge.toy_policy import build_mlp_policy


def test_bench_reports_loop_and_baseline(tmp_path):
    policy = tmp_path / "p.onnx"
    policy.write_bytes(build_mlp_policy(1032, 32))
    out = tmp_path / "bench.json"
    r = subprocess.run([sys.executable, "-m", "hil.bench", "--policy", str(policy), "--episodes", "2", "--level", "easy",
                        "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    (row,) = json.loads(out.read_text())["rows"]
    assert row["steps"] > 0 and row["actuation_hz"] > 0 and row["in_process_hz"] > 0
    assert abs(row["closed_loop_over_in_process"] - row["actuation_hz"] / row["in_process_hz"]) < 1e-9
    assert row["round_trip_us"]["p50"] > row["device_inference_us"]["p50"] > 0


def test_bench_without_policies_is_a_clear_error(tmp_path):
    r = subprocess.run([sys.executable, "-m", "hil.bench", "--policy", str(tmp_path / "missing.onnx")], capture_output=True, text=True)
    assert r.returncode == 2 and "policy file not found" in r.stderr
