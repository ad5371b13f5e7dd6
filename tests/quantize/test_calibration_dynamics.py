"""int8 calibration flies the physics the policy trained on: a quadrotor policy trained with randomized physics
(airq.dynamics) is calibrated on those physics unless --dynamics says otherwise."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from nav_env.backends import dynamics_for
from nav_env.config import load_level
from quantize.calibration import collect_observations
from quantize.model_io import metadata_of
from quantize.ptq import quantize_file
from quantize.runtime import policy_fn, session

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "models" / "policy1_quadrotor_fp32.onnx"
RANDOMIZED = "configs/dynamics/iris_randomized.toml"


def test_the_model_records_the_physics_it_trained_on():
    assert metadata_of(onnx.load(MODEL))["airq.dynamics"] == RANDOMIZED


def test_randomized_physics_reach_the_calibration_rollouts():
    act = policy_fn(session(MODEL.read_bytes()))
    cfg = load_level("default")
    nominal = collect_observations(act, cfg, 2, 2_000_000, backend="mujoco")
    randomized = collect_observations(
        act, cfg, 2, 2_000_000, backend="mujoco", dynamics=dynamics_for("mujoco", REPO / RANDOMIZED)
    )
    # the same seeds start alike, but a drawn camera pitch, depth noise and airframe change what the policy sees
    assert nominal.shape[1] == randomized.shape[1]
    n = min(len(nominal), len(randomized))
    assert not np.array_equal(nominal[:n], randomized[:n])


def scales(path: Path) -> dict:
    return json.loads(metadata_of(onnx.load(path))["airq.quant.layer_scales"])


def test_int8_calibrates_on_the_training_physics_unless_told(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)  # airq.dynamics is a path relative to the repository, where the model was trained
    trained = tmp_path / "trained.onnx"
    nominal = tmp_path / "nominal.onnx"
    quantize_file(MODEL, "int8", trained, calibration_episodes=2, heldout_episodes=0)
    quantize_file(MODEL, "int8", nominal, calibration_episodes=2, heldout_episodes=0, dynamics="nominal")
    assert metadata_of(onnx.load(trained))["airq.quant.calibration_dynamics"] == RANDOMIZED
    assert "airq.quant.calibration_dynamics" not in metadata_of(onnx.load(nominal))
    assert scales(trained) != scales(nominal)  # other observations, other activation ranges
    again = tmp_path / "again.onnx"
    quantize_file(MODEL, "int8", again, calibration_episodes=2, heldout_episodes=0, dynamics=RANDOMIZED)
    assert again.read_bytes() == trained.read_bytes()  # the same physics, the same seeds: the same file


@pytest.mark.parametrize(
    ("where", "extra", "message"),
    [
        (REPO, ["--dynamics", "nope.toml"], "--dynamics: "),
        (None, [], "airq.dynamics (the physics it trained on)"),  # another folder: the recorded path is not there
    ],
)
def test_a_dynamics_file_that_is_not_there_is_one_line(tmp_path, where, extra, message):
    done = subprocess.run(
        [sys.executable, "-m", "quantize", "ptq", str(MODEL), "--to", "int8", "-o", str(tmp_path / "q.onnx"), *extra],
        capture_output=True, text=True, cwd=where or tmp_path, check=False,
    )  # fmt: skip
    assert done.returncode != 0
    assert done.stderr.strip().count("\n") == 0 and message in done.stderr and "--dynamics nominal" in done.stderr
    assert not (tmp_path / "q.onnx").exists()
