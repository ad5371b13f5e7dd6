"""Shared by the aarch64 tests (a uniquely named module: `conftest` clashes with other test folders' conftests)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
ENABLED = os.environ.get("AIRQ_TEST_ARM") == "1"
MODELS = REPO / "models"
# The shipped Policy I artifacts: fp32 and static int8 are the pair; the others are compared too
# when present (int8-dynamic under the int8 criteria; fp16 reported, not judged: no criterion set for it).
SHIPPED = {"fp32": MODELS / "policy1_fp32.onnx", "int8": MODELS / "policy1_int8.onnx"}
SHIPPED_EXTRA = {
    "int8-dynamic": (MODELS / "policy1_int8-dynamic.onnx", "int8"),
    "fp16": (MODELS / "policy1_fp16.onnx", "fp16"),
}
FIRST_SEED = 100  # rollouts (level default) from seeds 100, 101, ... whose observations both bridges see
MIN_OBSERVATIONS = 2000  # so a 0.5% disagreement is 10 observations
MAX_STEPS_PER_EPISODE = 300

# Figures the tests measured, printed at the end of the run (pytest -q hides print()).
FIGURES: list[str] = []
RECORDING: dict = {}


@dataclass(frozen=True)
class PolicyUnderTest:
    label: str
    path: Path
    precision: str  # fp32, int8 or fp16
    source: str  # "shipped" or "toy (...)"
    dynamic: bool = False  # dynamic int8 (activations quantized per call)


def static_int8(fp32: Path, out: Path, calibration: np.ndarray) -> None:
    """Static int8 in quantize.ptq's u8s7 scheme (QOperator/QGemm, per-tensor, MinMax, int8 weights in [-64, 64], u8
    activations), all layers."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.batches = iter([{"obs": calibration[i : i + 256]} for i in range(0, len(calibration), 256)])

        def get_next(self):
            return next(self.batches, None)

    quantize_static(
        str(fp32), str(out), Reader(), quant_format=QuantFormat.QOperator, per_channel=False,
        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, reduce_range=True,
    )  # fmt: skip


def dynamic_int8(fp32: Path, out: Path) -> None:
    """Dynamic int8 (weights int8, activations quantized per call): the kernels that go wrong under qemu's `max` CPU."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(str(fp32), str(out), weight_type=QuantType.QInt8, reduce_range=True)


def toy_model() -> bytes:
    from firmware_bridge.toy_policy import build_mlp_policy

    return build_mlp_policy(1032, 256, n_actions=25, seed=3)


def run_all(client, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """Every observation through client.act, one request each: (actions, logits or None if the
    policy exports none, round trips ns)."""
    actions, logits, rtt = [], [], []
    for row in obs:
        r = client.act(row)
        actions.append(r.action)
        logits.append(r.logits)
        rtt.append(r.rtt_ns)
    has_logits = all(x is not None for x in logits)
    return np.asarray(actions), (np.stack(logits) if has_logits else None), np.asarray(rtt)
