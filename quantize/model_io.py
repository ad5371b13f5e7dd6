"""Loading, checking and writing policy ONNX files (the contract shared with firmware_bridge).

Contract: one input ``obs`` float32 [batch, obs_dim]; outputs ``action`` int64 [batch] and ``logits``
float32 [batch, n_actions]; metadata_props ``airq.*``. Every write is atomic (temp file + rename), so
a failed quantization never leaves a partial output file behind.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from airq_cli import write_atomic
from quantize.errors import QuantizeError

# onnxruntime 1.31 and older refuse IR versions above 10 (the locked 1.32.0 takes them); the onnx package
# writes newer ones by default, so files are capped at 10 and load on older runtimes (a Pi's) too.
MAX_IR_VERSION = 10
QUANT_PREFIX = "airq.quant."


@dataclass
class PolicyModel:
    path: Path
    data: bytes
    model: onnx.ModelProto
    obs_dim: int
    n_actions: int

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @property
    def metadata(self) -> dict[str, str]:
        return metadata_of(self.model)


def metadata_of(model: onnx.ModelProto) -> dict[str, str]:
    return {p.key: p.value for p in model.metadata_props}


def set_metadata(model: onnx.ModelProto, values: dict[str, str]) -> None:
    """Replace or add metadata_props, keeping the others in their order."""
    merged = metadata_of(model) | {k: str(v) for k, v in values.items()}
    del model.metadata_props[:]
    for key, value in merged.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value


def _dim(shape: onnx.TensorShapeProto, i: int) -> int | None:
    d = shape.dim[i]
    return d.dim_value if d.HasField("dim_value") else None


def load_policy(path: str | Path, expected_obs_dim: int | None = None) -> PolicyModel:
    """Read and check a policy ONNX file; QuantizeError (one line) on anything unusable."""
    path = Path(path)
    if not path.is_file():
        raise QuantizeError(f"{path}: no such file")
    data = path.read_bytes()
    if not data:
        raise QuantizeError(f"{path}: empty file, not an ONNX model")
    try:
        model = onnx.load_from_string(data)
        onnx.checker.check_model(model)
    except Exception as e:  # DecodeError, ValidationError...: all mean "not a usable ONNX file"
        raise QuantizeError(
            f"{path}: not a valid ONNX model (truncated or another format): {type(e).__name__}"
        ) from None
    if len(model.graph.node) == 0:
        raise QuantizeError(f"{path}: not a valid ONNX model (empty graph; truncated?)")
    inputs = [i for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
    if len(inputs) != 1 or inputs[0].name != "obs":
        raise QuantizeError(f"{path}: expected one input named 'obs', found {[i.name for i in inputs]}")
    obs_type = inputs[0].type.tensor_type
    if obs_type.elem_type != onnx.TensorProto.FLOAT or len(obs_type.shape.dim) != 2:
        raise QuantizeError(f"{path}: input 'obs' must be float32 [batch, obs_dim]")
    obs_dim = _dim(obs_type.shape, 1)
    meta = metadata_of(model)
    if obs_dim is None and "airq.obs_dim" in meta:
        obs_dim = int(meta["airq.obs_dim"])
    if obs_dim is None:
        raise QuantizeError(f"{path}: input width unknown (dynamic, and no airq.obs_dim metadata)")
    if expected_obs_dim is not None and obs_dim != expected_obs_dim:
        raise QuantizeError(
            f"{path}: input size {obs_dim} does not match the env's observation size {expected_obs_dim}"
        )
    outputs = {o.name: o for o in model.graph.output}
    if "logits" not in outputs or "action" not in outputs:
        raise QuantizeError(f"{path}: expected outputs 'action' and 'logits', found {sorted(outputs)}")
    n_actions = (
        _dim(outputs["logits"].type.tensor_type.shape, 1)
        if len(outputs["logits"].type.tensor_type.shape.dim) == 2
        else None
    )
    if n_actions is None:
        space = meta.get("airq.action_space", "")
        n_actions = int(space.split(":")[1]) if space.startswith("discrete:") else 0
    return PolicyModel(path, data, model, int(obs_dim), int(n_actions))


def serialize(model: onnx.ModelProto) -> bytes:
    model.ir_version = min(model.ir_version or MAX_IR_VERSION, MAX_IR_VERSION)
    return model.SerializeToString()


def save_atomic(model: onnx.ModelProto, path: str | Path, size_key: str | None = QUANT_PREFIX + "size_bytes") -> Path:
    """Write the model atomically; with ``size_key`` the file records its own final size in metadata
    (re-serialized until the number no longer changes the length: two passes in practice)."""
    data = serialize(model)
    if size_key:
        for _ in range(4):
            set_metadata(model, {size_key: str(len(data))})
            new = serialize(model)
            if len(new) == len(data):
                data = new
                break
            data = new
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_atomic(path, data)


def weight_initializers(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def json_compact(value) -> str:
    return json.dumps(value, separators=(",", ":"))
