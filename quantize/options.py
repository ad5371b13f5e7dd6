"""The options of static int8 quantization, apart from the quantizer: the CLI reads its defaults
from here while parsing, before onnx and onnxruntime are imported."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Int8Scheme:
    """Integer types of a static int8 model, as onnxruntime's quantize_static takes them."""

    activation_type: str  # QuantType name
    weight_type: str
    reduce_range: bool  # weights in [-64, 64] instead of [-127, 127]
    description: str

    @property
    def weight_max(self) -> int:
        return 64 if self.reduce_range else 127


# Measured on Policies I-III (docs/quantize.md, "Int8 that computes the same on every CPU"). u8s7: uint8
# activations x int8 weights in [-64, 64]; every pair of products fits the 16-bit sums of the AVX2 U8S8
# kernel (2 x 255 x 64 = 32,640), so the file computes the same integers on AVX2, VNNI and Arm. s8s8 keeps
# 8-bit weights and is exact everywhere too (onnxruntime's S8S8 kernels widen before adding), computing u8s8's
# integers, but without a fast x86 kernel (5x slower than u8s7 at batch 1 on Policy I).
INT8_SCHEMES = {
    "u8s7": Int8Scheme("QUInt8", "QInt8", True, "activations uint8, weights int8 in [-64, 64] (7-bit range)"),
    "u8s8": Int8Scheme("QUInt8", "QInt8", False, "activations uint8, weights int8 in [-127, 127]"),
    "u8u8": Int8Scheme("QUInt8", "QUInt8", False, "activations uint8, weights uint8 with zero point"),
    "s8s8": Int8Scheme("QInt8", "QInt8", False, "activations int8, weights int8 in [-127, 127] (8-bit range)"),
}


@dataclass
class StaticInt8Options:
    quant_format: str = "qoperator"  # "qoperator" or "qdq"
    per_channel: bool = True  # with u8s7's 7-bit weights, per-tensor lost 1-2.4 points of agreement (docs/quantize.md)
    keep_last_layer_fp32: bool = True
    calibrate_method: str = "minmax"  # "minmax" or "percentile"
    split_input: bool = True  # separate scales for the depth and state parts of the first layer
    # the two split first-layer QGemms output float into the Add (quantize.split_input); None: where it applies
    float_split_sum: bool | None = None
    scheme: str = "u8s7"  # INT8_SCHEMES: activation/weight integer types (exactness across CPUs: docs/quantize.md)
    extra: dict = field(default_factory=dict)
    # op types quantized besides Gemm/MatMul/Relu: ("Conv",) for the CNN policies of quarl (MinAtar, Atari)
    extra_op_types: tuple[str, ...] = ()

    @property
    def use_float_split_sum(self) -> bool:
        if self.float_split_sum is None:
            return self.split_input and self.quant_format == "qoperator"
        return self.float_split_sum
