"""Does this host's onnxruntime compute int8 matrix products exactly? A probe run once per process.

On x86 CPUs with AVX2 but without VNNI (AVX-512 VNNI or AVX-VNNI), onnxruntime's U8S8 integer GEMM
(uint8 activations x int8 weights, what a QGemm of quantize.ptq computes) multiplies with VPMADDUBSW,
which adds each pair of neighbouring products into a 16-bit sum that saturates at +-32,767. With
activations up to 255 and weights up to +-127 a pair can reach 64,770: the result is then wrong, and
wrong differently from a VNNI host or a Raspberry Pi's Arm kernels, which are exact. Weights kept
within [-64, 64] (the ``u8s7`` scheme, onnxruntime's ``reduce_range``) cannot saturate:
2 x 255 x 64 = 32,640.

Signed int8 activations (the ``s8s8`` scheme: int8 activations x int8 weights in [-127, 127], the
8-bit weights of the QuaRL paper's int8) take onnxruntime's S8S8 kernels, which widen before they add:
exact on AVX2 too, but without a fast x86 kernel (docs/quantize.md). They compute the same integers as
u8s8 (the same 256-level activation grid, shifted by 128), so s8s8 is u8s8 made exact everywhere.

The probe is two QGemms (com.microsoft) of K = 64 by int8 weight columns 127, -127, 64 and -64, each
run in a batch of 1 and of 4 rows (onnxruntime may use other kernels for a single row): a row of uint8
255s (U8S8) and rows of int8 -128s and 127s (S8S8). An exact kernel gives a x 64 x w per column. On a
saturating AVX2 host the U8S8 model's first two columns come out at 1,048,544 (= 32 x 32,767) instead
of 2,072,640.

The models are embedded as bytes because the device side must not need the onnx package; the test
suite rebuilds them with onnx.helper and checks they are the same models.
"""

from __future__ import annotations

import base64
import functools
import platform
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import numpy as np

from firmware_bridge.procfs import read_text

if TYPE_CHECKING:
    import onnxruntime as ort

PROBE_K = 64
PROBE_COLUMNS = (127, -127, 64, -64)  # full-range int8 weights, then the u8s7 limits
PROBE_ACTIVATION = 255
PROBE_SIGNED_ACTIVATIONS = (-128, 127)  # the S8S8 model's rows: both ends of int8
_PROBE_MODEL_B64 = (
    "CAgSBGFpcnE68gMKVAoBYQoHYV9zY2FsZQoMYV96ZXJvX3BvaW50CgFiCgdiX3NjYWxlCgxiX3plcm9fcG9pbnQSAXkaBXByb2Jl"
    "IgVRR2VtbToNY29tLm1pY3Jvc29mdBIPYWlycV9pbnQ4X3Byb2JlKowCCEAIBBADQgFiSoACf4FAwH+BQMB/gUDAf4FAwH+BQMB/"
    "gUDAf4FAwH+BQMB/gUDAf4FAwH+BQMB/gUDAf4FAwH+BQMB/gUDAf4FAwH+BQMB/gUDAf4FAwH+BQMB/gUDAf4FAwH+BQMB/gUDA"
    "f4FAwH+BQMB/gUDAf4FAwH+BQMB/gUDAf4FAwH+BQMB/gUDAf4FAwH+BQMB/gUDAf4FAwH+BQMB/gUDAf4FAwH+BQMB/gUDAf4FA"
    "wH+BQMB/gUDAf4FAwH+BQMB/gUDAf4FAwH+BQMB/gUDAf4FAwH+BQMB/gUDAf4FAwH+BQMB/gUDAf4FAwH+BQMB/gUDAf4FAwH+B"
    "QMB/gUDAf4FAwCoREAFCB2Ffc2NhbGVKBAAAgD8qExACQgxhX3plcm9fcG9pbnRKAQAqERABQgdiX3NjYWxlSgQAAIA/KhMQA0IM"
    "Yl96ZXJvX3BvaW50SgEAWhQKAWESDwoNCAISCQoDEgFuCgIIQGIUCgF5Eg8KDQgBEgkKAxIBbgoCCARCBAoAEBFCEQoNY29tLm1p"
    "Y3Jvc29mdBAB"
)
_PROBE_S8S8_MODEL_B64 = (
    "CAgSBGFpcnE68gMKVAoBYQoHYV9zY2FsZQoMYV96ZXJvX3BvaW50CgFiCgdiX3NjYWxlCgxiX3plcm9fcG9pbnQSAXkaBXByb2Jl"
    "IgVRR2VtbToNY29tLm1pY3Jvc29mdBIPYWlycV9pbnQ4X3Byb2JlKowCCEAIBBADQgFiSoACf4FAwH+BQMB/gUDAf4FAwH+BQMB/"
    "gUDAf4FAwH+BQMB/gUDAf4FAwH+BQMB/gUDAf4FAwH+BQMB/gUDAf4FAwH+BQMB/gUDAf4FAwH+BQMB/gUDAf4FAwH+BQMB/gUDA"
    "f4FAwH+BQMB/gUDAf4FAwH+BQMB/gUDAf4FAwH+BQMB/gUDAf4FAwH+BQMB/gUDAf4FAwH+BQMB/gUDAf4FAwH+BQMB/gUDAf4FA"
    "wH+BQMB/gUDAf4FAwH+BQMB/gUDAf4FAwH+BQMB/gUDAf4FAwH+BQMB/gUDAf4FAwH+BQMB/gUDAf4FAwH+BQMB/gUDAf4FAwH+B"
    "QMB/gUDAf4FAwCoREAFCB2Ffc2NhbGVKBAAAgD8qExADQgxhX3plcm9fcG9pbnRKAQAqERABQgdiX3NjYWxlSgQAAIA/KhMQA0IM"
    "Yl96ZXJvX3BvaW50SgEAWhQKAWESDwoNCAMSCQoDEgFuCgIIQGIUCgF5Eg8KDQgBEgkKAxIBbgoCCARCBAoAEBFCEQoNY29tLm1p"
    "Y3Jvc29mdBAB"
)


def probe_model_bytes(signed: bool = False) -> bytes:
    """The U8S8 probe model, or with ``signed`` the S8S8 one (int8 input ``a``)."""
    return base64.b64decode(_PROBE_S8S8_MODEL_B64 if signed else _PROBE_MODEL_B64)


def cpu_int8_features() -> str:
    """The CPU's int8 dot-product instructions as /proc/cpuinfo names them ('avx512_vnni', 'avx2',
    'asimddp', ...), or the architecture when none is known."""
    flags: set[str] = set()
    for line in (read_text("/proc/cpuinfo") or "").splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            flags.update(value.split())
    known = ("avx512_vnni", "avx_vnni", "avx512bw", "avx2", "i8mm", "asimddp", "asimd")
    present = [f for f in known if f in flags]
    return " ".join(present) if present else platform.machine()


@dataclass(frozen=True)
class Int8Kernels:
    """What the probe found on this host, with the onnxruntime that ran it."""

    u8s8_exact: bool  # uint8 x full-range int8 weights (scheme u8s8) computed exactly
    u8s7_exact: bool  # uint8 x int8 weights in [-64, 64] (scheme u8s7, int8-dynamic) computed exactly
    cpu_features: str
    onnxruntime: str
    error: str | None = None  # the probe could not run (then every flag is False)
    s8s8_exact: bool = False  # int8 activations x full-range int8 weights (scheme s8s8) computed exactly

    @property
    def kind(self) -> str:
        if self.error:
            return "unknown (probe failed)"
        if self.u8s8_exact and self.s8s8_exact:
            return "exact"
        if self.u8s7_exact and self.s8s8_exact:
            return "saturating U8S8"
        return "inexact"

    def describe(self) -> str:
        if self.error:
            return f"int8 kernels unknown: the probe failed ({self.error})"
        if self.kind == "exact":
            return f"int8 kernels exact (onnxruntime {self.onnxruntime}; {self.cpu_features})"
        if self.kind == "saturating U8S8":
            return (
                f"int8 kernels saturate on uint8 x full-range int8 weights (16-bit pair sums; onnxruntime "
                f"{self.onnxruntime}; {self.cpu_features}, no VNNI); u8s7 and s8s8 are exact"
            )
        inexact = [s for s in ("u8s8", "u8s7", "s8s8") if not self.exact_for(s)]
        return f"int8 kernels inexact for {', '.join(inexact)} (onnxruntime {self.onnxruntime}; {self.cpu_features})"

    def exact_for(self, scheme: str) -> bool:
        """Whether a model quantized with ``scheme`` (quantize.options.INT8_SCHEMES) computes exact integers here.
        u8u8 (uint8 weights) is not probed: its products stay within 16 bits only in pairs of small codes, and
        onnxruntime computes it with widening kernels on every CPU measured (docs/quantize.md)."""
        exact = {"u8s8": self.u8s8_exact, "u8s7": self.u8s7_exact, "s8s8": self.s8s8_exact}
        return exact.get(scheme, True)

    def as_dict(self) -> dict:
        return asdict(self) | {"kind": self.kind}

    @classmethod
    def from_dict(cls, d: dict) -> Int8Kernels:
        """From a peer's as_dict() (a device's hello): unknown or missing fields give an unknown verdict (a
        device whose probe has no S8S8 case reports s8s8 as not exact)."""
        try:
            return cls(
                bool(d["u8s8_exact"]),
                bool(d["u8s7_exact"]),
                str(d.get("cpu_features", "")),
                str(d.get("onnxruntime", "")),
                d.get("error") if isinstance(d.get("error"), str) else None,
                d.get("s8s8_exact") is True,
            )
        except (KeyError, TypeError, AttributeError):
            return cls(False, False, "", "", "the device did not report its int8 kernels")


def _columns_exact(sess: ort.InferenceSession, rows_of: np.ndarray) -> np.ndarray:
    """Per weight column: every row value in ``rows_of``, batches of 1 and 4, gives a x K x w exactly."""
    ok = np.ones(len(PROBE_COLUMNS), dtype=bool)
    for value in rows_of:
        expected = float(value) * PROBE_K * np.asarray(PROBE_COLUMNS, dtype=np.float64)
        for rows in (1, 4):
            y = sess.run(None, {"a": np.full((rows, PROBE_K), value, dtype=rows_of.dtype)})[0]
            ok &= np.all(y.astype(np.float64) == expected, axis=0)
    return ok


def run_probe() -> Int8Kernels:
    # deferred: onnxruntime: ~0.2 s to import, paid only where used
    import onnxruntime as ort

    features = cpu_int8_features()
    try:
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.log_severity_level = 3

        def session(signed: bool) -> ort.InferenceSession:
            return ort.InferenceSession(probe_model_bytes(signed), options, providers=["CPUExecutionProvider"])

        u8 = _columns_exact(session(False), np.array([PROBE_ACTIVATION], dtype=np.uint8))
        s8 = _columns_exact(session(True), np.array(PROBE_SIGNED_ACTIVATIONS, dtype=np.int8))
    except Exception as e:  # an onnxruntime without the contrib op, a broken install: say so, never crash
        return Int8Kernels(False, False, features, ort.__version__, str(e).splitlines()[0][:160])
    return Int8Kernels(bool(u8[0] and u8[1]), bool(u8[2] and u8[3]), features, ort.__version__, None, bool(s8.all()))


@functools.cache
def int8_kernels() -> Int8Kernels:
    """The probe's result for this process (runs once: a few milliseconds)."""
    return run_probe()


def scheme_of(metadata: dict[str, str]) -> str | None:
    """The int8 scheme a policy file was quantized with, from its airq metadata; None for float files.
    Files from before schemes were recorded used full-range uint8 x int8 (u8s8)."""
    if metadata.get("airq.precision", "") not in ("int8", "int8-dynamic"):
        return None
    return metadata.get("airq.quant.scheme") or "u8s8"


def saturation_warning(metadata: dict[str, str], kernels: Int8Kernels | None = None) -> str | None:
    """A one-line warning when a file's int8 scheme is not computed exactly by this host's kernels."""
    scheme = scheme_of(metadata)
    if scheme is None:
        return None
    k = kernels or int8_kernels()
    if k.exact_for(scheme):
        return None
    return (
        f"this {scheme} int8 model is not computed exactly here ({k.describe()}): its actions can differ "
        f"from a VNNI or Arm host's; re-quantize with `python -m quantize ptq ... --scheme u8s7` (or s8s8)"
    )
