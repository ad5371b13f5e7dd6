"""Distilled static int8 (ptq --distill-steps, --float-split-sum): the torch interpretation of the
quantized graph computes what onnxruntime computes, training the codes brings the int8 logits closer
to the fp32 source on held-out rollouts, the file stays QOperator int8 with full metadata, runs are
reproducible and bad options exit 2 without output."""

import copy
import json

import numpy as np
import onnx
import pytest
import torch
from onnx import helper, numpy_helper

from nav_env.config import load_level
from quantize.calibration import CALIBRATION_SEED, HELDOUT_SEED, collect_observations
from quantize.model_io import load_policy, metadata_of, serialize
from quantize.runtime import policy_fn, run_logits, session

# Where the host's kernels saturate (U8S8 16-bit pair sums), layer outputs are off by many codes: the
# logits differ by far more than this, where an exact host differs only by float32 summation order.
SATURATED_LOGIT_ERROR = 0.1
UNIT_ROUNDOFF = 2.0**-24  # float32
NEAR_TIE = 0.1  # fp32 top-2 logit gap (logits span ~17); 190 of the 5,000 held-out observations on an AVX-512 host


def run(argv, capsys):
    from quantize.cli import main
    from quantize.errors import run_cli

    code = run_cli(main, argv)
    return code, capsys.readouterr().err


def assert_one_line_error(code, err, needle):
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], err


@pytest.fixture(scope="module")
def heldout(fp32_model):
    sess = session(fp32_model.read_bytes())
    obs = collect_observations(policy_fn(sess), load_level("default"), 10, HELDOUT_SEED)
    actions, logits = run_logits(sess, obs)
    return obs, actions, logits


@pytest.fixture(scope="module")
def plain_int8(fp32_model, tmp_path_factory):
    from quantize.ptq import StaticInt8Options, quantize_static_int8

    src = load_policy(fp32_model)
    calib = collect_observations(policy_fn(session(src.data)), load_level("default"), 6, CALIBRATION_SEED)
    return (
        quantize_static_int8(src, calib, StaticInt8Options(float_split_sum=False)),
        quantize_static_int8(src, calib, StaticInt8Options(float_split_sum=True)),
    )


@pytest.fixture(scope="module")
def distilled(fp32_model, tmp_path_factory):
    from quantize.distill import DistillOptions
    from quantize.ptq import StaticInt8Options, quantize_file

    d = tmp_path_factory.mktemp("distill")
    paths = []
    for name in ("a.onnx", "b.onnx"):
        quantize_file(
            fp32_model,
            "int8",
            d / name,
            calibration_episodes=6,
            heldout_episodes=4,
            options=StaticInt8Options(float_split_sum=True),
            distill=DistillOptions(steps=300, seed=3),
            distill_episodes=30,
        )
        paths.append(d / name)
    return paths


def _onnxruntime_tensors(model: onnx.ModelProto, obs: np.ndarray) -> dict[str, np.ndarray]:
    """Every node output as onnxruntime computes it (the graph's outputs extended to all of them, which
    also keeps onnxruntime from fusing an unsplit sum's DequantizeLinear -> Add -> QuantizeLinear into
    QLinearAdd: the logits compared after it are the unmodified model's)."""
    m = copy.deepcopy(model)
    known = {o.name for o in m.graph.output}
    m.graph.output.extend(
        helper.make_empty_tensor_value_info(o) for n in m.graph.node for o in n.output if o and o not in known
    )
    sess = session(serialize(m))
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {"obs": obs})))


def _float_gemm_bound(model: onnx.ModelProto, values: dict[str, np.ndarray]) -> np.ndarray:
    """Elementwise bound on |reference logits - onnxruntime logits| when both compute the same inputs.

    Integer tensors are equal bit for bit (checked first), so only an fp32 Gemm (the logits layer kept
    fp32) differs: torch and onnxruntime sum its K products and the bias in float32 in different orders.
    Any order of an n-term inner product is within gamma_n |x|.|w| of the exact value, gamma_n = n u /
    (1 - n u) (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., eq. 3.5; it holds with
    FMA too); with the bias as a term n = K + 1, and the two results are within twice that."""
    producer = {o: n for n in model.graph.node for o in n.output}
    node = producer["logits"]
    if node.op_type != "Gemm":
        return np.zeros_like(values["logits"], dtype=np.float64)  # a dequantized QGemm output: exact
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    assert attrs.get("alpha", 1.0) == 1.0 and attrs.get("beta", 1.0) == 1.0 and not attrs.get("transA", 0)
    inits = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer}
    w = inits[node.input[1]].T if attrs.get("transB", 0) else inits[node.input[1]]
    bias = np.abs(inits[node.input[2]]) if len(node.input) > 2 and node.input[2] else 0.0
    n = w.shape[0] + 1
    gamma = n * UNIT_ROUNDOFF / (1 - n * UNIT_ROUNDOFF)
    return 2 * gamma * (np.abs(values[node.input[0]].astype(np.float64)) @ np.abs(w) + bias)


def _logit_error(model_bytes: bytes, heldout, min_gap: float = 0.0) -> tuple[float, float]:
    """Mean squared logit error and action agreement with the fp32 source; agreement only over
    observations whose fp32 top-2 logit gap is at least ``min_gap``."""
    obs, ref_actions, ref_logits = heldout
    a, lg = run_logits(session(model_bytes), obs)
    top2 = np.sort(ref_logits, axis=1)[:, -2:]
    decided = top2[:, 1] - top2[:, 0] >= min_gap
    return float(np.mean((lg - ref_logits) ** 2)), float(np.mean(a[decided] == ref_actions[decided]))


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"per_channel": False},
        {"float_split_sum": False},
        {"keep_last_layer_fp32": False},
        {"split_input": False},
        {"scheme": "u8s8"},
        {"scheme": "u8s8", "per_channel": False},
    ],
)
def test_torch_graph_computes_what_onnxruntime_computes(fp32_model, heldout, options):
    """The integer reference equals onnxruntime on this host wherever the probe says its int8 kernels
    compute the file's scheme exactly (u8s7 everywhere; u8s8 only with VNNI or on Arm), and not where
    it says they saturate: the probe is checked against a whole policy, not only its one QGemm.
    Equal means every integer and float tensor bit for bit, the fp32 logits layer within its float32
    summation bound (a code one off at a rounding tie moves the logits by 0.01-0.06)."""
    from firmware_bridge.int8_kernels import int8_kernels
    from quantize.distill import QuantGraph
    from quantize.ptq import INT8_SCHEMES, StaticInt8Options, quantize_static_int8

    opts = StaticInt8Options(**options)
    src = load_policy(fp32_model)
    calib = collect_observations(policy_fn(session(src.data)), load_level("default"), 6, CALIBRATION_SEED)
    model = quantize_static_int8(src, calib, opts)
    obs = heldout[0]
    graph = QuantGraph(model, INT8_SCHEMES[opts.scheme].weight_max)
    with torch.no_grad():
        values, codes = graph.evaluate(torch.as_tensor(obs))
    ours = {k: t.numpy() for k, t in (values | codes).items()}  # codes: the integers of quantized tensors
    lg = ours["logits"]
    a, ort_lg = run_logits(session(serialize(model)), obs)
    if int8_kernels().exact_for(opts.scheme):
        theirs = _onnxruntime_tensors(model, obs)
        for node in model.graph.node:
            if node.op_type in ("Gemm", "ArgMax"):
                continue
            name = node.output[0]
            assert np.array_equal(ours[name].astype(theirs[name].dtype), theirs[name]), (node.name, name)
        bound = _float_gemm_bound(model, ours)
        assert np.all(np.abs(lg.astype(np.float64) - ort_lg) <= bound), np.abs(lg - ort_lg).max()
        top2 = np.sort(ort_lg.astype(np.float64), axis=1)[:, -2:]
        near_tie = top2[:, 1] - top2[:, 0] <= 2 * bound.max(axis=1)  # the argmax may go either way
        assert np.all((lg.argmax(1) == a) | near_tie)
    else:
        assert np.abs(lg - ort_lg).max() > SATURATED_LOGIT_ERROR
    # writing the untrained codes back is the identity
    back = {t.name: numpy_helper.to_array(t) for t in graph.to_onnx().graph.initializer}
    for t in model.graph.initializer:
        assert np.array_equal(back[t.name], numpy_helper.to_array(t)), t.name


def test_float_split_sum_removes_the_second_rounding(plain_int8, heldout):
    uint8_sum, float_sum = plain_int8
    ops = [n.op_type for n in float_sum.graph.node]
    assert ops.count("QGemm") == 4 and ops.count("DequantizeLinear") == 1  # only before the fp32 logits layer
    assert [n.op_type for n in uint8_sum.graph.node].count("DequantizeLinear") == 3
    mse_uint8, _ = _logit_error(serialize(uint8_sum), heldout)
    mse_float, _ = _logit_error(serialize(float_sum), heldout)
    assert mse_float < mse_uint8


def test_distillation_brings_int8_logits_closer_on_heldout_rollouts(plain_int8, distilled, heldout):
    """Lower logit error, and no decision lost that the fp32 source makes by a clear margin. Near ties
    (top-2 gap below NEAR_TIE) go either way: the int8 logits are off by up to ~0.16 before and after,
    and one held-out trajectory can hold ~100 near-tie observations. Measured on an AVX-512 host over
    distillation seeds 0-13: 1 or 2 runs in 14 flip such a cluster together (agreement 97.9%, else
    99.8-99.9%), and every run keeps 100% of the clear decisions."""
    before_mse, before_agree = _logit_error(serialize(plain_int8[1]), heldout, NEAR_TIE)
    after_mse, after_agree = _logit_error(distilled[0].read_bytes(), heldout, NEAR_TIE)
    assert after_mse < 0.8 * before_mse
    assert after_agree >= before_agree - 0.002 and after_agree >= 0.99


def test_distilled_file_is_static_int8_with_metadata(distilled, fp32_model):
    from quantize.inspect_model import describe, format_text

    model = onnx.load(distilled[0])
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("QGemm") == 4 and "Gemm" in ops  # 4 integer layers + the fp32 logits layer
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    int8 = [inits[n.input[3]] for n in model.graph.node if n.op_type == "QGemm"]
    assert sum(w.size for w in int8) >= 1032 * 64 + 2 * 64 * 64
    assert all(w.dtype == np.int8 and np.abs(w).max() <= 64 for w in int8)  # distilled codes stay in u8s7's range
    meta = metadata_of(model)
    assert meta["airq.precision"] == "int8"
    assert "distilled" in meta["airq.quant.method"] and meta["airq.quant.float_split_sum"] == "true"
    d = json.loads(meta["airq.quant.distill"])
    assert d["steps"] == 300 and d["torch_seed"] == 3 and d["episodes"] == "30 per level" and d["samples"] > 1000
    changed, total = map(int, d["weight_codes_changed"].split("/"))
    assert 0 < changed < total
    assert meta["airq.quant.source_sha256"] == load_policy(fp32_model).sha256
    assert json.loads(meta["airq.quant.layer_scales"])
    assert "distill" in format_text(describe(distilled[0]))


def test_distilled_runs_are_reproducible(distilled):
    a, b = (onnx.load(p) for p in distilled)
    ia = {t.name: numpy_helper.to_array(t) for t in a.graph.initializer}
    ib = {t.name: numpy_helper.to_array(t) for t in b.graph.initializer}
    assert ia.keys() == ib.keys() and all(np.array_equal(ia[k], ib[k]) for k in ia)


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--to", "fp16", "--distill-steps", "10"], "apply to --to int8 only"),
        (["--to", "int8", "--distill-steps", "-1"], "--distill-steps must be >= 0"),
        (["--to", "int8", "--distill-steps", "10", "--distill-episodes", "0"], "--distill-episodes must be >= 1"),
        (["--to", "int8", "--distill-steps", "10", "--distill-lr", "0"], "--distill-lr must be > 0"),
        (["--to", "int8", "--distill-steps", "10", "--distill-rounds", "0"], "--distill-rounds must be >= 1"),
        (["--to", "int8", "--distill-steps", "10", "--format", "qdq"], "needs --format qoperator"),
        (["--to", "int8", "--float-split-sum", "--no-split-input"], "needs the depth/state split"),
        (
            ["--to", "int8", "--distill-steps", "10", "--seed", "2999990", "--distill-episodes", "20"],
            "overlap held-out seeds",
        ),
    ],
)
def test_bad_distill_options(fp32_model, tmp_path, capsys, extra, needle):
    out = tmp_path / "o.onnx"
    code, err = run(["ptq", str(fp32_model), "-o", str(out)] + extra, capsys)
    assert_one_line_error(code, err, needle)
    assert list(tmp_path.iterdir()) == []


def test_distill_refuses_graphs_it_cannot_interpret(fp32_model):
    from quantize.distill import QuantGraph
    from quantize.errors import QuantizeError

    with pytest.raises(QuantizeError, match="no QGemm found"):
        QuantGraph(onnx.load(fp32_model))


def test_card_shows_the_distillation(distilled):
    from quantize.card import build_card

    text = build_card(distilled[0], [], None, None)
    assert "| distillation | integer codes trained toward the fp32 logits" in text and "300 Adam steps" in text
