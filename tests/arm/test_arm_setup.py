"""device_emulation.arm without emulation: quick, run by plain `make test` too."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from device_emulation import arm
from device_emulation.arm import APT_HINT, ArmSetupError, ArmStack, cpuinfo_text, debian_mirror
from firmware_bridge.launcher import BridgeStartError
from firmware_bridge.toy_policy import build_mlp_policy

REPO = Path(__file__).resolve().parents[2]


def test_cpuinfo_describes_a_cortex_a72():
    text = cpuinfo_text()
    assert text.count("processor\t:") == 4
    assert text.count("CPU implementer\t: 0x41") == 4 and text.count("CPU part\t: 0xd08") == 4
    assert "Features\t: fp asimd evtstrm crc32 cpuid\n" in text
    assert "not a Raspberry Pi 4" in text  # it says what it is: the bridge reports it as cpu_model
    a76 = cpuinfo_text("cortex-a76")
    assert a76.count("CPU part\t: 0xd0b") == 4 and " asimddp" in a76 and "not a Raspberry Pi 5" in a76


def test_cpu_model_is_always_pinned(monkeypatch):
    monkeypatch.delenv("AIRQ_ARM_CPU", raising=False)
    assert arm.selected_cpu() == "cortex-a72"
    monkeypatch.setenv("AIRQ_ARM_CPU", "cortex-a76")
    assert arm.selected_cpu() == "cortex-a76" and arm.selected_cpu("cortex-a72") == "cortex-a72"
    monkeypatch.setenv("AIRQ_ARM_CPU", "max")  # qemu's default model: wrong dynamic-int8 logits
    with pytest.raises(ArmSetupError, match="cortex-a72, cortex-a76"):
        arm.selected_cpu()


def _apt(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


def test_mirror_from_deb822_sources_skips_security(tmp_path, monkeypatch):
    monkeypatch.delenv("AIRQ_DEBIAN_MIRROR", raising=False)
    apt = _apt(tmp_path, {
        "sources.list.d/debian.sources": (
            "Types: deb\n# a comment\nURIs: http://security.example/debian-security\nSuites: bookworm-security\n"
            "Components: main\n\nTypes: deb\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\n"
            "Components: main\n"
        ),
        "sources.list.d/other.list.disabled-by-farm": "deb http://wrong.example/debian bookworm main\n",
    })  # fmt: skip
    assert debian_mirror(apt) == "http://mirror.example/debian"


def test_mirror_from_one_line_sources_with_options(tmp_path, monkeypatch):
    monkeypatch.delenv("AIRQ_DEBIAN_MIRROR", raising=False)
    apt = _apt(tmp_path, {"sources.list": (
        "# deb http://commented.example/debian bookworm main\n"
        "deb-src http://src.example/debian bookworm main\n"
        "deb [arch=amd64 signed-by=/k.gpg] http://mirror.example/debian/ bookworm main\n"
    )})  # fmt: skip
    assert debian_mirror(apt) == "http://mirror.example/debian/"
    # a trixie host's Debian mirror also serves bookworm
    apt2 = _apt(tmp_path / "t", {"sources.list": "deb http://m.example/debian trixie main\n"})
    assert debian_mirror(apt2) == "http://m.example/debian"


def test_no_mirror_is_a_one_line_error_and_env_overrides(tmp_path, monkeypatch):
    monkeypatch.delenv("AIRQ_DEBIAN_MIRROR", raising=False)
    apt = _apt(tmp_path, {"sources.list": "deb http://archive.ubuntu.com/ubuntu jammy main\n"})
    with pytest.raises(ArmSetupError, match="AIRQ_DEBIAN_MIRROR") as e:
        debian_mirror(apt)
    assert "\n" not in str(e.value)
    monkeypatch.setenv("AIRQ_DEBIAN_MIRROR", "http://override.example/debian")
    assert debian_mirror(apt) == "http://override.example/debian"


def test_missing_tools_name_the_apt_command(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(arm, "SBIN_DIRS", ())
    with pytest.raises(ArmSetupError) as e:
        arm.find_tools()
    msg = str(e.value)
    assert "\n" not in msg and APT_HINT in msg and "qemu-user-static and debootstrap" in msg
    assert isinstance(e.value, BridgeStartError)  # hil.run prints it as `error: ...`, exit 1


def test_hil_run_reports_missing_qemu_in_one_line(tmp_path):
    policy = tmp_path / "p.onnx"
    policy.write_bytes(build_mlp_policy(1032, 16, seed=1))
    env = dict(os.environ, PATH="/nonexistent", AIRQ_ARM_CACHE=str(tmp_path / "cache"))
    if any(Path(d, "qemu-aarch64-static").exists() for d in arm.SBIN_DIRS):
        pytest.skip("qemu-aarch64-static is in an sbin directory here")
    r = subprocess.run(
        [sys.executable, "-m", "hil.run", "--policy", str(policy), "--sim-only", "--device-arch", "aarch64",
         "--episodes", "1", "--level", "easy", "--quiet", "--out", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=120, env=env, cwd=REPO,
    )  # fmt: skip
    assert r.returncode == 1
    assert r.stderr.strip().splitlines()[-1].startswith("error: the emulated aarch64 bridge needs qemu-user-static")
    assert APT_HINT in r.stderr


def test_command_pins_the_cpu_and_the_root_filesystem(tmp_path):
    stack = ArmStack(rootfs=tmp_path / "rootfs", site=tmp_path / "site-x", qemu="/usr/bin/qemu-aarch64-static")
    cmd = stack.python_command(["-m", "firmware_bridge.serve", "--bind", "tcp://127.0.0.1:*"])
    i = cmd.index("/usr/bin/qemu-aarch64-static")
    assert cmd[:i][0] == "env" and f"PYTHONPATH={tmp_path / 'site-x'}:{REPO}" in cmd[:i]
    assert cmd[i + 1 :] == [
        "-L", str(tmp_path / "rootfs"), "-cpu", "cortex-a72", str(tmp_path / "rootfs/usr/bin/python3.11"),
        "-m", "firmware_bridge.serve", "--bind", "tcp://127.0.0.1:*",
    ]  # fmt: skip


def test_wheels_are_pinned_to_the_host_versions():
    from importlib.metadata import version

    reqs = arm.wheel_requirements()
    assert reqs == [f"{n}=={version(n)}" for n in ("numpy", "onnxruntime", "pyzmq", "msgpack")]
    # the cache key follows the pins: another version means another site directory
    assert arm._site_key(reqs) != arm._site_key([*reqs[:-1], "msgpack==0.0.1"])
