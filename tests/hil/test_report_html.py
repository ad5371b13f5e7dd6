"""hil.run's report.html: a real run (Policy I fp32 and int8 on the hard level, where the first episodes both
succeed and collide), its page opened in headless Chromium (tests/report_pages.py) and compared with report.json."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from report_pages import check_page  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
POLICIES = [ROOT / "models" / "policy1_fp32.onnx", ROOT / "models" / "policy1_int8.onnx"]
# What a reader looks for first, per policy and per comparison: each must be on the page, read from report.json.
RUN_KEYS = (
    "outcomes.success_rate",
    "outcomes.success_ci95.0",
    "outcomes.success_ci95.1",
    "outcomes.collision_rate",
    "actuation_hz",
    "round_trip_us.p50",
    "round_trip_us.p99",
    "device_inference_us.p50",
    "device_memory.peak_rss_bytes",
    "model_bytes",
    "deadline_misses",
)
COMPARISON_KEYS = (
    "success_difference.diff",
    "success_difference.low",
    "success_difference.high",
    "success_difference.mcnemar_p",
    "inference_speedup",
    "peak_rss_ratio",
)
GALLERY = (
    "[...document.querySelectorAll('#trajectories figure')].map(f => [f.dataset.figure, f.dataset.outcome, "
    "f.closest('.gallery').id, f.querySelector('img').naturalWidth])"
)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("hil")
    args = [sys.executable, "-m", "hil.run", "--quiet", "--sim-only", "--episodes", "6", "--level", "hard"]
    args += [a for p in POLICIES for a in ("--policy", str(p))]
    # a generous deadline: this checks the page, a CI hiccup must not turn an act into a fail-safe
    proc = subprocess.run(
        [*args, "--seed", "0", "--deadline-ms", "2000", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


def test_report_html_shows_report_json_in_chromium(run_dir):
    report = json.loads((run_dir / "report.json").read_text())
    required = [f"runs.{i}.{k}" for i in range(len(report["runs"])) for k in RUN_KEYS]
    required += [f"comparisons.0.{k}" for k in COMPARISON_KEYS] + ["command", "deadline_ms"]
    loaded = check_page(run_dir / "report.html", report, required, GALLERY)
    # the gallery: every trajectory PNG the run drew, under the outcome report.json gives its episode
    drawn = sorted(p.name for p in run_dir.glob("trajectory_*.png"))
    assert sorted(name for name, *_ in loaded.found) == drawn
    outcome = {
        f"trajectory_{Path(run['policy']).stem}_ep{e['episode']}.png": e["outcome"]
        for run in report["runs"]
        for e in run["episodes"]
    }
    for name, shown, gallery, width in loaded.found:
        assert shown == outcome[name] and width > 0, name
        assert gallery == ("gallery-successes" if shown == "success" else "gallery-failures"), name
    assert {"gallery-successes", "gallery-failures"} <= {g for _, _, g, _ in loaded.found}


def test_report_html_renders_other_kinds_of_run(run_dir, tmp_path):
    """One policy (nothing to compare), a remote device (no profile), latency timing, and a warning with markup
    in it: the page renders, and shows the warning as text."""
    from hil.report_html import write_run_html

    report = json.loads((run_dir / "report.json").read_text())
    report |= {
        "runs": report["runs"][:1],
        "comparisons": [],
        "profile": None,
        "mode": "device raspberrypi.local:5555",
        "timing": {"mode": "latency", "source": "fixed:20", "device_rate": False, "rate_hz": None},
        "warnings": ["policy1_int8.onnx: <b>saturates</b> & more"],
    }
    report["args"] |= {"timing": "latency", "latency": "fixed:20"}
    page = write_run_html(report, run_dir.glob("*.png"), out_dir=tmp_path).read_text()
    assert "&lt;b&gt;saturates&lt;/b&gt; &amp; more" in page and "<b>saturates" not in page
    assert 'id="comparison"' not in page and "each action lands fixed:20 late" in page
    assert page.count("trajectory_policy1_fp32_ep") >= 3 and "trajectory_policy1_int8" not in page


def test_report_html_names_the_autopilot_that_flew(run_dir, tmp_path):
    """--backend autopilot: the page says which autopilot, firmware and frame flew, in which clock, and what getting
    it ready took."""
    from hil.report_html import write_run_html

    report = json.loads((run_dir / "report.json").read_text())
    report |= {
        "backend": "autopilot",
        "vehicle": {
            "autopilot": "px4", "firmware": "1.16.0", "firmware_git": "752ecd3d1b000000", "frame": "QUADROTOR",
            "frame_params": {"SYS_AUTOSTART": 10040.0}, "telemetry": "udpin:127.0.0.1:14550", "telemetry_hz": 50.0,
            "speedup": 0.989, "settle_s_mean": 3.1,
            "preflight": [{"autopilot": "px4", "took_off": True, "arm_attempts": 3, "ready_s": 13.7, "altitude_m": 5.05,
                           "refusals": ["arming refused (MAV_RESULT_TEMPORARILY_REJECTED): <not ready>"]}],
            "bridge_actuator": None,
        },
    }  # fmt: skip
    page = write_run_html(report, run_dir.glob("*.png"), out_dir=tmp_path).read_text()
    assert "<b>px4 1.16.0</b> (git 752ecd3d1b000000), frame QUADROTOR, SYS_AUTOSTART 10040" in page
    assert 'data-key="vehicle.speedup" data-value="0.989"' in page and "the autopilot's own clock" in page
    assert 'data-key="vehicle.preflight.0.arm_attempts" data-value="3"' in page and "&lt;not ready&gt;" in page
    assert "a miss leaves the last setpoint in force" in page
