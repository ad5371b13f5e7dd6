"""Load an ONNX policy into onnxruntime from memory and run it.

The policy contract (shared with policies/ and quantize/): one float32 input
[batch, obs_dim]; outputs ``action`` (int64 [batch] for discrete, float32
[batch, act_dim] for box) and optionally ``logits`` (float32 [batch, n]); a
model with no ``action`` output but a single float output is read as logits and
argmax'd. metadata_props ``airq.obs_dim``, ``airq.action_space``
("discrete:25" / "box:4") and ``airq.action_table`` (JSON [[vx, vy, vz,
yaw_rate], ...]) describe it.

Everything is checked at load time (including one warm-up inference) so that a
policy that loads is one that acts; a failure raises PolicyLoadError and the
caller keeps its previous policy.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnxruntime as ort

from firmware_bridge.device import process_memory_bytes
from firmware_bridge.model_check import UnsafeModel, check_self_contained
from firmware_bridge.protocol import SETPOINT_DIM, ErrorCode, ProtocolError, parse_action_space, sha256_hex

ACTION_OUTPUT = "action"
LOGITS_OUTPUT = "logits"
_FLOAT = "tensor(float)"
_INTS = ("tensor(int64)", "tensor(int32)")


class PolicyLoadError(ProtocolError):
    """The uploaded bytes are not a usable policy; ``code`` is BAD_POLICY, HASH_MISMATCH or TOO_LARGE."""


def _bad(message: str) -> PolicyLoadError:
    return PolicyLoadError(ErrorCode.BAD_POLICY, message)


def _first_line(exc: BaseException, limit: int = 300) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:limit]


def session_options(threads: int) -> ort.SessionOptions:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1  # an MLP is a chain of ops: nothing to run in parallel
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = 3  # errors only: warnings would land in the journal at every load
    return options


@dataclass
class Policy:
    session: ort.InferenceSession
    sha256: str
    size_bytes: int
    name: str
    obs_dim: int
    input_name: str
    output_names: list[str]
    action_kind: str  # "discrete" | "box"
    action_size: int  # n actions (discrete) or act_dim (box)
    fetch: list[str]  # outputs run per act: [action-or-logits, (logits)]
    argmax_output: bool  # no 'action' output: fetch[0] is logits, action = argmax
    has_logits: bool
    action_table: list[list[float]] | None
    metadata: dict[str, str]
    load_ns: int = 0
    rss_delta_bytes: int | None = None
    loaded_at_ns: int = field(default_factory=time.monotonic_ns)

    @property
    def action_space(self) -> str:
        return f"{self.action_kind}:{self.action_size}"

    @property
    def setpoint_mapping(self) -> str:
        """How an action becomes a flight-controller setpoint (or 'none': actuator not driven)."""
        if self.action_kind == "discrete":
            return "action_table" if self.action_table is not None else "none"
        return "box" if self.action_size == SETPOINT_DIM else "none"

    def act(self, obs: np.ndarray) -> tuple[int | list[float], list[float] | None, bytes | None]:
        """One inference on a (1, obs_dim) float32 array -> (action, setpoint, logits bytes)."""
        outputs = self.session.run(self.fetch, {self.input_name: obs})
        logits = outputs[-1].tobytes() if self.has_logits else None
        if self.action_kind == "discrete":
            first = outputs[0]
            action = int(first.argmax()) if self.argmax_output else int(first.reshape(-1)[0])
            if not 0 <= action < self.action_size:
                raise ProtocolError(
                    ErrorCode.BAD_POLICY, f"policy produced action {action} outside 0..{self.action_size - 1}"
                )
            setpoint = self.action_table[action] if self.action_table is not None else None
            return action, setpoint, logits
        values = outputs[0].reshape(-1)
        if not math.isfinite(values.sum(dtype=np.float64)):
            raise ProtocolError(ErrorCode.BAD_POLICY, "policy produced a NaN/Inf action")
        action_list = values.tolist()
        return action_list, (action_list if self.action_size == SETPOINT_DIM else None), logits

    def summary(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "sha256": self.sha256,
            "size_bytes": self.size_bytes,
            "obs_dim": self.obs_dim,
            "action_space": self.action_space,
            "action_kind": self.action_kind,
            "action_size": self.action_size,
            "input_name": self.input_name,
            "output_names": self.output_names,
            "setpoint_mapping": self.setpoint_mapping,
            "load_time_ns": self.load_ns,
            "rss_delta_bytes": self.rss_delta_bytes,
            "metadata": self.metadata,
        }


def load_policy(
    onnx_bytes: bytes,
    *,
    expected_sha256: str | None,
    max_bytes: int,
    threads: int = 1,
    name: str = "",
) -> Policy:
    """Verify, load and warm up a policy from bytes (never from a path a client chose)."""
    if len(onnx_bytes) > max_bytes:
        raise PolicyLoadError(ErrorCode.TOO_LARGE, f"policy is {len(onnx_bytes)} bytes, limit is {max_bytes}")
    digest = sha256_hex(onnx_bytes)
    if expected_sha256 is not None and digest != expected_sha256:
        raise PolicyLoadError(
            ErrorCode.HASH_MISMATCH,
            # !r: the declared value is client text and must not put a newline into a reply or the journal
            f"sha256 of the {len(onnx_bytes)} received bytes is {digest}, request says {expected_sha256[:64]!r}",
        )
    try:
        # Before onnxruntime sees the bytes: it would open a file an uploaded model names (model_check).
        check_self_contained(onnx_bytes)
    except UnsafeModel as exc:
        raise _bad(str(exc)) from None
    return _load(onnx_bytes, digest, len(onnx_bytes), threads, name)


def load_policy_file(path: str, *, threads: int = 1, name: str = "") -> Policy:
    """Load the operator's own policy file (``serve --policy``). onnxruntime reads the path itself, so
    the process never holds the file's bytes beside the session: for a 600 MB model that is the
    difference between fitting a Pi's RAM after loading or not (docs/memory.md)."""
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
            size += len(chunk)
    return _load(path, digest.hexdigest(), size, threads, name)


def _load(source: bytes | str, digest: str, size: int, threads: int, name: str) -> Policy:
    if not size:
        raise _bad("policy is empty (0 bytes)")
    start_ns = time.monotonic_ns()
    rss_before, _ = process_memory_bytes()
    try:
        session = ort.InferenceSession(source, session_options(threads), providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises Fail/InvalidProtobuf/InvalidGraph/RuntimeError...
        raise _bad(f"onnxruntime cannot load the model: {_first_line(exc)}") from None

    metadata = dict(session.get_modelmeta().custom_metadata_map)
    policy = _describe(session, metadata, digest, size, name or metadata.get("airq.preset", ""))
    _warm_up(policy)
    rss_after, _ = process_memory_bytes()
    policy.load_ns = time.monotonic_ns() - start_ns
    if rss_before is not None and rss_after is not None:
        policy.rss_delta_bytes = rss_after - rss_before
    return policy


def _describe(
    session: ort.InferenceSession, metadata: dict[str, str], digest: str, model_bytes: int, name: str
) -> Policy:
    inputs = session.get_inputs()
    if len(inputs) != 1:
        raise _bad(f"policy must have exactly 1 input (obs), has {len(inputs)}: {[i.name for i in inputs][:8]}")
    obs_input = inputs[0]
    if obs_input.type != _FLOAT:
        raise _bad(f"input {obs_input.name!r} must be float32, is {obs_input.type}")
    if len(obs_input.shape) != 2:
        raise _bad(f"input {obs_input.name!r} must be 2-D [batch, obs_dim], has shape {obs_input.shape}")
    obs_dim = _resolve_obs_dim(obs_input.shape[1], metadata.get("airq.obs_dim"))

    outputs = {o.name: o for o in session.get_outputs()}
    output_names = list(outputs)
    logits = outputs.get(LOGITS_OUTPUT)
    has_logits = logits is not None and logits.type == _FLOAT
    if ACTION_OUTPUT in outputs:
        action_output = outputs[ACTION_OUTPUT]
        argmax_output = False
        if action_output.type in _INTS:
            kind = "discrete"
        elif action_output.type == _FLOAT:
            kind = "box"
        else:
            raise _bad(f"output 'action' must be int64 (discrete) or float32 (box), is {action_output.type}")
        has_logits = has_logits and kind == "discrete"  # logits only mean something for a discrete policy
        fetch = [ACTION_OUTPUT] + ([LOGITS_OUTPUT] if has_logits else [])
    else:
        float_outputs = [o for o in outputs.values() if o.type == _FLOAT]
        if len(outputs) != 1 or len(float_outputs) != 1:
            raise _bad(f"policy has no 'action' output and not a single float output (outputs: {output_names[:8]})")
        kind, argmax_output, has_logits = "discrete", True, True
        # The single float output is the logits, whatever its name (e.g. q_values).
        action_output = logits = float_outputs[0]
        fetch = [action_output.name]

    action_size = _resolve_action_size(
        kind, metadata.get("airq.action_space"), action_output, logits if has_logits else None
    )
    table = _parse_action_table(metadata.get("airq.action_table"), action_size) if kind == "discrete" else None
    return Policy(
        session=session,
        sha256=digest,
        size_bytes=model_bytes,
        name=name,
        obs_dim=obs_dim,
        input_name=obs_input.name,
        output_names=output_names,
        action_kind=kind,
        action_size=action_size,
        fetch=fetch,
        argmax_output=argmax_output,
        has_logits=has_logits,
        action_table=table,
        metadata=metadata,
    )


def _static_dim(dim: Any) -> int | None:
    """onnxruntime reports symbolic dims as strings ('batch') and unknown ones as None."""
    return dim if isinstance(dim, int) and dim > 0 else None


def _resolve_obs_dim(shape_dim: Any, meta_value: str | None) -> int:
    from_shape = _static_dim(shape_dim)
    from_meta = None
    if meta_value is not None:
        try:
            from_meta = int(meta_value)
        except ValueError:
            raise _bad(f"metadata airq.obs_dim={meta_value[:32]!r} is not an integer") from None
        if from_meta <= 0:
            raise _bad(f"metadata airq.obs_dim={from_meta} must be positive")
    if from_shape is not None and from_meta is not None and from_shape != from_meta:
        raise _bad(f"input width {from_shape} disagrees with metadata airq.obs_dim={from_meta}")
    obs_dim = from_shape or from_meta
    if obs_dim is None:
        raise _bad("obs_dim unknown: input width is dynamic and metadata airq.obs_dim is missing")
    return obs_dim


def _resolve_action_size(kind: str, meta_space: str | None, action_output: Any, logits_output: Any) -> int:
    """Action count/dim from metadata, cross-checked against static output shapes."""
    width_source = logits_output if kind == "discrete" else action_output
    from_shape = (
        _static_dim(width_source.shape[-1]) if width_source is not None and len(width_source.shape) == 2 else None
    )
    from_meta = None
    if meta_space is not None:
        try:
            meta_kind, from_meta = parse_action_space(meta_space)
        except ValueError as exc:
            raise _bad(f"metadata airq.action_space: {exc}") from None
        if meta_kind != kind:
            raise _bad(f"metadata airq.action_space={meta_space!r} but the outputs describe a {kind} policy")
    if from_shape is not None and from_meta is not None and from_shape != from_meta:
        raise _bad(f"output width {from_shape} disagrees with metadata airq.action_space={meta_space!r}")
    size = from_meta or from_shape
    if size is None:
        raise _bad("action space unknown: set metadata airq.action_space ('discrete:N' or 'box:N')")
    return size


def _parse_action_table(text: str | None, n_actions: int) -> list[list[float]] | None:
    if text is None:
        return None
    try:
        table = json.loads(text)
    except ValueError:
        raise _bad("metadata airq.action_table is not valid JSON") from None
    if not isinstance(table, list) or len(table) != n_actions:
        raise _bad(f"metadata airq.action_table must be a list of {n_actions} setpoints")
    rows: list[list[float]] = []
    for index, row in enumerate(table):
        if (
            not isinstance(row, list)
            or len(row) != SETPOINT_DIM
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in row)
        ):
            raise _bad(
                f"metadata airq.action_table[{index}] must be {SETPOINT_DIM} finite numbers [vx, vy, vz, yaw_rate]"
            )
        rows.append([float(v) for v in row])
    return rows


def _warm_up(policy: Policy) -> None:
    """Run once on zeros: pays onnxruntime's first-run cost now and proves the outputs fit the contract."""
    try:
        outputs = policy.session.run(policy.fetch, {policy.input_name: np.zeros((1, policy.obs_dim), np.float32)})
    except Exception as exc:
        raise _bad(f"warm-up inference failed: {_first_line(exc)}") from None
    first = outputs[0]
    if policy.action_kind == "box" and first.size != policy.action_size:
        raise _bad(f"output 'action' has {first.size} values per observation, action space says {policy.action_size}")
    if policy.action_kind == "discrete" and not policy.argmax_output and first.size != 1:
        raise _bad(f"output 'action' must hold one index per observation, has {first.size}")
    if policy.has_logits and outputs[-1].size != policy.action_size:
        raise _bad(f"logits have {outputs[-1].size} values per observation, action space says {policy.action_size}")
