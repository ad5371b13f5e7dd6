"""python -m firmware_bridge.outputs: a recording made on one machine, checked on another (here: the same
machine, so every row must be bit-identical; a changed value, a changed model and a missing one must show)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from firmware_bridge.outputs import check, record
from firmware_bridge.toy_policy import build_mlp_policy

OBS_DIM = 64


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, Path, Path]:
    models = tmp_path / "models"
    models.mkdir()
    for seed in (1, 2):
        (models / f"toy{seed}.onnx").write_bytes(build_mlp_policy(OBS_DIM, hidden=32, n_actions=5, seed=seed))
    observations = tmp_path / "obs.npy"
    np.save(observations, np.random.default_rng(0).uniform(0, 1, (300, OBS_DIM)).astype(np.float32))
    return models, observations, tmp_path / "rec.npz"


def outputs(*args: object) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "firmware_bridge.outputs", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def test_record_then_check_here_is_bit_identical(setup: tuple[Path, Path, Path]) -> None:
    models, observations, recording = setup
    done = outputs("record", models, "--observations", observations, "-o", recording)
    assert done.returncode == 0 and "recorded 2 policies on 300 observations" in done.stdout, done.stderr
    checked = outputs("check", recording, "--models", models, "--json")
    assert checked.returncode == 0, checked.stderr
    result = json.loads(checked.stdout)
    assert [p["name"] for p in result["policies"]] == ["toy1.onnx", "toy2.onnx"] and result["missing"] == []
    for policy in result["policies"]:
        assert (policy["bit_identical_rows"], policy["max_abs_difference"], policy["action_agreement"]) == (300, 0, 1)
    assert result["recorded_on"] == result["checked_on"]


def test_a_differing_machine_shows_as_differences(setup: tuple[Path, Path, Path]) -> None:
    models, observations, recording = setup
    record(sorted(models.glob("*.onnx")), np.load(observations), recording)
    with np.load(recording) as data:
        arrays = {key: data[key] for key in data.files}
    arrays["values_0"][:10] += np.float32(0.5)  # ten rows as another CPU might have computed them
    arrays["actions_0"][:3] = (arrays["actions_0"][:3] + 1) % 5
    np.savez(recording, **arrays)
    first = check(recording, sorted(models.glob("*.onnx"))).policies[0]
    assert first.bit_identical_rows == 290 and first.max_abs_difference == pytest.approx(0.5, abs=1e-6)
    assert first.action_agreement == pytest.approx(297 / 300)


def test_a_recorded_policy_missing_here_fails_and_is_named(setup: tuple[Path, Path, Path], tmp_path: Path) -> None:
    models, observations, recording = setup
    assert outputs("record", models, "--observations", observations, "-o", recording).returncode == 0
    (models / "toy2.onnx").write_bytes(build_mlp_policy(OBS_DIM, hidden=32, n_actions=5, seed=9))  # another model
    checked = outputs("check", recording, "--models", models)
    assert checked.returncode == 1 and "toy2.onnx" in checked.stdout and "not found" in checked.stdout
    assert checked.stderr.strip() == "error: 1 recorded policies not found among --models"


def test_bad_observations_are_one_line(setup: tuple[Path, Path, Path], tmp_path: Path) -> None:
    models, _, recording = setup
    flat = tmp_path / "flat.npy"
    np.save(flat, np.zeros(OBS_DIM, np.float32))
    done = outputs("record", models, "--observations", flat, "-o", recording)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "[rows, obs_dim]" in done.stderr
    assert not recording.exists()
