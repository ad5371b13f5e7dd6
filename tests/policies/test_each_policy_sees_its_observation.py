"""A model carries its observation: ``policies.evaluate`` flies each policy through the observation its metadata
records (the attitude values or not) in the same world, so a plain and a versioned policy pair up on one level name."""

from __future__ import annotations

import json

from attitude_models import plain_and_attitude_policies

from policies.errors import run_cli
from policies.evaluate import main as evaluate


def test_a_plain_and_an_attitude_policy_fly_the_same_episodes_on_one_level_name(tmp_path):
    plain, attitude = plain_and_attitude_policies("hard")
    (tmp_path / "plain.onnx").write_bytes(plain)
    (tmp_path / "attitude.onnx").write_bytes(attitude)
    args = ["--level", "hard", "--backend", "mujoco", "--episodes", "6", "--num-envs", "3", "--out", str(tmp_path)]
    assert run_cli(evaluate, [str(tmp_path / "plain.onnx"), str(tmp_path / "attitude.onnx"), *args, "--name", "e"]) == 0
    report = json.loads((tmp_path / "e.json").read_text())
    a, b = report["policies"]["plain.onnx"], report["policies"]["attitude.onnx"]
    assert (a["obs_dim"], a["attitude"], b["obs_dim"], b["attitude"]) == (1032, False, 1037, True)
    # zero weights on the attitude values: the same actions, so the same episodes step for step
    assert [(e["outcome"], e["steps"]) for e in a["episodes"]] == [(e["outcome"], e["steps"]) for e in b["episodes"]]
    assert len({e["steps"] for e in a["episodes"]}) > 1  # the episodes differ from one another: they are real


def test_a_level_file_with_the_attitude_still_flies_a_plain_policy_as_trained(tmp_path):
    plain, _ = plain_and_attitude_policies("default")
    (tmp_path / "plain.onnx").write_bytes(plain)
    args = ["--level", "configs/levels/default_attitude.toml", "--episodes", "2", "--out", str(tmp_path), "--name", "e"]
    assert run_cli(evaluate, [str(tmp_path / "plain.onnx"), *args]) == 0
    assert json.loads((tmp_path / "e.json").read_text())["policies"]["plain.onnx"]["obs_dim"] == 1032
