"""A non-editable install works: the wheel carries the level files and device profiles (package data),
and an env flies from it in a clean virtualenv that cannot see the repository.

The clean virtualenv reuses this venv's third-party packages (numpy, gymnasium, ...) through a .pth line
instead of installing them again; a plain path line in a .pth file is not a site directory, so the
editable install's own .pth (which puts the repository root on sys.path) is not processed there.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# pyproject's [tool.setuptools.packages.find] include list, read so a new package cannot be forgotten here
PACKAGES = tuple(
    p.rstrip("*")
    for p in tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
)
DATA_FILES = (
    "nav_env/levels/default.toml",
    "nav_env/levels/easy.toml",
    "nav_env/levels/hard.toml",
    "device_emulation/profiles.toml",
    "nav_env/templates/report_page.html.j2",
    "nav_env/templates/report_macros.html.j2",
    "hil/templates/report.html.j2",
    "deployment_study/templates/study.html.j2",
    "deployment_study/templates/vehicles.html.j2",
    "quarl/templates/report.html.j2",
)

FLY = r"""
import json, sys
import gymnasium as gym
import nav_env, hil
from nav_env.config import available_levels
from device_emulation.profiles import get_profile, load_profiles
from nav_env.report_page import environment

env = gym.make("AirNav-v0")
obs, info = env.reset(seed=0)
env.action_space.seed(0)
steps, done = 0, False
while not done:
    obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
    steps += 1
    done = terminated or truncated
print(json.dumps({
    "nav_env": nav_env.__file__, "hil": hil.__file__, "sys_path": sys.path, "steps": steps,
    "obs_shape": list(obs.shape), "levels": available_levels(), "hard_level": gym.make("AirNav-Hard-v0").unwrapped.cfg.level,
    "profiles": sorted(load_profiles()), "pi3b_memory_mb": get_profile("pi3b").memory_mb,
    "templates": {p: environment(p).list_templates() for p in ("hil", "deployment_study", "quarl")},
}))
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """airq's wheel, built from a copy of the sources (the build leaves nothing in the repository)."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    for pkg in PACKAGES:
        shutil.copytree(REPO / pkg, src / pkg, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            str(src),
            "-w",
            str(out),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    (whl,) = out.glob("airq-*.whl")
    return whl


def test_wheel_carries_levels_and_profiles(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = [f for f in DATA_FILES if f not in names]
    assert not missing, f"{wheel.name} lacks package data {missing}"
    assert not any(n.startswith(("configs/", "tests/")) for n in names)


def test_wheel_flies_an_episode_in_a_clean_venv(wheel, tmp_path):
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    py = env_dir / "bin" / "python"
    site = Path(
        subprocess.run(
            [py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    # Install the wheel alone into the new venv, with this venv's pip (the new one has none).
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            "--target",
            str(site),
            str(wheel),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    # Third-party dependencies come from this venv's site-packages (no second torch); not the repo.
    ours = Path(sysconfig.get_paths()["purelib"])
    assert ours.resolve() != REPO.resolve()
    (site / "airq_test_deps.pth").write_text(f"{ours}\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "AIRQ_CONFIG_DIR", "PYTHONHOME")}
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    proc = subprocess.run([py, "-c", FLY], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    # The packages came from the wheel's install, and the repository was never importable.
    for pkg in ("nav_env", "hil"):
        assert Path(got[pkg]).resolve().is_relative_to(site.resolve()), got[pkg]
    assert not any(p and Path(p).resolve() == REPO.resolve() for p in got["sys_path"]), got["sys_path"]
    assert got["levels"] == ["default", "easy", "hard"]
    assert got["hard_level"] == "hard"
    assert 1 <= got["steps"] <= 500 and got["obs_shape"] == [1032]
    assert {"native", "pi3b", "pi4"} <= set(got["profiles"]) and got["pi3b_memory_mb"] > 0
    # each report page's template, and the shared frame and macros, from the installed packages
    shared = ["report_macros.html.j2", "report_page.html.j2"]
    assert got["templates"] == {
        "hil": sorted(["report.html.j2", *shared]),
        "deployment_study": sorted(["study.html.j2", "vehicles.html.j2", *shared]),
        "quarl": sorted(["report.html.j2", *shared]),
    }
