"""Load any policy for evaluation: a training run directory (SB3 checkpoint) or an ONNX file of any
precision (fp32 from policies.export, int8 from quantize). Either way the result is a batch
``policy_fn(obs (n, obs_dim) float32) -> actions (n,)`` with deterministic (argmax) actions."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from nav_env.baselines import BASELINES
from policies.errors import UserError


@dataclass
class LoadedPolicy:
    name: str
    source: str
    kind: str  # "run", "onnx" or "baseline"
    obs_dim: int
    act: Callable[[np.ndarray], np.ndarray]
    metadata: dict[str, str] = field(default_factory=dict)


BASELINE_PREFIX = "baseline:"


def load_policy(spec: str, checkpoint: str = "best", cfg=None) -> LoadedPolicy:
    """``spec``: a run directory, an ONNX file, or ``baseline:heuristic`` / ``baseline:random``
    (nav_env's scripted baselines, for paired comparisons; needs the level config ``cfg``)."""
    if spec.startswith(BASELINE_PREFIX):
        return _load_baseline(spec[len(BASELINE_PREFIX) :], cfg)
    path = Path(spec)
    if path.is_dir():
        return _load_run(path, checkpoint)
    if path.is_file():
        return load_onnx(path)
    raise UserError(f"policy not found: {spec} (expected a run directory or an .onnx file)")


def _load_baseline(name: str, cfg) -> LoadedPolicy:
    if name not in BASELINES:
        raise UserError(
            f"unknown baseline {name!r} (known: {', '.join(BASELINE_PREFIX + b for b in sorted(BASELINES))})"
        )
    return LoadedPolicy(
        name, BASELINE_PREFIX + name, "baseline", cfg.obs_dim, BASELINES[name](cfg), {"airq.precision": "-"}
    )


def _load_run(path: Path, checkpoint: str) -> LoadedPolicy:
    # deferred: torch (via policies.actor): seconds to import
    from policies.actor import actor_from_model, load_run, torch_policy_fn

    cfg, model, ckpt = load_run(path, checkpoint)
    actor = actor_from_model(model)
    meta = {
        "airq.preset": cfg.policy,
        "airq.algorithm": cfg.algo,
        "airq.level": cfg.level,
        "airq.precision": "fp32",
        "airq.env_config": json.dumps(cfg.env_config(False).to_dict()),  # what it sees, as an export records it
        "checkpoint": str(ckpt),
    }
    return LoadedPolicy(path.name, str(path), "run", actor.obs_dim, torch_policy_fn(actor), meta)


def load_onnx(path: str | Path, threads: int = 1) -> LoadedPolicy:
    # deferred: onnxruntime: ~0.2 s to import, paid only where used
    import onnxruntime as ort

    path = Path(path)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3  # onnxruntime's own warnings would break the one-line error rule
    try:
        sess = ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime raises its own exception types for unreadable models
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(f"{path}: not a loadable ONNX model ({first[:200]})") from None
    inputs = sess.get_inputs()
    if len(inputs) != 1 or len(inputs[0].shape) != 2:
        raise UserError(f"{path}: expected one input [batch, obs_dim], got {[(i.name, i.shape) for i in inputs]}")
    in_name, obs_dim = inputs[0].name, inputs[0].shape[1]
    meta = dict(sess.get_modelmeta().custom_metadata_map)
    if not isinstance(obs_dim, int):
        obs_dim = int(meta.get("airq.obs_dim", -1))
    outputs = [o.name for o in sess.get_outputs()]
    if "action" in outputs:

        def act(obs: np.ndarray) -> np.ndarray:
            return sess.run(["action"], {in_name: np.ascontiguousarray(obs, dtype=np.float32)})[0].astype(np.int64)
    else:  # a graph with only logits / Q-values: argmax here

        def act(obs: np.ndarray) -> np.ndarray:
            out = sess.run([outputs[0]], {in_name: np.ascontiguousarray(obs, dtype=np.float32)})[0]
            return np.argmax(out, axis=1).astype(np.int64)

    return LoadedPolicy(path.name, str(path), "onnx", obs_dim, act, meta)


def check_obs_dim(policy: LoadedPolicy, env_obs_dim: int, level: str) -> None:
    if policy.obs_dim != env_obs_dim:
        raise UserError(
            f"{policy.source}: policy takes observations of size {policy.obs_dim}, level {level!r} gives {env_obs_dim}"
        )
