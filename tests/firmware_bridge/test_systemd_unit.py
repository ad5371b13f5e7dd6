"""The generated systemd unit: unprivileged, its own empty working directory, keys elsewhere,
sandboxed, accepted by systemd-analyze; and the bridge really runs under that sandbox's W^X rule.

Without systemd-analyze, or without the kernel's PR_SET_MDWE, those two tests skip with the reason;
AIRQ_REQUIRE_SYSTEMD=1 and AIRQ_REQUIRE_KERNEL_MDWE=1 (set by .ci/run where CI provides them) make the skip a
failure.
"""

from __future__ import annotations

import ctypes
import errno
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NoReturn

import numpy as np
import pytest

from firmware_bridge.cli import READY_PREFIX
from firmware_bridge.serve import TRANSIENT_FAILURE_EXIT
from firmware_bridge.systemd import HARDENING

KEYS = ["--curve-secret", "/etc/airq-bridge/keys/bridge.key_secret", "--curve-clients", "/etc/airq-bridge/clients"]


def generate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "firmware_bridge.systemd", "--python", sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def directives(unit: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in unit.splitlines():
        if "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            found.setdefault(key, []).append(value)
    return found


def cannot_run(reason: str, require: str) -> NoReturn:
    """Skip with the reason, or fail when the environment variable `require` is 1."""
    if os.environ.get(require) == "1":
        pytest.fail(f"{require}=1 but {reason}")
    pytest.skip(reason)


def systemd_analyze() -> str:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        cannot_run("systemd-analyze is not installed (apt install systemd)", "AIRQ_REQUIRE_SYSTEMD")
    return tool


def test_unit_is_unprivileged_sandboxed_and_keeps_keys_out_of_its_working_directory():
    result = generate("--policy", "/etc/airq-bridge/policy.onnx", *KEYS)
    assert result.returncode == 0, result.stderr
    unit = directives(result.stdout)
    assert unit["User"] == ["airq"] and unit["Group"] == ["airq"]
    assert unit["StateDirectory"] == ["airq-bridge"] and unit["WorkingDirectory"] == ["%S/airq-bridge"]
    for line in HARDENING + ["PrivateDevices=yes"]:
        key, value = line.split("=", 1)
        assert value in unit[key], line
    assert unit["CapabilityBoundingSet"] == [""] and unit["NoNewPrivileges"] == ["yes"]
    exec_start = unit["ExecStart"][0]
    assert "--curve-secret /etc/airq-bridge/keys/bridge.key_secret" in exec_start
    assert unit["After"] == ["network-online.target"] and unit["RestartPreventExitStatus"] == ["2"]


@pytest.mark.parametrize(
    "flag,path",
    [("--curve-secret", "/var/lib/airq-bridge/bridge.key_secret"), ("--policy", "/var/lib/airq-bridge/p.onnx")],
)
def test_keys_and_policies_in_the_working_directory_are_refused(flag, path):
    args = KEYS if flag == "--policy" else ["--curve-clients", "/etc/airq-bridge/clients"]
    result = generate(flag, path, *args)
    assert result.returncode == 2 and "working directory" in result.stderr and result.stdout == ""


def test_root_is_refused():
    result = generate("--user", "root", *KEYS)
    assert result.returncode == 2 and "unprivileged" in result.stderr


def test_systemd_analyze_verify_and_security(tmp_path):
    tool = systemd_analyze()
    unit = tmp_path / "airq-bridge.service"
    unit.write_text(generate("--policy", "/etc/airq-bridge/policy.onnx", *KEYS).stdout)
    verify = subprocess.run([tool, "verify", str(unit)], capture_output=True, text=True, timeout=120)
    assert verify.returncode == 0 and "airq-bridge.service" not in verify.stderr, verify.stderr
    security = subprocess.run(
        [tool, "security", "--offline=yes", str(unit)], capture_output=True, text=True, timeout=120
    )
    score = float(
        re.search(
            r"Overall exposure level for airq-bridge\.service: ([0-9.]+)", security.stdout + security.stderr
        ).group(1)
    )
    assert score <= 2.0, security.stdout[-2000:]  # 8.6 "EXPOSED" without the sandboxing


def _mdwe_missing() -> str | None:
    """Why this kernel cannot run a process under MDWE, or None when it can."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(66, 0, 0, 0, 0) >= 0:  # PR_GET_MDWE: Linux 6.3+
        return None
    err = ctypes.get_errno()
    return f"no PR_SET_MDWE here (Linux 6.3+): prctl(PR_GET_MDWE) failed with {errno.errorcode.get(err, err)} ({os.strerror(err)})"


MDWE_LAUNCHER = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
# PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN: the kernel's form of MemoryDenyWriteExecute=yes, inherited over exec
if libc.prctl(65, 1, 0, 0, 0) != 0:
    sys.exit("prctl(PR_SET_MDWE) failed")
os.execv(sys.executable, [sys.executable, "-m", "firmware_bridge.serve", *sys.argv[1:]])
"""


def test_bridge_runs_with_memory_deny_write_execute(tmp_path):
    # MemoryDenyWriteExecute=yes would kill a bridge whose onnxruntime or numpy needed W+X pages at load
    # or inference; run a real bridge under the same rule and fly an int8 and an fp32 policy.
    missing = _mdwe_missing()
    if missing:
        cannot_run(missing, "AIRQ_REQUIRE_KERNEL_MDWE")
    from firmware_bridge.client import BridgeClient

    models = Path(__file__).resolve().parents[2] / "models"
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            MDWE_LAUNCHER,
            "--bind",
            "tcp://127.0.0.1:*",
            "--policy",
            str(models / "policy3_int8.onnx"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        line = process.stdout.readline()
        assert line.startswith(READY_PREFIX), line
        with BridgeClient(line[len(READY_PREFIX) :].strip(), timeout_s=10.0) as client:
            policy = client.hello().policy
            assert policy is not None
            obs_dim = policy.obs_dim
            assert isinstance(client.act(np.zeros(obs_dim, np.float32)).action, int)
            client.load_policy(models / "policy1_fp32.onnx")
            assert isinstance(client.act(np.ones(obs_dim, np.float32)).action, int)
        assert process.poll() is None
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_bind_to_an_address_not_up_yet_exits_for_a_retry():
    # 192.0.2.1 (TEST-NET-1) is on no interface: as at boot before DHCP. Exit 75, not 2, so Restart= retries.
    result = subprocess.run(
        [sys.executable, "-m", "firmware_bridge.serve", "--bind", "tcp://192.0.2.1:5555"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == TRANSIENT_FAILURE_EXIT
    assert result.stderr.count("\n") == 1 and "not available" in result.stderr
