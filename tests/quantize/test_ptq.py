"""Static int8 / dynamic int8 / fp16 artifacts: run in onnxruntime, keep the interface and metadata,
and the int8 model agrees with fp32 on observations recorded from held-out rollouts."""

import hashlib
import json

import numpy as np
import onnx
import pytest

from nav_env.config import load_level
from quantize.calibration import HELDOUT_SEED, collect_observations
from quantize.model_io import MAX_IR_VERSION, metadata_of
from quantize.runtime import policy_fn, run_logits, session


@pytest.fixture(scope="module")
def heldout_obs(fp32_model):
    return collect_observations(policy_fn(session(fp32_model.read_bytes())), load_level("default"), 10, HELDOUT_SEED)


def test_static_int8_agrees_with_fp32_on_recorded_observations(fp32_model, quantized_models, heldout_obs):
    ref, _ = run_logits(session(fp32_model.read_bytes()), heldout_obs)
    q, logits = run_logits(session(quantized_models["int8"].read_bytes()), heldout_obs)
    assert len(heldout_obs) > 1000
    assert np.mean(q == ref) >= 0.99
    # the logits layer stays fp32: no exact top-2 ties from quantized outputs
    top2 = np.sort(logits, axis=1)[:, -2:]
    assert np.mean(top2[:, 0] == top2[:, 1]) < 0.001


def test_static_int8_really_runs_integer_ops(quantized_models):
    model = onnx.load(quantized_models["int8"])
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("QGemm") + ops.count("QLinearMatMul") >= 3
    assert model.ir_version <= MAX_IR_VERSION
    int8_bytes = sum(t.raw_data.__len__() for t in model.graph.initializer if t.data_type == onnx.TensorProto.INT8)
    assert int8_bytes > 60_000  # the 1032x64 + 2 x 64x64 hidden weights


@pytest.mark.parametrize("target", ["int8", "int8-dynamic", "fp16"])
def test_interface_and_metadata(fp32_model, quantized_models, heldout_obs, target):
    path = quantized_models[target]
    model = onnx.load(path)
    meta = metadata_of(model)
    src_meta = metadata_of(onnx.load(fp32_model))
    for key in ("airq.obs_dim", "airq.action_space", "airq.action_table", "airq.preset", "airq.level"):
        assert meta[key] == src_meta[key]
    assert meta["airq.precision"] == target
    assert meta["airq.quant.source_sha256"] == hashlib.sha256(fp32_model.read_bytes()).hexdigest()
    assert meta["airq.quant.method"]
    assert meta["airq.quant.bits"] == ("16" if target == "fp16" else "8")
    assert int(meta["airq.quant.size_bytes"]) == path.stat().st_size
    if target == "int8":
        assert meta["airq.quant.calibration_episodes"] == "6 per level"
        assert meta["airq.quant.levels"] == "default"
        assert meta["airq.quant.calibration_seed"] == "2000000"
        scales = json.loads(meta["airq.quant.layer_scales"])
        assert all("scale" in v or "scale_min" in v for v in scales.values())
        # the first layer is split: depth and state inputs have their own scales
        assert any(k.endswith("_split_depth") for k in scales) and any(k.endswith("_split_state") for k in scales)
    if target != "fp16":  # the scheme exact on every CPU, recorded and true of the weights themselves
        from firmware_bridge.int8_kernels import int8_kernels
        from quantize.inspect_model import describe, format_text, int8_scheme_from_weights

        assert meta["airq.quant.scheme"] == "u8s7" and meta["airq.quant.weight_range"] == "[-64, 64]"
        found = int8_scheme_from_weights(model)
        assert found["scheme"] == "u8s7" and 32 < found["largest_weight_code"] <= 64
        assert int8_kernels().exact_for("u8s7") and describe(path)["int8"]["exact_here"]
        assert "scheme u8s7" in format_text(describe(path))
    if target == "int8":
        assert meta["airq.quant.per_channel"] == "true" and meta["airq.quant.float_split_sum"] == "true"
    sess = session(path.read_bytes())
    assert [i.name for i in sess.get_inputs()] == ["obs"]
    assert [o.name for o in sess.get_outputs()][:2] == ["action", "logits"]
    action, logits = sess.run(["action", "logits"], {"obs": heldout_obs[:7]})
    assert action.dtype == np.int64 and action.shape == (7,)
    assert logits.dtype == np.float32 and logits.shape == (7, 25)


def test_sizes(fp32_model, quantized_models):
    fp32 = fp32_model.stat().st_size
    assert fp32 / quantized_models["fp16"].stat().st_size > 1.9
    # small model: biases and the per-channel scales (1.5 KB of 90 KB) are a larger share
    assert fp32 / quantized_models["int8"].stat().st_size > 3.3


@pytest.mark.parametrize("target", ["int8", "int8-dynamic", "fp16"])
def test_bridge_accepts_the_artifacts(quantized_models, target):
    from firmware_bridge.policy import load_policy

    data = quantized_models[target].read_bytes()
    policy = load_policy(data, expected_sha256=hashlib.sha256(data).hexdigest(), max_bytes=len(data))
    assert policy is not None


def test_card_from_metadata(quantized_models, tmp_path):
    from quantize.card import build_card

    text = build_card(quantized_models["int8"], [], None, "python -m quantize ptq X --to int8")
    assert "precision **int8**" in text and "calibration" in text and "sha256" in text


def test_input_split_is_an_exact_fp32_rewrite(fp32_model, heldout_obs):
    from quantize.model_io import load_policy, serialize
    from quantize.ptq import prepared_copy
    from quantize.split_input import split_first_layer

    src = load_policy(fp32_model)
    split, names = split_first_layer(prepared_copy(src.model), 1024)
    ref_a, ref_l = run_logits(session(src.data), heldout_obs)
    a, lg = run_logits(session(serialize(split)), heldout_obs)
    assert np.array_equal(a, ref_a) and np.abs(lg - ref_l).max() < 1e-4
    assert len(names) == 2
