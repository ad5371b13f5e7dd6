"""One short closed-loop HIL run through the emulated aarch64 bridge, as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from arm_helpers import FIGURES, REPO

pytestmark = pytest.mark.arm


def test_closed_loop_episode_through_emulated_bridge(policies, arm_stack, tmp_path):
    fp32 = next(p for p in policies if p.precision == "fp32")
    int8 = next(p for p in policies if p.precision == "int8")
    cmd = [sys.executable, "-m", "hil.run", "--policy", str(fp32.path), "--policy", str(int8.path), "--sim-only",
           "--device-arch", "aarch64", "--episodes", "1", "--level", "easy", "--quiet", "--out", str(tmp_path)]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["device"]["device"]["machine"] == "aarch64"
    assert "Cortex-A72" in report["device"]["device"]["cpu_model"]
    assert [run["policy"] for run in report["runs"]] == [str(fp32.path), str(int8.path)]
    for run in report["runs"]:
        assert run["outcomes"]["episodes"] == 1 and run["steps"] > 0
        assert run["device_counters"]["acts"] == run["steps"] and run["device_counters"]["errors"] == 0
        FIGURES.append(
            f"hil.run --device-arch aarch64, {run['policy'].rsplit('/', 1)[-1]} [{fp32.source}]: {run['steps']} steps, "
            f"outcome {run['episodes'][0]['outcome']}, round trip p50 {run['round_trip_us']['p50']:.0f} us, "
            f"actuation {run['actuation_hz']:.0f} Hz (emulated: ~10x slower than native, not a Pi figure)"
        )
    assert "Cortex-A72" in r.stdout
