"""policies.widen: a tiny real ONNX MLP widened to the 144 x 256 camera computes exactly what the
source computes on the area-downsampled image; metadata, atomic output, bad input."""

import hashlib
import json
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from nav_env.config import camera_overrides, load_level, observation_overrides_from_metadata
from nav_env.env import NavEnv
from policies.errors import run_cli
from policies.widen import main as widen_main
from policies.widen import resample_operator


def tiny_policy(path, hidden=16, seed=0):
    rng = np.random.default_rng(seed)
    w1 = rng.normal(0, 0.2, (hidden, 1032)).astype(np.float32)
    b1 = rng.normal(0, 0.1, hidden).astype(np.float32)
    w2 = rng.normal(0, 0.5, (25, hidden)).astype(np.float32)
    b2 = np.zeros(25, np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("Gemm", ["obs", "w1", "b1"], ["h"], transB=1),
            helper.make_node("Relu", ["h"], ["r"]),
            helper.make_node("Gemm", ["r", "w2", "b2"], ["logits"], transB=1),
            helper.make_node("ArgMax", ["logits"], ["action"], axis=1, keepdims=0),
        ],
        "tiny",
        [helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["batch", 1032])],
        [
            helper.make_tensor_value_info("action", TensorProto.INT64, ["batch"]),
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 25]),
        ],
        [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    for k, v in {
        "airq.obs_dim": "1032",
        "airq.precision": "fp32",
        "airq.level": "default",
        "airq.action_space": "discrete:25",
        "airq.env_config": json.dumps(load_level("default").to_dict()),
    }.items():
        e = model.metadata_props.add()
        e.key, e.value = k, v
    onnx.save(model, path)
    return path


def area(n_out, n_in):  # independent of policies.widen: overlap lengths, rows normalised
    edges = np.linspace(0, n_in, n_out + 1)
    m = np.array([[max(0.0, min(edges[i + 1], j + 1) - max(edges[i], j)) for j in range(n_in)] for i in range(n_out)])
    return m / m.sum(1, keepdims=True)


def run(path, obs):
    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return s.run(["logits", "action"], {"obs": obs.astype(np.float32)})


def test_resample_operator_matches_separable_area_average():
    r = resample_operator((32, 32), (144, 256))
    assert r.shape == (1024, 36864)
    np.testing.assert_allclose(r.sum(1), 1.0)
    img = np.random.default_rng(1).random((144, 256))
    np.testing.assert_allclose(r @ img.ravel(), (area(32, 144) @ img @ area(32, 256).T).ravel(), atol=1e-12)


def test_widened_equals_source_on_downsampled_observation(tmp_path):
    src = tiny_policy(tmp_path / "tiny.onnx")
    out = tmp_path / "sub" / "tiny_144x256.onnx"
    assert run_cli(widen_main, [str(src), "--camera", "144x256", "-o", str(out)]) == 0
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")]  # no temp file left behind
    env = NavEnv("default", overrides=camera_overrides("144x256"))
    rng = np.random.default_rng(0)
    big = []
    obs, _ = env.reset(seed=4)
    for _ in range(12):
        big.append(obs)
        obs, _, te, tr, _ = env.step(int(rng.integers(0, 25)))
        if te or tr:
            obs, _ = env.reset(seed=int(rng.integers(100)))
    big = np.stack(big)
    big[3, :36864] = rng.random(36864)  # and an arbitrary image
    small = np.concatenate(
        [(area(32, 144) @ big[:, :36864].reshape(-1, 144, 256) @ area(32, 256).T).reshape(-1, 1024), big[:, 36864:]],
        axis=1,
    )
    logits_big, act_big = run(out, big)
    logits_small, act_small = run(src, small)
    np.testing.assert_allclose(logits_big, logits_small, atol=2e-4, rtol=1e-4)
    np.testing.assert_array_equal(act_big, act_small)

    meta = {p.key: p.value for p in onnx.load(str(out)).metadata_props}
    assert meta["airq.obs_dim"] == "36872"
    assert meta["airq.widen.source_sha256"] == hashlib.sha256(src.read_bytes()).hexdigest()
    assert meta["airq.widen.camera"] == "144x256" and meta["airq.precision"] == "fp32"
    assert load_level("default", observation_overrides_from_metadata(meta)).obs_dim == 36872


@pytest.mark.parametrize(
    "args, message",
    [
        (["missing.onnx", "--camera", "144x256", "-o", "x.onnx"], "no such file"),
        (["SRC", "--camera", "144by256", "-o", "x.onnx"], "camera size"),
        (["SRC", "--camera", "16x16", "-o", "x.onnx"], "smaller than the source"),
        (["SRC", "--camera", "144x256"], "needs --camera HxW and -o"),
        (["SRC", "--check", "missing.onnx"], "no such file"),
    ],
)
def test_bad_input_exits_2_with_one_line(tmp_path, args, message):
    src = tiny_policy(tmp_path / "tiny.onnx")
    argv = [str(src) if a == "SRC" else str(tmp_path / a) if a.endswith(".onnx") else a for a in args]
    p = subprocess.run([sys.executable, "-m", "policies.widen", *argv], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stderr
    assert message in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x.onnx").exists()


def test_quantize_calibrates_a_widened_model_at_its_own_camera(tmp_path):
    from quantize.ptq import quantize_file

    src = tiny_policy(tmp_path / "tiny.onnx")
    wide = tmp_path / "tiny_144x256.onnx"
    assert run_cli(widen_main, [str(src), "--camera", "144x256", "-o", str(wide)]) == 0
    report = quantize_file(
        wide,
        "int8",
        tmp_path / "tiny_144x256_int8.onnx",
        calibration_episodes=2,
        heldout_episodes=1,
        max_calibration_samples=500,
    )
    assert report.calibration_samples > 0 and report.heldout_samples > 0
    q = ort.InferenceSession(str(report.output), providers=["CPUExecutionProvider"])
    assert q.get_inputs()[0].shape[1] == 36872
    meta = dict(q.get_modelmeta().custom_metadata_map)
    assert meta["airq.widen.camera"] == "144x256" and meta["airq.precision"] == "int8"
