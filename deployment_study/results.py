"""The deployment study's results, typed: what its stages hand each other and what study.json holds.

study.json is ``airq_cli.write_json(StudyResults)``: every record here is a dataclass, written with
``dataclasses.asdict``, so the file's keys are these field names. The records the study reads back from
its folder (timing/GROUP.json, machine.json; the sessions of an earlier study.json) have ``from_dict``.
hil.run's own report (a cell's runs and comparisons, the device's hello) is kept as hil.run wrote it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airq_cli import known_fields
from deployment_study.args import StudyArgs
from deployment_study.latency_stage import LatencyResult
from deployment_study.memory_stage import MemoryResult
from deployment_study.seed import TABLE4, SeedTable
from device_emulation.roofline import Check, DevicePrediction, MachineFigures, ModelCost

STUDY_VERSION = 1


@dataclass(frozen=True)
class Model:
    path: str
    group: str  # GROUP of GROUP_PRECISION.onnx
    precision: str  # one of deployment_study.args.PRECISIONS
    # None: flies every level that has no model of its own in the group; "hard": the group's model for that level
    # (GROUP_hard_PRECISION.onnx, trained for it)
    level: str | None = None


# ---------------------------------------------------------------------------------- stages


@dataclass
class Cell:
    """One closed loop (a policy group at a level): hil.run's report, trimmed."""

    level: str
    group: str
    dir: str  # cells/LEVEL/GROUP: hil.run's report.json and run.jsonl
    date: str | None
    runs: list[dict[str, Any]]  # hil.run's report runs (fp32 first), episodes trimmed to episode/seed/outcome/steps
    comparisons: list[dict[str, Any]]  # hil.run's: each run against the fp32


@dataclass(frozen=True)
class Latency:
    """Percentiles in microseconds (firmware_bridge.bench.percentiles_us)."""

    p50: float
    p95: float
    p99: float
    mean: float
    max: float

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Latency:
        return cls(**known_fields(cls, data))


@dataclass(frozen=True)
class ModelTiming:
    precision: str
    model_bytes: int | None  # as the bridge loaded it
    device_inference_us: Latency
    round_trip_us: Latency
    acts: int
    sha256: str | None = None  # of the file the bridge loaded (None: a pass written before it was recorded)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ModelTiming:
        return cls(
            **known_fields(cls, data)
            | {
                "device_inference_us": Latency.from_dict(data["device_inference_us"]),
                "round_trip_us": Latency.from_dict(data["round_trip_us"]),
            }
        )


@dataclass(frozen=True)
class TimingPass:
    """One group's timing pass (timing/GROUP.json): its models interleaved round by round."""

    rounds: int
    acts_per_round: int
    observations: int  # recorded observations the acts cycle through
    models: dict[str, ModelTiming]  # model path -> its timing
    null_model: ModelTiming | None = None  # a one-unit model timed alongside: the runtime's fixed cost per call there

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TimingPass:
        values = known_fields(cls, data)
        values["models"] = {path: ModelTiming.from_dict(m) for path, m in data["models"].items()}
        values["null_model"] = ModelTiming.from_dict(data["null_model"]) if data.get("null_model") else None
        return cls(**values)


# ---------------------------------------------------------------------------------- tables


@dataclass(frozen=True)
class Percentiles:
    p50: float | None
    p99: float | None


@dataclass(frozen=True)
class PairedDifference:
    """Success-rate difference against the fp32 over the same episodes (nav_env.stats.paired_difference):
    Newcombe's paired 95% interval and McNemar's exact p."""

    n: int
    diff: float
    low: float
    high: float
    only_first: int  # episodes only the fp32 solved
    only_second: int  # episodes only this model solved
    mcnemar_p: float

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PairedDifference:
        return cls(**known_fields(cls, data))


@dataclass(frozen=True)
class Row:
    """One model at one level: the results table's row."""

    level: str
    group: str
    precision: str
    model: str
    episodes: int
    successes: int
    success_rate: float
    success_ci95: tuple[float, float]  # Wilson
    reported_success_rate: float  # hil.run's
    paired_vs_fp32: PairedDifference | None  # None for the fp32 itself
    loop_inference_us: Percentiles  # device inference in the closed loop
    timing_inference_us: Percentiles | None  # in the timing pass (None: not run yet)
    actuation_hz: float
    round_trip_us_p50: float
    speedup_vs_fp32: float | None  # fp32's timing-pass p50 / this one's
    loop_speedup_vs_fp32: float | None  # the same in the closed loop
    rss_bytes: int | None  # the bridge's at the end of the run
    peak_rss_bytes: int | None
    model_rss_bytes: int | None  # RSS growth on loading the model
    model_bytes: int | None
    peak_rss_ratio_vs_fp32: float | None  # fp32 / this
    model_rss_ratio_vs_fp32: float | None
    model_size_ratio_vs_fp32: float | None
    deadline_misses: int


@dataclass(frozen=True)
class PiPrediction(DevicePrediction):
    """A board's roofline prediction, shown only where the check on the measured machine agreed."""

    shown: bool = False


@dataclass(frozen=True)
class RooflineEntry:
    model: str
    group: str
    precision: str
    cost: ModelCost
    check: Check | None  # against the timing pass here (sim-only) or on the device (--host); None: no figures
    predicted_on_pi: dict[str, PiPrediction]  # board profile -> prediction


@dataclass(frozen=True)
class Target:
    """One of the issue's targets, judged on this run's measurements."""

    target: str
    value: str
    met: bool | None  # None: reported, no target


@dataclass(frozen=True)
class Session:
    """One session of the study (a resumed study has several)."""

    date: str
    wall_s: float
    host_versions: dict[str, str] | None = None  # this side's packages (None: a session before they were recorded)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Session:
        return cls(**known_fields(cls, data))


# ---------------------------------------------------------------------------------- study.json


@dataclass(kw_only=True)
class StudyResults:
    """Everything the study measured and how (study.json)."""

    study_version: int = STUDY_VERSION
    command: str  # the command that ran it
    date: str  # when its first session ran
    args: StudyArgs
    mode: str  # "sim-only" or "device HOST:PORT"
    profile: dict[str, Any] | None  # the resource profile's fields (device_emulation/profiles.toml) and "emulated"
    device: dict[str, Any] | None = None  # the device's hello as hil.run reported it
    host_versions: dict[str, str]  # this session's packages on this side
    complete: bool = False
    cells: dict[str, Cell] = field(default_factory=dict)  # "LEVEL/GROUP" -> closed loop
    timing: dict[str, TimingPass] = field(default_factory=dict)  # group -> timing pass
    machine: MachineFigures | None = None  # this machine's roofline figures (sim-only)
    rows: list[Row] = field(default_factory=list)
    roofline: list[RooflineEntry] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    seed: SeedTable = TABLE4
    memory: MemoryResult | None = None  # the memory stage (None: off)
    latency: LatencyResult | None = None  # the latency stage (None: off)
    sessions: list[Session] = field(default_factory=list)
    rendered: str | None = None  # when study.md was last written
    wall_s: float | None = None  # all sessions together, once complete
