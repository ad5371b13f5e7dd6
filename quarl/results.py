"""What one trial (task x algorithm x seed) produces, as typed records; ``trial.json`` holds them.

A trial's directory (``<study>/trials/<env-slug>_<algo>_s<seed>/``) holds:

* ``model.zip``: the SB3 model as trained (fp32), ``vecnormalize.pkl`` when the zoo normalizes;
* ``fp32.onnx`` and the PTQ files ``fp16.onnx``, ``int8.onnx`` (static), ``int8-dynamic.onnx``;
* ``stages/<stage>.json``: each finished stage, written atomically, so a restarted trial resumes
  after the last one done;
* ``trial.json``: the :class:`TrialResult` once every stage is done.

Every evaluated policy plays the same seeded episodes (``EvalProtocol``), so two policies of one trial
compare episode by episode (paired).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

# Methods of a PolicyEval
ONNX = "onnx"  # an ONNX file run by onnxruntime: fp32, fp16, int8 (static), int8-dynamic
PTQ = "ptq"  # the seed's n-bit affine quantizer, post-training, torch fake-quant (weights + activations)
QAT = "qat"  # the seed's Algorithm 2: quantization delay, then training with fake quant


@dataclass(frozen=True)
class EvalProtocol:
    episodes: int
    seed: int  # episode i is reset with seed + i, for every policy of the trial
    max_steps: int | None  # a cap on episode length where the env has none (MinAtar), else None


@dataclass(frozen=True)
class PolicyEval:
    """One policy of a trial on the protocol's episodes."""

    name: str  # "fp32", "fp16", "int8", "int8-dynamic", "ptq-4bit", "qat-4bit"
    method: str  # ONNX, PTQ or QAT
    precision: str  # "fp32", "fp16", "int8", "int8-dynamic" or "<n>bit"
    bits: int  # 32, 16, n, or an int8 file's weight bits (8; 7 in the u8s7 scheme)
    returns: list[float]  # per episode, in episode order
    rounding: str = ""  # weights' rounding for PTQ/QAT ("nearest" = the seed's public code, "floor" = as printed)
    seconds: float = 0.0  # wall time of the stage that made it (training for QAT), evaluation excluded
    detail: dict[str, Any] = field(default_factory=dict)  # e.g. QAT's delay and steps, the file's size

    @property
    def mean(self) -> float:
        return float(np.mean(self.returns))

    @property
    def std(self) -> float:
        return float(np.std(self.returns))


@dataclass(frozen=True)
class Baseline:
    """The fp32 policy's quality gate: a cell whose baseline fails is not used for quantization conclusions."""

    published: float  # the RL Zoo's published score for this env and algorithm
    published_source: str
    threshold: float  # the fp32 mean return must reach this
    passed: bool

    @classmethod
    def judge(cls, published: float, source: str, threshold: float, fp32_returns: Sequence[float]) -> Baseline:
        """The gate (``quarl.published.baseline_gate``'s published score, source and threshold) applied to the fp32
        policy's episode returns: passed when their mean reaches the threshold."""
        return cls(published, source, threshold, bool(np.mean(fp32_returns) >= threshold))


@dataclass(frozen=True)
class TrainInfo:
    steps: int
    wall_s: float
    hyperparams: dict[str, Any]  # as given to SB3 (schedules shown as text)
    hyperparams_source: str  # e.g. "rl_zoo3 2.9.2 hyperparams/ppo.yml, CartPole-v1"
    budget_note: str = ""  # set when the budget differs from the zoo's (e.g. "reduced: 200k of 10M steps")


@dataclass(frozen=True)
class TrialResult:
    env_id: str
    algo: str
    seed: int
    train: TrainInfo
    protocol: EvalProtocol
    baseline: Baseline
    policies: list[PolicyEval]
    machine: dict[str, Any]  # CPU model, int8 instruction set, package versions (quarl.machine)

    def policy(self, name: str) -> PolicyEval:
        for p in self.policies:
            if p.name == name:
                return p
        raise KeyError(f"{self.env_id} {self.algo} seed {self.seed}: no policy {name!r}")

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrialResult:
        return cls(
            env_id=d["env_id"],
            algo=d["algo"],
            seed=int(d["seed"]),
            train=TrainInfo(**d["train"]),
            protocol=EvalProtocol(**d["protocol"]),
            baseline=Baseline(**d["baseline"]),
            policies=[PolicyEval(**p) for p in d["policies"]],
            machine=dict(d["machine"]),
        )

    @classmethod
    def load(cls, path: str | Path) -> TrialResult:
        return cls.from_dict(json.loads(Path(path).read_text()))


def error_percent(reference: float, value: float) -> float:
    """The seed's error %: (fp32 - quantized) / |fp32| x 100 (negative = the quantized policy scored higher)."""
    if reference == 0:
        return 0.0 if value == 0 else float("inf")
    return (reference - value) / abs(reference) * 100.0
