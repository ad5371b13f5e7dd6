"""Real processes killed for real: the bridge under a running hil.run, and hil.run itself.

* SIGKILL the local bridge mid-episode: the host flies hover within 2 control periods, logs the
  outage, restarts the bridge, re-uploads the policy (sha256-verified) and finishes the run with
  every episode recorded once, the one that spanned the outage marked.
* SIGKILL / SIGINT hil.run mid-run: the log holds every finished episode, and --resume flies only
  the missing ones, with the same seeds, ending with the same results as an uninterrupted run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from reliability_helpers import NAV_OBS_DIM, episodes, events, hil_run_command, killed_on_exit, run_log, wait_for_log
from reliability_helpers import finish as finish_within

from firmware_bridge.protocol import sha256_hex
from firmware_bridge.toy_policy import build_mlp_policy

RATE_HZ = 10.0  # the simulator's own dt: one control period = 100 ms
PERIOD_S = 1.0 / RATE_HZ
STEPS = 30  # per episode: 3 s at 10 Hz
EPISODES = 3
RUN_TIMEOUT_S = 120
FAST_HZ = 50.0  # for the resume tests, which compare results rather than time them


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("kill") / "policy.onnx"
    path.write_bytes(build_mlp_policy(NAV_OBS_DIM, 32, seed=4))
    return path


def _default_sigint() -> None:
    # A job started in the background (CI, nohup, `cmd &`) inherits SIGINT as ignored, and Python then
    # never raises KeyboardInterrupt: give the child the default, as a terminal's Ctrl-C would meet it.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def paced_run(policy: Path, out: Path, *extra: object, rate_hz: float = RATE_HZ) -> subprocess.Popen:
    return subprocess.Popen(
        hil_run_command(
            "--policy",
            policy,
            "--sim-only",
            "--level",
            "easy",
            "--episodes",
            EPISODES,
            "--max-steps",
            STEPS,
            "--rate-hz",
            rate_hz,
            "--out",
            out,
            *extra,
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_default_sigint,
    )


def finish(process: subprocess.Popen) -> tuple[int, str, str]:
    return finish_within(process, RUN_TIMEOUT_S)


def test_sigkill_bridge_mid_episode_fails_safe_and_recovers(policy: Path, tmp_path: Path) -> None:
    with killed_on_exit(paced_run(policy, tmp_path)) as run:
        records = wait_for_log(tmp_path, lambda r: len(episodes(r)) >= 1 and events(r, "bridge_started"), 60, run)
        time.sleep(1.0)  # well inside episode 1 (3 s long)
        bridge_pid = events(records, "bridge_started")[0]["pid"]
        killed_at = time.monotonic()  # CLOCK_MONOTONIC: the same clock hil.run stamps its events with
        os.kill(bridge_pid, signal.SIGKILL)
        code, stdout, stderr = finish(run)
    assert code == 0, stderr[-3000:]
    records = run_log(tmp_path)

    # Fail-safe within 2 control periods of the kill.
    (failsafe,) = [e for e in events(records, "failsafe") if e["t_mono"] > killed_at][:1]
    kill_to_failsafe_s = failsafe["t_mono"] - killed_at
    assert 0 < kill_to_failsafe_s <= 2 * PERIOD_S, kill_to_failsafe_s

    # The outage is logged, the bridge restarted and the policy re-uploaded and verified.
    (outage,) = [e for e in events(records, "outage_start") if e["t_mono"] > killed_at]
    (ended,) = [e for e in events(records, "outage_end") if e["t_mono"] > killed_at]
    (restart,) = events(records, "bridge_restarted")
    assert restart["old_pid"] == bridge_pid and restart["exit_code"] == -signal.SIGKILL and restart["pid"] != bridge_pid
    (upload,) = events(records, "policy_reuploaded")
    assert upload["sha256"] == sha256_hex(policy.read_bytes())
    recovery_s = ended["t_mono"] - killed_at
    print(
        f"\nkill -> fail-safe {kill_to_failsafe_s * 1e3:.0f} ms (period {PERIOD_S * 1e3:.0f} ms), "
        f"kill -> flying again {recovery_s:.2f} s, {ended['misses']} fail-safe steps"
    )

    # Every episode recorded exactly once; the one that spanned the outage is marked.
    eps = episodes(records)
    assert sorted(e["episode"] for e in eps) == list(range(EPISODES))
    marked = [e["episode"] for e in eps if e["spans_outage"]]
    assert outage["episode"] in marked and marked == [1], marked
    assert sum(e["failsafe_steps"] for e in eps) >= ended["misses"] > 0

    report = json.loads((tmp_path / "report.json").read_text())
    rel = report["runs"][0]["reliability"]
    assert rel["outages"] >= 1 and rel["bridge_restarts"] == 1 and rel["policy_reuploads"] == 1
    assert rel["episodes_spanning_outage"] == [1]
    assert "outage" in stdout


@pytest.fixture(scope="module")
def reference(policy: Path, tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    """The uninterrupted run both interrupted runs are compared with: the same command for each, so it is flown
    once per module (tests/conftest.py keeps the two on one worker)."""
    out = tmp_path_factory.mktemp("reference")
    code, _, stderr = finish(paced_run(policy, out, "--deadline-ms", 5000, rate_hz=FAST_HZ))
    assert code == 0, stderr
    return sorted(episodes(run_log(out)), key=lambda e: e["episode"])


def outcome(e: dict) -> tuple:
    return e["episode"], e["seed"], e["outcome"], e["steps"], round(e["episode_return"], 6)


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGINT])
def test_interrupted_run_leaves_a_valid_log_and_resumes(
    policy: Path, reference: list[dict], tmp_path: Path, how: signal.Signals
) -> None:
    out = tmp_path / "interrupted"
    # A generous deadline: this test compares results, so no act may turn into a fail-safe.
    with killed_on_exit(paced_run(policy, out, "--deadline-ms", 5000, rate_hz=FAST_HZ)) as run:
        wait_for_log(out, lambda r: len(episodes(r)) >= 1, 60, run)
        time.sleep(0.2)  # mid-episode 1 (0.6 s long)
        run.send_signal(how)
        code, _, stderr = finish(run)
    if how == signal.SIGINT:
        assert code == 130 and f"--resume {out}" in stderr, stderr
    else:
        assert code == -signal.SIGKILL
    logged = episodes(run_log(out))
    assert 1 <= len(logged) < EPISODES  # finished ones kept, the one in flight not recorded
    assert [outcome(e) for e in logged] == [outcome(e) for e in reference[: len(logged)]]

    # A torn last line, as a kill during write() could leave, is cut off on resume.
    with open(out / "run.jsonl", "ab") as f:
        f.write(b'{"kind": "episode", "policy": "torn')
    code, stdout, stderr = finish(
        subprocess.Popen(hil_run_command("--resume", out), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    )
    assert code == 0, stderr[-3000:]
    resumed = sorted(episodes(run_log(out)), key=lambda e: e["episode"])
    assert [outcome(e) for e in resumed] == [outcome(e) for e in reference]  # same seeds, same results, none twice
    report = json.loads((out / "report.json").read_text())
    assert [e["episode"] for e in report["runs"][0]["episodes"]] == list(range(EPISODES))
    assert any(r.get("kind") == "resume" for r in run_log(out))


def test_resume_refuses_a_changed_policy(policy: Path, tmp_path: Path) -> None:
    own = tmp_path / "own.onnx"
    own.write_bytes(policy.read_bytes())
    out = tmp_path / "run"
    with killed_on_exit(paced_run(own, out)) as run:
        wait_for_log(out, lambda r: len(episodes(r)) >= 1, 60, run)
        run.send_signal(signal.SIGINT)
        finish(run)
    own.write_bytes(build_mlp_policy(NAV_OBS_DIM, 32, seed=99))
    result = subprocess.run(hil_run_command("--resume", out), capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "changed since the run started" in result.stderr
