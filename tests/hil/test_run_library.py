"""hil.run as a library: typed arguments in, a typed result out, nothing printed, the command passed in
(a real bridge process, real onnxruntime); and as a command: a bar only on a terminal."""

import json
import shlex
import subprocess
import sys

import pytest

from firmware_bridge.toy_policy import build_mlp_policy
from hil.run import RunArgs, RunProgress, RunResult, parse_args, run


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    path = tmp_path_factory.mktemp("policies") / "small.onnx"
    path.write_bytes(build_mlp_policy(1032, 32, seed=1))
    return path


class Recorder(RunProgress):
    def __init__(self):
        self.events = []

    def note(self, text):
        self.events.append(("note", text))

    def policy_started(self, path, episodes):
        self.events.append(("start", path, episodes))

    def episode_done(self, record):
        self.events.append(("episode", len(record.episodes)))

    def policy_ended(self):
        self.events.append(("end",))


def test_run_returns_its_result_and_prints_nothing(policy, tmp_path, capfd):
    args = RunArgs(policy=[str(policy)], sim_only=True, episodes=2, level="easy", deadline_ms=1000, out=str(tmp_path))
    progress = Recorder()
    result = run(args, command="the caller's command", progress=progress)
    out, err = capfd.readouterr()
    assert out == "" and "the caller's command" not in err
    assert isinstance(result, RunResult) and not result.already_complete
    assert result.report_path == tmp_path / "report.json" and result.log_path == tmp_path / "run.jsonl"
    written = json.loads(result.report_path.read_text())
    assert written["command"] == result.report["command"] == "the caller's command"  # never sys.argv
    assert [r["policy"] for r in written["runs"]] == [str(policy)]
    assert progress.events == [("start", str(policy), 2), ("episode", 1), ("episode", 2), ("end",)]
    # run again on a finished run: nothing flown, the report left as it was
    again = run(
        RunArgs(
            out=str(tmp_path),
            resume=True,
            policy=[str(policy)],
            sim_only=True,
            episodes=2,
            level="easy",
            deadline_ms=1000,
        ),
        command="resume",
    )
    assert again.already_complete and again.report["command"] == "the caller's command"


@pytest.mark.parametrize(
    "args",
    [
        RunArgs(policy=["a.onnx", "dir with space/b.onnx"], sim_only=True, episodes=5, timeout_s=2.5, out="x y"),
        RunArgs(policy=["a.onnx"], host="raspberrypi.local", port=6000, rate_hz=30.0, deadline_ms=20.0, level="hard"),
        RunArgs(policy=["a.onnx"], sim_only=True, profile="pi3b", threads=2, max_steps=40, quiet=True, seed=7),
    ],
)
def test_command_line_reproduces_the_arguments(args):
    words = shlex.split(args.command_line())
    assert words[:3] == ["python", "-m", "hil.run"]
    assert parse_args(words[3:]) == args


def test_progress_is_plain_lines_off_a_terminal(policy, tmp_path):
    """Through a pipe (`make demo | cat`): no bar refreshes, a plain line per tenth of the episodes."""
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "hil.run",
            "--policy",
            str(policy),
            "--sim-only",
            "--episodes",
            "20",
            "--level",
            "easy",
            "--deadline-ms",
            "1000",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.startswith("small.onnx:")]
    assert len(lines) == 10 and lines[-1].startswith("small.onnx: 20/20 ep (100%)"), r.stderr
    assert "\r" not in r.stderr and "it/s" not in r.stderr and "ep/s" not in r.stderr
