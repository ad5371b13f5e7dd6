"""The locked install (requirements/lock.txt) and the versions every result records.

The lock must name every distribution of the venv the tests run in, at its installed version: a package
upgraded, added or removed without refreshing the lock (`make lock`) fails here.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LOCK = REPO / "requirements" / "lock.txt"


@pytest.fixture(scope="module")
def lock():
    spec = importlib.util.spec_from_file_location("airq_lock", REPO / "requirements" / "lock.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_venv_is_exactly_the_lock(lock):
    have, locked = lock.installed(), lock.read_lock()
    assert len(locked) >= 40 and "onnxruntime" in locked and "torch" in locked
    diff = lock.differences(have, locked)
    assert not diff, "the venv differs from requirements/lock.txt (refresh with `make lock`):\n" + "\n".join(diff)


def test_lock_comparison_catches_every_kind_of_difference(lock):
    locked = {"onnxruntime": ("onnxruntime", "1.32.0"), "torch": ("torch", "2.13.0"), "gone": ("gone", "1.0")}
    have = {"onnxruntime": ("onnxruntime", "1.31.1"), "torch": ("torch", "2.13.0+cpu"), "extra": ("extra", "2.0")}
    diff = lock.differences(have, locked)
    assert diff == [
        "extra 2.0: installed, not in the lock",
        "gone==1.0: locked, not installed",
        "onnxruntime: installed 1.31.1, locked 1.32.0",
    ]  # torch 2.13.0+cpu is torch==2.13.0 (pip's ==)
    assert lock.differences({"torch": ("torch", "2.13.0")}, {"torch": ("torch", "2.13.0+cpu")})
    assert lock.differences({"torch": ("torch", "2.13.1+cpu")}, {"torch": ("torch", "2.13.0")})
    assert lock.canonical("Farama_Notifications") == lock.canonical("farama-notifications")


def test_lock_file_round_trips(lock, tmp_path):
    have = {"torch": ("torch", "2.13.0+cpu"), "pyzmq": ("pyzmq", "27.3.0")}
    path = tmp_path / "lock.txt"
    path.write_text(lock.render(have))
    assert lock.read_lock(path) == {"torch": ("torch", "2.13.0"), "pyzmq": ("pyzmq", "27.3.0")}
    path.write_text("numpy>=2\n")
    with pytest.raises(ValueError, match="name==version"):
        lock.read_lock(path)


def test_makefile_installs_everything_with_the_lock():
    text = (REPO / "Makefile").read_text()
    assert re.search(r"^LOCK := requirements/lock\.txt$", text, re.M)
    assert re.search(r"^\$\(STAMP\): .*\$\(LOCK\)", text, re.M), "the install stamp must depend on the lock"
    recipe = text.split("$(STAMP):", 1)[1].split("\n\n", 1)[0]
    installs = [line for line in recipe.splitlines() if "pip install" in line or "install_torch" in line]
    assert len(installs) == 5 and all("-c $(LOCK)" in line for line in installs), installs
    assert "https://download.pytorch.org/whl/cpu" in text and re.search(r"^lock:", text, re.M)


def test_arm_guest_wheels_are_the_locked_versions(lock):
    from device_emulation.arm import BRIDGE_DEPS, wheel_requirements

    locked = lock.read_lock()
    assert wheel_requirements() == [f"{name}=={locked[name][1]}" for name in BRIDGE_DEPS]


def test_readme_names_the_locked_onnxruntime(lock):
    locked = lock.read_lock()["onnxruntime"][1]
    stated = set(re.findall(r"onnxruntime (\d+\.\d+\.\d+)", (REPO / "README.md").read_text()))
    assert stated == {locked}, f"README states onnxruntime {sorted(stated)}, the lock has {locked}"


def test_package_versions_reads_metadata_and_imports_nothing():
    code = (
        "import json, sys; from firmware_bridge.device import package_versions; v = package_versions(); "
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'numpy', 'onnxruntime', 'onnx', 'torch', 'zmq', "
        "'msgpack', 'gymnasium', 'stable_baselines3', 'mujoco', 'numba', 'nav_env', 'hil', 'policies', 'quantize'}); "
        "print(json.dumps([v, heavy]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60).stdout
    versions, heavy = json.loads(out)
    assert heavy == []
    assert list(versions) == [
        "airq",
        "python",
        "numpy",
        "onnxruntime",
        "onnx",
        "torch",
        "stable-baselines3",
        "gymnasium",
        "pyzmq",
        "msgpack",
        "mujoco",
        "numba",
    ]
    assert versions["onnxruntime"] == version("onnxruntime") and versions["python"] == sys.version.split()[0]


def test_package_versions_omits_what_is_missing(monkeypatch):
    import importlib.metadata

    from firmware_bridge import device

    real = importlib.metadata.version

    def fake(name):
        if name in ("torch", "airq"):
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "version", fake)
    v = device.package_versions()
    assert "torch" not in v and "airq" not in v and v["numpy"] == real("numpy")
    assert device.format_versions({"a": "1", "b": "2"}) == "a 1, b 2"


def test_quantize_card_has_versions(tmp_path):
    from firmware_bridge.toy_policy import build_mlp_policy
    from quantize.card import build_card

    model = tmp_path / "toy.onnx"
    model.write_bytes(build_mlp_policy(1032, 16, seed=1))
    text = build_card(model, [], None, None)
    section = text.split("## Versions", 1)[1]
    assert f"onnxruntime {version('onnxruntime')}" in section and f"torch {version('torch')}" in section


def test_vendored_copies_on_sys_path_are_not_installs(lock):
    # Ray puts ray/thirdparty_files (its own psutil, colorama) on sys.path when imported: not installs of their own
    code = (
        "import importlib.util, json, sys; import ray; "
        f"spec = importlib.util.spec_from_file_location('l', {str(REPO / 'requirements' / 'lock.py')!r}); "
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); print(json.dumps(sorted(m.installed())))"
    )
    after_ray = json.loads(
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    )
    assert after_ray == sorted(lock.installed())
