"""ONNX export of a briefly trained Policy I: onnxruntime and torch agree on >= 10k observations
recorded from env rollouts (same argmax, logits within 1e-5); the graph follows the airq contract."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import torch
from gymnasium.vector import AutoresetMode

from nav_env import NavVectorEnv
from nav_env.actions import action_table_rows
from policies.actor import actor_from_model, load_run

N_OBS = 10_240


def record_observations(act, n: int, seed: int = 123, num_envs: int = 64) -> np.ndarray:
    """Observations an actual rollout visits: the policy's own actions, with 30% random ones so
    the recording also covers states a trained policy would rarely reach."""
    env = NavVectorEnv(num_envs, level="default", autoreset_mode=AutoresetMode.SAME_STEP)
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    rows = []
    while len(rows) * num_envs < n:
        rows.append(obs)
        actions = act(obs)
        explore = rng.random(num_envs) < 0.3
        actions[explore] = rng.integers(0, 25, explore.sum())
        obs, *_ = env.step(actions)
    return np.concatenate(rows)[:n]


def test_onnx_matches_torch_on_recorded_observations(tiny_run, tiny_onnx):
    _, model, _ = load_run(tiny_run)
    actor = actor_from_model(model)
    sess = ort.InferenceSession(str(tiny_onnx), providers=["CPUExecutionProvider"])

    def onnx_act(obs):
        return sess.run(["action"], {"obs": obs})[0]

    obs = record_observations(onnx_act, N_OBS)
    assert obs.shape == (N_OBS, 1032) and obs.dtype == np.float32
    with torch.no_grad():
        t_action, t_logits = (x.numpy() for x in actor(torch.from_numpy(obs)))
    o_action, o_logits = sess.run(["action", "logits"], {"obs": obs})
    assert o_action.dtype == np.int64 and o_action.shape == (N_OBS,)
    assert o_logits.dtype == np.float32 and o_logits.shape == (N_OBS, 25)
    np.testing.assert_allclose(o_logits, t_logits, atol=1e-5, rtol=0)
    np.testing.assert_array_equal(o_action, t_action)
    # a batch of one (the device loop) gives the same as the big batch
    single = sess.run(["action", "logits"], {"obs": obs[:1]})
    np.testing.assert_array_equal(single[0], o_action[:1])
    np.testing.assert_allclose(single[1], o_logits[:1], atol=1e-5, rtol=0)


def test_graph_and_metadata_follow_the_contract(tiny_onnx):
    model = onnx.load(str(tiny_onnx))
    onnx.checker.check_model(model, full_check=True)
    assert model.ir_version <= 10
    assert [i.name for i in model.graph.input] == ["obs"]
    dims = model.graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param and not dims[0].dim_value  # dynamic batch
    assert dims[1].dim_value == 1032
    assert [o.name for o in model.graph.output] == ["action", "logits"]
    assert len(model.graph.value_info) == 0
    meta = {p.key: p.value for p in model.metadata_props}
    for key in (
        "airq.obs_dim",
        "airq.action_space",
        "airq.action_table",
        "airq.preset",
        "airq.precision",
        "airq.env_id",
        "airq.level",
        "airq.env_config",
        "airq.algorithm",
        "airq.train_steps",
        "airq.seed",
        "airq.success_rate",
        "airq.observation_layout",
        "airq.backend",
    ):
        assert key in meta, key
    assert meta["airq.obs_dim"] == "1032"
    assert meta["airq.action_space"] == "discrete:25"
    assert json.loads(meta["airq.action_table"]) == action_table_rows()
    assert meta["airq.precision"] == "fp32" and meta["airq.preset"] == "policy1" and meta["airq.algorithm"] == "ppo"
    assert meta["airq.env_id"] == "AirNav-v0" and meta["airq.level"] == "default" and meta["airq.backend"] == "embedded"
    assert json.loads(meta["airq.env_config"])["camera"]["width"] == 32
    assert 2048 <= int(meta["airq.train_steps"]) <= 8192 and meta["airq.seed"] == "3"
    assert 0.0 <= float(meta["airq.success_rate"]) <= 1.0


def test_dynamic_int8_quantization_accepts_the_export(tiny_onnx, tmp_path):
    """Guards the known pitfall: quantize_dynamic failing with ShapeInferenceError on torch exports."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    out = tmp_path / "tiny_int8.onnx"
    quantize_dynamic(str(tiny_onnx), str(out), weight_type=QuantType.QInt8)
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    action = sess.run(["action"], {"obs": np.zeros((3, 1032), np.float32)})[0]
    assert action.shape == (3,)
