"""Command lines: serve's user errors, the systemd unit generator, and a short bench run."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from firmware_bridge.systemd import render_unit, systemd_quote


def run_module(module: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=timeout)


def assert_usage_error(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr  # one line, no traceback
    assert "error:" in lines[0]
    for fragment in fragments:
        assert fragment in lines[0]


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["--policy", "missing.onnx"], ["missing.onnx", "no such file"]),
        (["--bind", "localhost:5555"], ["--bind", "tcp://HOST:PORT"]),
        (["--bind", "tcp://127.0.0.1:99999"], ["99999"]),
        (["--threads", "0"], ["--threads"]),
        (["--hold-timeout-ms", "soon"], ["--hold-timeout-ms"]),
        (["--actuator", "mavlink"], ["--actuator"]),
        (["--max-message-bytes", "10"], ["--max-message-bytes"]),
        (["--no-such-flag"], ["--no-such-flag"]),
    ],
)
def test_serve_user_errors_exit_2_with_one_line(args: list[str], fragments: list[str]) -> None:
    assert_usage_error(run_module("firmware_bridge.serve", *args), *fragments)


def test_serve_rejects_a_file_that_is_not_a_policy(tmp_path: Path) -> None:
    not_onnx = tmp_path / "notes.onnx"
    not_onnx.write_text("hello")
    assert_usage_error(run_module("firmware_bridge.serve", "--policy", str(not_onnx)), "BAD_POLICY", "notes.onnx")


def test_serve_port_in_use_is_a_usage_error(start_bridge: Any) -> None:
    running = start_bridge()
    assert_usage_error(run_module("firmware_bridge.serve", "--bind", running.endpoint), "cannot bind", "in use")


def test_systemd_unit(tmp_path: Path) -> None:
    policy = tmp_path / "policy v2.onnx"  # a space, to exercise quoting
    policy.write_bytes(b"x")
    result = run_module(
        "firmware_bridge.systemd",
        "--bind",
        "tcp://0.0.0.0:5555",
        "--policy",
        str(policy),
        "--threads",
        "2",
        "--user",
        "airq",
    )
    assert result.returncode == 0, result.stderr
    unit = result.stdout
    for section in (
        "[Unit]",
        "[Service]",
        "[Install]",
        "WantedBy=multi-user.target",
        "User=airq",
        "Restart=on-failure",
    ):
        assert section in unit
    exec_line = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    argv = shlex.split(exec_line.removeprefix("ExecStart="))
    assert argv[:3] == [sys.executable, "-m", "firmware_bridge.serve"]
    assert argv[argv.index("--bind") + 1] == "tcp://0.0.0.0:5555"
    assert argv[argv.index("--policy") + 1] == str(policy)
    assert argv[argv.index("--threads") + 1] == "2"


def test_systemd_relative_policy_made_absolute_and_missing_only_warns(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "firmware_bridge.systemd", "--policy", "later.onnx"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert result.returncode == 0
    assert f"--policy {tmp_path / 'later.onnx'}" in result.stdout
    assert "does not exist" in result.stderr


def test_systemd_bad_bind_is_a_usage_error() -> None:
    assert_usage_error(run_module("firmware_bridge.systemd", "--bind", "tcp://*:*"), "--bind")


def test_systemd_quoting_escapes_specifiers() -> None:
    assert systemd_quote("/opt/airq/bin/python") == "/opt/airq/bin/python"
    assert systemd_quote("100%") == "100%%"
    assert systemd_quote("$HOME") == "$$HOME"
    assert systemd_quote('a "b"') == '"a \\"b\\""'
    unit = render_unit(python="/usr/bin/python3", bind="tcp://0.0.0.0:5555", policy=None)
    assert "--policy" not in unit and "ExecStart=/usr/bin/python3 -m firmware_bridge.serve" in unit


def test_bench_reports_round_trip_and_overhead() -> None:
    result = run_module(
        "firmware_bridge.bench",
        "--n",
        "40",
        "--warmup",
        "5",
        "--block",
        "15",
        "--obs-dim",
        "64",
        "--hidden",
        "16",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    rtt, infer, overhead = report["round_trip_us"], report["device_inference_us"], report["overhead_us"]
    assert infer["p50"] > 0 and rtt["p50"] > infer["p50"]
    assert overhead["p50"] <= rtt["p50"] and overhead["p99"] <= rtt["p99"]  # overhead = rtt - inference, per sample
    assert report["bare_echo_round_trip_us"]["p50"] > 0 and report["overhead_p50_over_bare_echo_p50"] > 0
    assert report["obs_dim"] == 64 and report["n"] == 40
    # bridge and echo timed in alternating blocks of 15, 15, 10 round trips
    assert len(report["overhead_p50_us_by_block"]) == len(report["bare_echo_p50_us_by_block"]) == 3
    assert min(report["overhead_p50_us_by_block"]) <= overhead["p50"] <= max(report["overhead_p50_us_by_block"])


def test_bench_table_and_missing_policy(tmp_path: Path) -> None:
    result = run_module(
        "firmware_bridge.bench",
        "--n",
        "20",
        "--warmup",
        "0",
        "--obs-dim",
        "16",
        "--hidden",
        "8",
        "--client",
        "dealer",
        "--spin-us",
        "0",
        "--no-baseline",
    )
    assert result.returncode == 0, result.stderr
    assert "round trip" in result.stdout and "overhead (rt - inference)" in result.stdout
    assert "DEALER client (firmware_bridge.client, spin 0 us)" in result.stdout
    assert_usage_error(run_module("firmware_bridge.bench", "--policy", str(tmp_path / "nope.onnx")), "nope.onnx")
    # one client, the control loop's: the bench has no REQ client of its own
    assert_usage_error(run_module("firmware_bridge.bench", "--client", "req"), "--client", "'req'", "DEALER")
    assert_usage_error(run_module("firmware_bridge.bench", "--spin-us", "-1"), "--spin-us")


def test_keys_cli_and_curve_flags(tmp_path: Path) -> None:
    made = run_module("firmware_bridge.keys", str(tmp_path / "keys"), "bridge", "host")
    assert made.returncode == 0, made.stderr
    for name in ("bridge.key", "bridge.key_secret", "host.key", "host.key_secret"):
        assert (tmp_path / "keys" / name).is_file()
    assert_usage_error(run_module("firmware_bridge.keys", str(tmp_path / "keys"), "bridge"), "exists")
    assert_usage_error(
        run_module("firmware_bridge.serve", "--curve-secret", str(tmp_path / "keys" / "bridge.key_secret")),
        "--curve-clients",
    )
    empty = tmp_path / "nobody"
    empty.mkdir()
    assert_usage_error(
        run_module(
            "firmware_bridge.serve",
            "--bind",
            "tcp://127.0.0.1:*",
            "--curve-secret",
            str(tmp_path / "keys" / "bridge.key_secret"),
            "--curve-clients",
            str(empty),
        ),
        "no client keys",
    )
    unit = run_module(
        "firmware_bridge.systemd", "--curve-secret", "keys/bridge.key_secret", "--curve-clients", "keys/clients"
    )
    assert unit.returncode == 0 and "UNAUTHENTICATED" not in unit.stderr
    exec_line = next(line for line in unit.stdout.splitlines() if line.startswith("ExecStart="))
    argv = shlex.split(exec_line.removeprefix("ExecStart="))
    assert Path(argv[argv.index("--curve-secret") + 1]).is_absolute()
    assert "UNAUTHENTICATED" in run_module("firmware_bridge.systemd").stderr
