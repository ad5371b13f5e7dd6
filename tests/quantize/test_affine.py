"""The seed's affine quantizer against hand-computed values, and round-trip error bounds per bit width."""

import numpy as np
import pytest

from quantize.affine import affine_params, dequantize, fake_quantize, quantize_codes, sqnr_db
from quantize.errors import QuantizeError


def test_hand_computed_two_bits():
    # W in [-1, 3]: delta = (1 + 3) / 2^2 = 1, z = floor(1 / 1) = 1
    w = np.array([-1.0, -0.5, 0.0, 0.4, 1.7, 3.0])
    p = affine_params(w, 2)
    assert p.delta == 1.0 and p.zero_point == 1
    # Q = floor(W / delta) + z = [-1, -1, 0, 0, 1, 3] + 1, clipped to [0, 3]
    np.testing.assert_array_equal(quantize_codes(w, p), [0, 0, 1, 1, 2, 3])
    np.testing.assert_allclose(dequantize(quantize_codes(w, p), p), [-1, -1, 0, 0, 1, 2])


def test_hand_computed_three_bits_asymmetric():
    # W in [-0.3, 0.5]: delta = 0.8 / 8 = 0.1, z = floor(0.3 / 0.1) = 3 (2.9999.. in floats -> 2? no: 3)
    w = np.array([-0.3, -0.05, 0.0, 0.12, 0.5])
    p = affine_params(w, 3)
    assert p.delta == pytest.approx(0.1)
    assert p.zero_point == int(np.floor(0.3 / p.delta))
    codes = quantize_codes(w, p)
    expected = np.clip(np.floor(w / p.delta) + p.zero_point, 0, 7)
    np.testing.assert_array_equal(codes, expected)
    assert codes.min() >= 0 and codes.max() <= 7


def test_positive_only_tensor_has_zero_point_zero():
    # ReLU activations: min(W, 0) = 0, so z = 0 and delta = max / 2^n
    w = np.array([0.0, 0.25, 0.5, 1.0])
    p = affine_params(w, 2)
    assert p.zero_point == 0 and p.delta == 0.25
    # 1.0 / 0.25 = 4 would need a third bit: clipped to code 3
    np.testing.assert_array_equal(quantize_codes(w, p), [0, 1, 2, 3])


def test_nearest_rounding_matches_seed_code():
    w = np.array([-1.0, 0.49, 0.51, 2.0])
    p = affine_params(w, 2)  # delta 0.75, z 1
    np.testing.assert_array_equal(quantize_codes(w, p, "nearest"), np.clip(np.rint(w / 0.75) + 1, 0, 3))


def test_zero_tensor_is_unchanged():
    w = np.zeros((3, 4), np.float32)
    np.testing.assert_array_equal(fake_quantize(w, 4), w)


@pytest.mark.parametrize("bits", list(range(2, 17)))
def test_round_trip_error_bound(bits):
    rng = np.random.default_rng(bits)
    w = rng.normal(0.0, 0.1, size=(64, 32)).astype(np.float32)
    p = affine_params(w, bits)
    err = np.abs(fake_quantize(w, bits) - w)
    # floor: error < delta everywhere except the one value clipped at the top, which is < 2 delta
    assert err.max() < 2 * p.delta + 1e-7
    assert np.mean(err < p.delta + 1e-7) >= 1 - 1 / w.size
    near = np.abs(fake_quantize(w, bits, "nearest") - w)
    assert near.max() <= p.delta + 1e-7
    # nearest: half a step inside the grid's span; z is floored, so the top of the range may clip
    inside = (w >= (-p.zero_point - 0.5) * p.delta) & (w <= (p.qmax - p.zero_point + 0.5) * p.delta)
    assert near[inside].max() <= p.delta / 2 + 1e-6
    assert len(np.unique(quantize_codes(w, p))) <= 2**bits


def test_sqnr_grows_about_6db_per_bit():
    w = np.random.default_rng(0).normal(size=20_000)
    s = [sqnr_db(w, fake_quantize(w, b, "nearest")) for b in (4, 6, 8)]
    assert 10 < s[1] - s[0] < 14 and 10 < s[2] - s[1] < 14


@pytest.mark.parametrize("bits", [0, 1, 17, 32, -3, 2.5, True])
def test_bits_outside_range_rejected(bits):
    with pytest.raises(QuantizeError, match="bits must be an integer from 2 to 16"):
        affine_params(np.ones(3), bits)
