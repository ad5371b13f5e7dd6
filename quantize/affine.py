"""The seed's (QuaRL) uniform affine quantizer for n = 2..16 bits, as fake quantization.

For a tensor W, with the range widened to include 0:

    delta = (|min(W, 0)| + |max(W, 0)|) / 2^n
    z     = floor(-min(W, 0) / delta)
    Q_n(W) = floor(W / delta) + z            (integer code)
    W_hat  = (Q_n(W) - z) * delta             (fake-quantized value)

Two details the formula leaves open, decided here and documented in docs/quantize.md:

* The code is clipped to [0, 2^n - 1]. Without the clip, W = max(W) maps to floor(max/delta) + z, which
  reaches 2^n (n+1 bits) whenever the range splits into whole steps (e.g. W in [0, 1]).
* ``rounding="floor"`` is the paper's formula, this module's default (the formula as printed).
  ``rounding="nearest"`` is what the seed's public code (np.rint), TF/torch fake-quant ops and ONNX
  QuantizeLinear do; it is used for activations, so the n = 8 QDQ export computes exactly what QAT
  trained, and it is the weight rounding of ``quantize qat`` and ``quantize sweep`` by default (the
  floor collapses below 8 bits; it stays available as ``--rounding floor`` / ``ptq-floor``, ``qat-floor``).

A constant-zero tensor has delta = 0: it quantizes to itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from quantize.errors import QuantizeError

MIN_BITS, MAX_BITS = 2, 16
Rounding = Literal["floor", "nearest"]


def check_bits(bits: int) -> int:
    if isinstance(bits, bool) or not isinstance(bits, (int, np.integer)) or not MIN_BITS <= int(bits) <= MAX_BITS:
        raise QuantizeError(f"bits must be an integer from {MIN_BITS} to {MAX_BITS}, got {bits!r}")
    return int(bits)


@dataclass(frozen=True)
class AffineParams:
    """delta (step), z (integer zero point) and n for one tensor (per-tensor, as in the seed)."""

    delta: float
    zero_point: int
    bits: int

    @property
    def qmax(self) -> int:
        return 2**self.bits - 1


def affine_params_from_range(lo: float, hi: float, bits: int) -> AffineParams:
    """delta and z from an observed range [lo, hi] (widened to include 0), per the seed's formula."""
    bits = check_bits(bits)
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    delta = (abs(lo) + abs(hi)) / 2**bits
    if delta == 0.0:
        return AffineParams(0.0, 0, bits)
    zero_point = int(np.floor(-lo / delta))
    return AffineParams(delta, min(zero_point, 2**bits - 1), bits)


def affine_params(w: np.ndarray, bits: int) -> AffineParams:
    w = np.asarray(w)
    return affine_params_from_range(float(w.min(initial=0.0)), float(w.max(initial=0.0)), bits)


def quantize_codes(w: np.ndarray, params: AffineParams, rounding: Rounding = "floor") -> np.ndarray:
    """Integer codes Q_n(W) in [0, 2^n - 1] (int64)."""
    w = np.asarray(w, dtype=np.float64)
    if params.delta == 0.0:
        return np.zeros(w.shape, dtype=np.int64)
    scaled = w / params.delta
    steps = np.floor(scaled) if rounding == "floor" else np.rint(scaled)
    return np.clip(steps + params.zero_point, 0, params.qmax).astype(np.int64)


def dequantize(codes: np.ndarray, params: AffineParams) -> np.ndarray:
    return ((np.asarray(codes, dtype=np.float64) - params.zero_point) * params.delta).astype(np.float32)


def fake_quantize(w: np.ndarray, bits: int, rounding: Rounding = "floor") -> np.ndarray:
    """W_hat = dequantize(Q_n(W)): the float tensor an n-bit policy really computes with."""
    params = affine_params(w, bits)
    if params.delta == 0.0:
        return np.asarray(w, dtype=np.float32).copy()
    return dequantize(quantize_codes(w, params, rounding), params)


def sqnr_db(w: np.ndarray, w_hat: np.ndarray) -> float:
    """Signal-to-quantization-noise ratio 10 log10(sum W^2 / sum (W - W_hat)^2), in dB (inf if exact)."""
    w = np.asarray(w, dtype=np.float64)
    noise = float(np.sum((w - np.asarray(w_hat, dtype=np.float64)) ** 2))
    signal = float(np.sum(w**2))
    if noise == 0.0:
        return float("inf")
    return 10.0 * np.log10(signal / noise) if signal > 0 else float("-inf")
