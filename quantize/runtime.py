"""onnxruntime sessions for policy files: one thread, sequential, as on the device."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnxruntime as ort

ort.set_default_logger_severity(3)  # the quantizer's calibration sessions otherwise warn on stderr


def session(model: bytes | str, threads: int = 1) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.log_severity_level = 3
    return ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])


def run_logits(sess: ort.InferenceSession, obs: np.ndarray, batch: int = 1024) -> tuple[np.ndarray, np.ndarray]:
    """(action, logits) for many observations, in batches."""
    actions, logits = [], []
    for i in range(0, len(obs), batch):
        a, lg = sess.run(["action", "logits"], {"obs": np.ascontiguousarray(obs[i : i + batch], dtype=np.float32)})
        actions.append(a)
        logits.append(lg)
    return np.concatenate(actions), np.concatenate(logits)


def policy_fn(sess: ort.InferenceSession) -> Callable[[np.ndarray], np.ndarray]:
    """A batch policy for nav_env.rollout.run_episodes (the model's own argmax action)."""

    def act(obs: np.ndarray) -> np.ndarray:
        return sess.run(["action"], {"obs": np.asarray(obs, dtype=np.float32)})[0]

    return act
