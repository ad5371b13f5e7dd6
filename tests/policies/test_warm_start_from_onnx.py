"""Warm start from a shipped fp32 ONNX model: the actor's layers are the model's, so the fresh actor acts as the
model does (what the quadrotor policies start from: models/policy1_mujoco_fp32.onnx and the point-mass models)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch

from policies.actor import actor_from_model
from policies.builders import build_model, make_vec_env, warm_start
from policies.config import TrainConfig
from policies.errors import UserError

REPO = Path(__file__).resolve().parents[2]


def fresh_model(policy: str):
    cfg = TrainConfig(policy=policy, num_envs=2, n_steps=128, batch_size=256, progress=False)
    return build_model(cfg, make_vec_env(cfg), tb_dir=None)


def test_the_warm_started_actor_gives_the_onnx_models_logits(tiny_onnx):
    model = fresh_model("policy1")
    warm_start(model, str(tiny_onnx))
    obs = np.random.default_rng(0).random((64, 1032), dtype=np.float32)
    session = ort.InferenceSession(str(tiny_onnx), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    outputs = dict(zip(names, session.run(None, {"obs": obs})))
    with torch.no_grad():
        action, logits = actor_from_model(model)(torch.as_tensor(obs))
    np.testing.assert_allclose(logits.numpy(), outputs["logits"], rtol=1e-5, atol=1e-5)
    assert np.array_equal(action.numpy(), outputs[names[0]] if names[0] != "logits" else outputs[names[1]])


def test_an_onnx_model_of_another_preset_or_precision_is_a_one_line_error(tiny_onnx, tmp_path):
    with pytest.raises(UserError, match="the preset's is"):
        warm_start(fresh_model("policy2"), str(tiny_onnx))
    with pytest.raises(UserError, match="not found"):
        warm_start(fresh_model("policy1"), str(tmp_path / "missing.onnx"))
    int8 = tmp_path / "int8.onnx"
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(str(tiny_onnx), str(int8), weight_type=QuantType.QInt8)
    with pytest.raises(UserError, match="not an fp32 airq export"):
        warm_start(fresh_model("policy1"), str(int8))


def test_an_actor_with_the_attitude_observation_starts_as_the_model_it_warm_starts_from(tiny_onnx):
    cfg = TrainConfig(
        policy="policy1", level=str(REPO / "configs/levels/default_attitude.toml"), num_envs=2, n_steps=128,
        batch_size=256, progress=False,
    )  # fmt: skip
    model = build_model(cfg, make_vec_env(cfg), tb_dir=None)
    warm_start(model, str(tiny_onnx))
    rng = np.random.default_rng(1)
    obs = rng.random((64, 1032), dtype=np.float32)
    attitude = rng.uniform(-1, 1, (64, 5)).astype(np.float32)  # the 5 new inputs: zero weight, no effect yet
    session = ort.InferenceSession(str(tiny_onnx), providers=["CPUExecutionProvider"])
    logits = dict(zip([o.name for o in session.get_outputs()], session.run(None, {"obs": obs})))["logits"]
    with torch.no_grad():
        _, ours = actor_from_model(model)(torch.as_tensor(np.hstack([obs, attitude])))
    np.testing.assert_allclose(ours.numpy(), logits, rtol=1e-5, atol=1e-5)
