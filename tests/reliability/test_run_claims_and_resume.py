"""What a failed, resumed or abandoned run leaves behind with real processes.

* A run or study that fails before recording anything claims nothing: the corrected rerun works, and
  an interrupted run already in that --out stays as it was, resumable.
* --resume adds up every session's deadline misses, outages, restarts, re-uploads and client retries,
  keeps the latency figures of policies finished before the interruption (from the log alone if
  report.json was lost), and a finished run resumes to nothing.
* --max-outage-s counts from the first unanswered request: the run gives up that long after the bridge
  died, not after the current episode has hovered to its end nor a retry cycle later.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from reliability_helpers import NAV_OBS_DIM, episodes, events, hil_run_command, killed_on_exit, run_log, wait_for_log
from reliability_helpers import finish as finish_within

from firmware_bridge.launcher import BridgeProcess
from firmware_bridge.toy_policy import build_mlp_policy

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def policies(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    folder = tmp_path_factory.mktemp("claims")
    paths = [folder / "first.onnx", folder / "second.onnx"]
    for seed, path in enumerate(paths):
        path.write_bytes(build_mlp_policy(NAV_OBS_DIM, 32, seed=10 + seed))
    return paths


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(*args: object, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(hil_run_command(*args), capture_output=True, text=True, timeout=timeout)


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # as a terminal's Ctrl-C meets it (see test_kill_and_resume)


def test_a_run_that_flies_nothing_leaves_no_claim(policies, tmp_path):
    out = tmp_path / "run"
    port = free_port()
    failed = run(
        "--policy",
        policies[0],
        "--host",
        "127.0.0.1",
        "--port",
        port,
        "--timeout",
        "0.2",
        "--episodes",
        2,
        "--level",
        "easy",
        "--max-steps",
        10,
        "--out",
        out,
    )
    assert failed.returncode == 1 and "no reply from bridge" in failed.stderr
    assert not (out / "run.jsonl").exists()  # was a header-only log
    wrong = tmp_path / "wrong.onnx"
    wrong.write_bytes(build_mlp_policy(NAV_OBS_DIM + 3, 8, seed=1))
    user_error = run("--policy", wrong, "--sim-only", "--episodes", 1, "--level", "easy", "--out", out)
    assert user_error.returncode == 2 and "observations" in user_error.stderr
    assert not (out / "run.jsonl").exists()
    with BridgeProcess([]) as bridge:  # the corrected run: a bridge is there
        corrected = run(
            "--policy",
            policies[0],
            "--host",
            "127.0.0.1",
            "--port",
            bridge.endpoint.rsplit(":", 1)[1],
            "--episodes",
            2,
            "--level",
            "easy",
            "--max-steps",
            10,
            "--out",
            out,
        )
    assert corrected.returncode == 0, corrected.stderr[-2000:]
    assert len(episodes(run_log(out))) == 2 and "previous run log kept" not in corrected.stderr


def test_a_failed_run_leaves_the_interrupted_run_before_it_resumable(policies, tmp_path):
    out = tmp_path / "run"
    command = hil_run_command(
        "--policy",
        policies[0],
        "--sim-only",
        "--level",
        "easy",
        "--episodes",
        3,
        "--max-steps",
        30,
        "--rate-hz",
        20,
        "--out",
        out,
    )
    with killed_on_exit(
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_default_sigint)
    ) as process:
        wait_for_log(out, lambda r: len(episodes(r)) >= 1, 60, process)
        process.send_signal(signal.SIGINT)
        code, _, stderr = finish_within(process, 60)
    assert code == 130, stderr[-2000:]
    interrupted = (out / "run.jsonl").read_bytes()
    # A new run into the same --out that cannot reach its bridge: it flies nothing, so it must not
    # move the interrupted run's log aside (it was renamed to run.DATE.jsonl and could not be resumed).
    failed = run(
        "--policy",
        policies[1],
        "--host",
        "127.0.0.1",
        "--port",
        free_port(),
        "--timeout",
        "0.2",
        "--episodes",
        2,
        "--level",
        "easy",
        "--out",
        out,
    )
    assert failed.returncode == 1 and "no reply from bridge" in failed.stderr, failed.stderr[-2000:]
    assert (out / "run.jsonl").read_bytes() == interrupted
    assert sorted(p.name for p in out.glob("run*.jsonl")) == ["run.jsonl"]
    resumed = run("--resume", out)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert sorted(e["episode"] for e in episodes(run_log(out))) == [0, 1, 2]


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGKILL], ids=["SIGINT", "SIGKILL"])
def test_a_run_interrupted_before_its_first_episode_leaves_nothing(policies, tmp_path, how):
    out = tmp_path / "early"
    # 50 s episodes (100 steps at 2 Hz): 8 s after the start the first one is surely in flight.
    command = hil_run_command(
        "--policy",
        policies[0],
        "--sim-only",
        "--level",
        "easy",
        "--episodes",
        2,
        "--max-steps",
        100,
        "--rate-hz",
        2,
        "--out",
        out,
    )
    with killed_on_exit(
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_default_sigint)
    ) as process:
        time.sleep(8)
        assert process.poll() is None
        process.send_signal(how)
        code, _, stderr = finish_within(process, 60)
    if how == signal.SIGINT:
        assert code == 130 and "nothing written" in stderr and "--resume" not in stderr, stderr[-2000:]
    else:  # no cleanup ran: what is not on disk was never written (no header-only run.jsonl)
        assert code == -signal.SIGKILL
    assert not list(out.glob("run*.jsonl")) and not (out / "report.json").exists()


def test_a_study_that_flies_nothing_leaves_no_claim(tmp_path):
    out = tmp_path / "study"
    models = []
    for precision in ("fp32", "int8"):  # the study reads GROUP_PRECISION from the names
        models.append(tmp_path / f"tiny_{precision}.onnx")
        models[-1].write_bytes((ROOT / "models" / f"policy1_{precision}.onnx").read_bytes())
    common = [
        "--models",
        *map(str, models),
        "--episodes",
        "1",
        "--levels",
        "easy",
        "--timing-rounds",
        "1",
        "--timing-acts",
        "5",
        "--no-memory-study",
        "--out",
        str(out),
        "--quiet",
    ]
    failed = subprocess.run(
        [sys.executable, "-m", "deployment_study", "--host", "127.0.0.1", "--port", str(free_port()), *common],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert failed.returncode != 0 and not (out / "study_args.json").exists(), failed.stderr[-2000:]
    with BridgeProcess([]) as bridge:
        port = bridge.endpoint.rsplit(":", 1)[1]
        corrected = subprocess.run(
            [sys.executable, "-m", "deployment_study", "--host", "127.0.0.1", "--port", port, *common],
            capture_output=True,
            text=True,
            timeout=600,
            cwd=ROOT,
        )
    assert corrected.returncode == 0, corrected.stderr[-3000:]
    assert (out / "study_args.json").exists() and "other arguments" not in corrected.stderr


@pytest.fixture(scope="module")
def first_session(policies, tmp_path_factory) -> tuple[Path, int, str]:
    """The interrupted first session both resume tests start from (the same command and interruptions for
    each, so it is flown once per module; tests/conftest.py keeps the two on one worker): its --out folder,
    exit code and stderr. Each test checks it and resumes a copy of its own."""
    out = tmp_path_factory.mktemp("first-session") / "resumed"
    command = hil_run_command(
        *(a for p in policies for a in ("--policy", p)),
        "--sim-only",
        "--level",
        "easy",
        "--episodes",
        3,
        "--max-steps",
        30,
        "--rate-hz",
        10,
        "--out",
        out,
    )
    with killed_on_exit(
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_default_sigint)
    ) as process:
        records = wait_for_log(out, lambda r: len(episodes(r)) >= 1 and events(r, "bridge_started"), 60, process)
        time.sleep(1.0)  # inside episode 1 of the first policy
        os.kill(events(records, "bridge_started")[0]["pid"], signal.SIGKILL)  # the supervisor restarts it
        wait_for_log(out, lambda r: any(e["policy_index"] == 1 for e in episodes(r)), 120, process)
        process.send_signal(signal.SIGINT)  # interrupted while flying the second policy
        code, _, stderr = finish_within(process, 60)
    return out, code, stderr


@pytest.mark.parametrize("report_lost", [False, True], ids=["report-kept", "report-lost"])
def test_resume_adds_up_every_session_and_keeps_finished_policies(first_session, tmp_path, report_lost):
    session_out, code, stderr = first_session
    out = tmp_path / "resumed"
    shutil.copytree(session_out, out)  # resumed (and changed) here, the first session's folder stays as it was
    assert code == 130, stderr[-2000:]
    first_rows = episodes(run_log(out))
    restarts = sum(e.get("bridge_restarts", 0) for e in first_rows)
    assert restarts == 1 and sum(e.get("policy_uploads", 0) for e in first_rows) == 1
    before = json.loads((out / "report.json").read_text())["runs"][0]  # written when the first policy ended
    if report_lost:
        # As a kill -9 right after the first policy's last episode reached the log would leave it:
        # neither report.json nor the policy's summary record. The resume rebuilds it from the rows.
        (out / "report.json").unlink()
        lines = (out / "run.jsonl").read_bytes().splitlines(keepends=True)
        (out / "run.jsonl").write_bytes(b"".join(line for line in lines if b'"kind": "policy_end"' not in line))

    resumed = run("--resume", out)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    rows = episodes(run_log(out))
    for index, summary in enumerate(report["runs"]):
        mine = [e for e in rows if e["policy_index"] == index]
        assert len(mine) == 3
        rel = summary["reliability"]
        assert rel["failsafe_steps"] == rel["deadline_misses"] == sum(e["failsafe_steps"] for e in mine)
        assert rel["outages"] == sum(e.get("outages", 0) for e in mine)
        assert rel["bridge_restarts"] == sum(e.get("bridge_restarts", 0) for e in mine)
        assert rel["policy_reuploads"] == sum(e.get("policy_uploads", 0) for e in mine)
        assert rel["reconnects"] == sum(e.get("reconnects", 0) for e in mine)
        assert summary["actuation_hz"] > 0 and summary["round_trip_us"]["p50"] > 0
        assert summary["acts"] == sum(e["acts"] for e in mine) > 0
        assert all("rtt_ns" not in e for e in summary["episodes"])  # the samples stay in the log
    assert report["runs"][0]["reliability"]["bridge_restarts"] == 1  # flown in the first session
    if report_lost:  # rebuilt from the rows: the same episodes, acts and latency samples
        for key in (
            "outcomes",
            "acts",
            "actuation_hz",
            "round_trip_us",
            "device_inference_us",
            "reliability",
            "sha256",
        ):
            assert report["runs"][0][key] == before[key], key
    else:
        assert report["runs"][0] == before  # the finished policy's summary is the one its session measured
    assert len(events(run_log(out), "bridge_started")) == 2 + 1  # first session: 2 policies; resume: the second

    # Resuming the finished run starts no bridge and leaves the report and the log as they are.
    report_bytes, log_bytes = (out / "report.json").read_bytes(), (out / "run.jsonl").read_bytes()
    again = run("--resume", out)
    assert again.returncode == 0 and "complete" in again.stdout, again.stderr
    assert (out / "report.json").read_bytes() == report_bytes and (out / "run.jsonl").read_bytes() == log_bytes
    assert len(events(run_log(out), "bridge_started")) == 3
    # With report.json gone (killed before writing it), a resume rebuilds it from the log, still flying nothing.
    (out / "report.json").unlink()
    rebuilt = run("--resume", out)
    assert rebuilt.returncode == 0, rebuilt.stderr[-2000:]
    assert json.loads((out / "report.json").read_text())["runs"] == json.loads(report_bytes)["runs"]
    assert (out / "run.jsonl").read_bytes() == log_bytes


def test_max_outage_counts_from_the_last_reply(policies, tmp_path):
    out = tmp_path / "outage"
    max_outage_s = 4.0
    with BridgeProcess([]) as bridge:
        port = bridge.endpoint.rsplit(":", 1)[1]
        # 3 s episodes at 20 Hz: the bridge dies 0.3 s into one, so ~2.7 s of it remain, less than the limit.
        command = hil_run_command(
            "--policy",
            policies[0],
            "--host",
            "127.0.0.1",
            "--port",
            port,
            "--level",
            "easy",
            "--episodes",
            20,
            "--max-steps",
            60,
            "--rate-hz",
            20,
            "--timeout",
            "0.2",
            "--max-outage-s",
            max_outage_s,
            "--out",
            out,
        )
        with killed_on_exit(
            subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        ) as process:
            wait_for_log(out, lambda r: len(episodes(r)) >= 1, 60, process)
            time.sleep(0.3)
            bridge.process.kill()
            killed_at = time.monotonic()
            code, _, stderr = finish_within(process, 60)
            gave_up_s = time.monotonic() - killed_at
    print(f"\nbridge killed -> hil.run gave up after {gave_up_s:.2f} s (--max-outage-s {max_outage_s:g})")
    assert code == 1
    # Within a control period (50 ms) of the limit, plus the process's own exit. Was 6.7 s (the
    # episode's rest + 4) before counting from the outage, 4.7 s while the reset still ran its retries.
    assert max_outage_s - 0.2 <= gave_up_s <= max_outage_s + GIVE_UP_MARGIN_S, gave_up_s
    first = stderr.strip().splitlines()[0]
    assert first.startswith("error:") and "unreachable" in first and f"limit {max_outage_s:g} s" in first
    assert "Traceback" not in stderr
    assert len(episodes(run_log(out))) >= 1


GIVE_UP_MARGIN_S = 0.75  # a control period or a shortened retry, and hil.run's own exit (~0.2 s)


def test_max_outage_holds_through_the_requests_between_episodes(policies, tmp_path):
    """1 s episodes, a 2 s limit and the default 1 s request timeout: the outage outlives the episode
    it began in and meets the status/reset requests, whose three Lazy Pirate attempts (3 s) must not
    stretch it to 4 s after the kill."""
    out = tmp_path / "between"
    max_outage_s = 2.0
    with BridgeProcess([]) as bridge:
        port = bridge.endpoint.rsplit(":", 1)[1]
        command = hil_run_command(
            "--policy",
            policies[0],
            "--host",
            "127.0.0.1",
            "--port",
            port,
            "--level",
            "easy",
            "--episodes",
            20,
            "--max-steps",
            20,
            "--rate-hz",
            20,
            "--max-outage-s",
            max_outage_s,
            "--out",
            out,
        )
        with killed_on_exit(
            subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        ) as process:
            wait_for_log(out, lambda r: len(episodes(r)) >= 1, 60, process)
            bridge.process.kill()
            killed_at = time.monotonic()
            code, _, stderr = finish_within(process, 60)
            gave_up_s = time.monotonic() - killed_at
    print(f"\nbridge killed -> hil.run gave up after {gave_up_s:.2f} s (--max-outage-s {max_outage_s:g}, --timeout 1)")
    assert code == 1, stderr[-2000:]
    assert max_outage_s - 0.2 <= gave_up_s <= max_outage_s + GIVE_UP_MARGIN_S, gave_up_s
    first = stderr.strip().splitlines()[0]
    assert first.startswith("error:") and f"limit {max_outage_s:g} s" in first and "Traceback" not in stderr
    logged = episodes(run_log(out))
    assert len(logged) >= 1 and all(e["policy_index"] == 0 for e in logged)  # what was flown is recorded
