"""The broadcaster: turns each weight version of the learner into the actors' format once (an int8 or fp32
ONNX model, ``actorq.weights``), for Ray to publish as one object every actor reads.

Stale activation scales (the int8 template keeps the activation ranges of its calibration) are checked, not
trusted: after each version the broadcaster runs the int8 model beside the version's fp32 weights (numpy) on
recent actor observations. When the actions agree on fewer than ``recalibrate_below`` of them (discrete:
same argmax; continuous: tanh actions within ``ACTION_TOLERANCE``), the next version is built from a new
template calibrated on those observations and that version's weights (seconds, not milliseconds; recorded).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np

from actorq.errors import ActorQError
from actorq.nets import Weights, load_weights, mlp_actor
from actorq.versions import RayProcess
from actorq.weights import Fp32Template, Int8Template, ModelVersion, Precision, default_int8_options
from quantize.options import StaticInt8Options

ACTION_TOLERANCE = 0.05  # continuous actions in [-1, 1]: int8 "agrees" within this of fp32
RECENT_OBS = 1024  # observations kept for checks and re-calibration


@dataclass(frozen=True)
class VersionRecord:
    """What the broadcaster did for one version."""

    version: int
    precision: str
    build_s: float  # weights into the template + serialize (requantize_s + serialize_s)
    template_s: float  # building a new template (first version, re-calibration), else 0
    recalibrated: bool
    onnx_bytes: int
    agreement: float | None  # int8 vs fp32 actions on recent observations (None for fp32 or unchecked)
    check_s: float


def forward_fp32(weights: Weights, obs: np.ndarray) -> np.ndarray:
    """The MLP's outputs (logits / pre-tanh actions) for float32 observations, in numpy from the weights."""
    n_body = len([k for k in weights if k.startswith("body.") and k.endswith(".weight")])
    x = np.asarray(obs, dtype=np.float32)
    for i in range(n_body):
        x = np.maximum(x @ np.asarray(weights[f"body.{2 * i}.weight"]).T + weights[f"body.{2 * i}.bias"], 0.0)
    return x @ np.asarray(weights["head.weight"]).T + weights["head.bias"]


class Broadcaster(RayProcess):
    """Plain class; ``actorq.cluster`` runs it as a Ray actor. One per run; builds every version."""

    def __init__(
        self,
        hidden: tuple[int, ...],
        obs_dim: int,
        n_outputs: int,
        discrete: bool,
        precision: Precision,
        calibration_obs: np.ndarray,
        split_input: bool = True,
        recalibrate_below: float = 0.9,
        check_obs: int = 128,
    ):
        if precision not in ("fp32", "int8"):
            raise ActorQError(f"precision must be fp32 or int8, got {precision!r}")
        if not 0.0 <= recalibrate_below <= 1.0:
            raise ActorQError(f"recalibrate_below must be in [0, 1], got {recalibrate_below}")
        self.precision: Precision = precision
        self.discrete = discrete
        self.net = mlp_actor(hidden, obs_dim, n_outputs)
        self.options: StaticInt8Options = replace(default_int8_options(), split_input=split_input)
        self.recent = np.ascontiguousarray(calibration_obs, dtype=np.float32)[-RECENT_OBS:]
        self.recalibrate_below = recalibrate_below
        self.check_obs = check_obs
        self.template: Fp32Template | Int8Template | None = None
        self._recalibrate = False
        self.records: list[VersionRecord] = []

    def observe(self, obs: np.ndarray) -> None:
        """Recent actor observations (for the checks and any re-calibration)."""
        obs = np.asarray(obs, dtype=np.float32)
        if obs.ndim == 2 and obs.shape[1] == self.recent.shape[1] and len(obs):
            self.recent = np.concatenate([self.recent, obs])[-RECENT_OBS:]

    def publish(self, weights: Weights, version: int) -> ModelVersion:
        """The weight version in the actors' format; a new template first if none yet or re-calibration is due."""
        template_s = 0.0
        recalibrated = False
        if self.template is None or self._recalibrate:
            recalibrated = self.template is not None
            load_weights(self.net, weights)
            t0 = time.perf_counter()
            if self.precision == "int8":
                self.template = Int8Template(self.net, self.recent, self.options, version=version)
            else:
                self.template = Fp32Template(self.net, version=version)
            template_s = time.perf_counter() - t0
            self._recalibrate = False
        model = self.template.build(weights, version)
        agreement, check_s = self._check(model, weights) if self.precision == "int8" else (None, 0.0)
        self.records.append(
            VersionRecord(
                version,
                self.precision,
                model.timing.requantize_s + model.timing.serialize_s,
                template_s,
                recalibrated,
                model.size_bytes,
                agreement,
                check_s,
            )
        )
        return model

    def _check(self, model: ModelVersion, weights: Weights) -> tuple[float, float]:
        # deferred: onnxruntime (via quantize.runtime): ~0.2 s to import, paid only where used
        from quantize.runtime import session

        t0 = time.perf_counter()
        obs = self.recent[-self.check_obs :]
        int8 = session(model.onnx, threads=1).run(["logits"], {"obs": obs})[0]
        fp32 = forward_fp32(weights, obs)
        if self.discrete:
            agreement = float(np.mean(np.argmax(int8, axis=1) == np.argmax(fp32, axis=1)))
        else:
            diff = np.abs(np.tanh(int8.astype(np.float64)) - np.tanh(fp32.astype(np.float64))).max(axis=1)
            agreement = float(np.mean(diff <= ACTION_TOLERANCE))
        if agreement < self.recalibrate_below:
            self._recalibrate = True
        return agreement, time.perf_counter() - t0

    def history(self) -> list[VersionRecord]:
        return list(self.records)
