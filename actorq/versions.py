"""What crosses process boundaries in ActorQ, kept free of torch so the actors never import it: a weight
version in the actors' format (``ModelVersion``, built by ``actorq.weights``, loaded by ``actorq.holder``),
and a rollout's transitions (``Transitions``, from ``actorq.rollout`` to ``actorq.learner``), and what the
driver asks of every process it runs (``RayProcess``)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

VERSION_KEY = "airq.actorq.weight_version"  # the version number in the ONNX file's metadata
Precision = Literal["fp32", "int8"]
PRECISIONS: tuple[Precision, ...] = ("fp32", "int8")


@dataclass(frozen=True)
class BuildTiming:
    """Seconds spent turning one weight version into ONNX bytes (the session build is the actor's:
    ``actorq.holder.Prepared``)."""

    requantize_s: float  # int8: re-quantizing the weights into the template (numpy); fp32: copying them in
    serialize_s: float  # the template to ONNX bytes


@dataclass(frozen=True)
class ModelVersion:
    """One weight version in the actors' format: what a broadcaster publishes."""

    version: int
    precision: Precision
    onnx: bytes = field(repr=False)
    timing: BuildTiming

    @property
    def size_bytes(self) -> int:
        return len(self.onnx)


@dataclass(frozen=True)
class Transitions:
    """One rollout's transitions, in order, tagged with the weight version that chose each action."""

    obs: np.ndarray  # float32 [T, obs_dim]
    next_obs: np.ndarray  # float32 [T, obs_dim]: the final observation at an episode's end, not the reset one
    action: np.ndarray  # int64 [T] (discrete) or float32 [T, act_dim] in [-1, 1]
    reward: np.ndarray  # float32 [T]
    terminated: np.ndarray  # bool [T]
    truncated: np.ndarray  # bool [T]
    version: np.ndarray  # int64 [T]

    def __len__(self) -> int:
        return len(self.reward)


class RayProcess:
    """What the driver asks of each part run as a Ray actor (learner, broadcaster, rollout worker)."""

    def pid(self) -> int:
        return os.getpid()

    def node_id(self) -> str:
        """The Ray node this runs on (where the run's report says each part ran)."""
        # deferred: ray: optional extra, seconds to import
        import ray

        return ray.get_runtime_context().get_node_id()

    def cpu_seconds(self) -> float:
        """CPU time of this process so far (the energy estimate's input)."""
        return time.process_time()
