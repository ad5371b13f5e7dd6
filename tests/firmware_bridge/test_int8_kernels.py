"""The int8 kernel probe (firmware_bridge.int8_kernels): the embedded models are the ones it claims to be,
its verdict matches the CPU's int8 instructions, the u8s7 and s8s8 schemes are exact on this host, and a
file in a scheme this host does not compute exactly gets a warning. (On an emulated AVX2 CPU:
tests/quantize/test_schemes_on_avx2.py.)"""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from firmware_bridge.int8_kernels import (
    PROBE_ACTIVATION,
    PROBE_COLUMNS,
    PROBE_K,
    PROBE_SIGNED_ACTIVATIONS,
    Int8Kernels,
    cpu_int8_features,
    int8_kernels,
    probe_model_bytes,
    run_probe,
    saturation_warning,
    scheme_of,
)


@pytest.mark.parametrize("signed", [False, True], ids=["u8s8", "s8s8"])
def test_embedded_probe_is_the_documented_qgemm(signed):
    b = np.array([PROBE_COLUMNS] * PROBE_K, dtype=np.int8)
    a_type = np.int8 if signed else np.uint8
    inits = [
        numpy_helper.from_array(b, "b"),
        numpy_helper.from_array(np.array(1.0, np.float32), "a_scale"),
        numpy_helper.from_array(np.array(0, a_type), "a_zero_point"),
        numpy_helper.from_array(np.array(1.0, np.float32), "b_scale"),
        numpy_helper.from_array(np.array(0, np.int8), "b_zero_point"),
    ]
    node = helper.make_node(
        "QGemm",
        ["a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point"],
        ["y"],
        domain="com.microsoft",
        name="probe",
    )
    graph = helper.make_graph(
        [node],
        "airq_int8_probe",
        [helper.make_tensor_value_info("a", TensorProto.INT8 if signed else TensorProto.UINT8, ["n", PROBE_K])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", len(PROBE_COLUMNS)])],
        inits,
    )
    built = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
        ir_version=8,
        producer_name="airq",
    )
    assert onnx.load_from_string(probe_model_bytes(signed)) == built


def test_verdict_matches_the_cpus_int8_instructions():
    k = run_probe()
    assert k.error is None
    assert k.u8s7_exact, "the u8s7 scheme shipped for every int8 model must be exact on every supported CPU"
    assert k.s8s8_exact, "onnxruntime's S8S8 kernels widen before adding: exact on AVX2, VNNI and Arm"
    features = cpu_int8_features().split()
    if "avx512_vnni" in features or "avx_vnni" in features or "asimd" in features:
        assert k.u8s8_exact  # VNNI adds int8 products in 32 bits; Arm widens before adding
    elif "avx2" in features:
        assert not k.u8s8_exact  # VPMADDUBSW's 16-bit pair sums saturate: 2 x 255 x 127 > 32,767
    assert k.kind == ("exact" if k.u8s8_exact else "saturating U8S8")
    assert int8_kernels() is int8_kernels()  # probed once per process


def test_saturation_is_what_the_probe_says_it_is():
    """Independently of the probe's verdict: a full-range QGemm row product equals 255 x 64 x 127 exactly
    where the probe says u8s8 is exact, and is clamped to 32 pair sums of 32,767 where it says not."""
    import onnxruntime as ort

    y = ort.InferenceSession(probe_model_bytes(), providers=["CPUExecutionProvider"]).run(
        None, {"a": np.full((1, PROBE_K), PROBE_ACTIVATION, np.uint8)}
    )[0][0]
    exact = PROBE_ACTIVATION * PROBE_K * np.array(PROBE_COLUMNS, dtype=np.float64)
    assert np.array_equal(y[2:], exact[2:])
    if int8_kernels().u8s8_exact:
        assert np.array_equal(y[:2], exact[:2])
    else:
        assert y[0] == 32 * 32767 and y[0] < exact[0]
    signed = ort.InferenceSession(probe_model_bytes(signed=True), providers=["CPUExecutionProvider"])
    for value in PROBE_SIGNED_ACTIVATIONS:  # (-128) x (-127) pairs: 32,512, the largest S8S8 pair sum
        y = signed.run(None, {"a": np.full((4, PROBE_K), value, np.int8)})[0]
        assert np.array_equal(y, np.tile(value * PROBE_K * np.array(PROBE_COLUMNS, np.float64), (4, 1)))


@pytest.mark.parametrize(
    "meta, scheme",
    [
        ({"airq.precision": "fp32"}, None),
        ({}, None),
        ({"airq.precision": "fp16"}, None),
        ({"airq.precision": "int8"}, "u8s8"),  # files from before schemes were recorded
        ({"airq.precision": "int8", "airq.quant.scheme": "u8s7"}, "u8s7"),
        ({"airq.precision": "int8-dynamic", "airq.quant.scheme": "u8s7"}, "u8s7"),
        ({"airq.precision": "int8-dynamic"}, "u8s8"),
        ({"airq.precision": "int8", "airq.quant.scheme": "s8s8"}, "s8s8"),
    ],
)
def test_scheme_of_metadata(meta, scheme):
    assert scheme_of(meta) == scheme


def test_warning_only_where_the_host_saturates():
    saturating = Int8Kernels(u8s8_exact=False, u8s7_exact=True, cpu_features="avx2", onnxruntime="x", s8s8_exact=True)
    exact = Int8Kernels(u8s8_exact=True, u8s7_exact=True, cpu_features="avx512_vnni", onnxruntime="x", s8s8_exact=True)
    legacy = {"airq.precision": "int8"}
    u8s7 = {"airq.precision": "int8", "airq.quant.scheme": "u8s7"}
    msg = saturation_warning(legacy, saturating)
    assert msg and "u8s8" in msg and "--scheme u8s7" in msg and "\n" not in msg
    assert saturation_warning(legacy, exact) is None
    assert saturation_warning(u8s7, saturating) is None
    assert saturation_warning({"airq.precision": "int8", "airq.quant.scheme": "s8s8"}, saturating) is None
    assert saturating.kind == "saturating U8S8" and exact.kind == "exact"
    assert saturation_warning({"airq.precision": "fp32"}, saturating) is None
    assert (saturation_warning(legacy) is None) == int8_kernels().u8s8_exact


def test_a_peer_without_the_s8s8_case_is_not_trusted_with_s8s8():
    """A device whose probe predates the S8S8 case reports no ``s8s8_exact``: s8s8 is then not exact there
    (unknown), and the kind is not "exact"; a full report round-trips."""
    old = {"u8s8_exact": True, "u8s7_exact": True, "cpu_features": "asimd", "onnxruntime": "1.32.0", "error": None}
    k = Int8Kernels.from_dict(old)
    assert not k.exact_for("s8s8") and k.exact_for("u8s8") and k.kind == "inexact"
    assert "s8s8" in k.describe()
    here = int8_kernels()
    assert Int8Kernels.from_dict(here.as_dict()) == here
    assert Int8Kernels.from_dict({"s8s8_exact": True}).error  # the rest missing: unknown
