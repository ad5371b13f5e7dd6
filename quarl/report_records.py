"""The records of ``python -m quarl report`` (quarl.report): a statistic over seeds, a cell's Table 2 numbers,
the per-algorithm means, a QAT - PTQ comparison, weight widths, a skipped file; and the names of the study's
policies and bit widths that its statistics, tables, reading and plots share."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from quarl.published import SeedRow
from quarl.results import TrialResult

PRECISIONS = ("fp32", "fp16", "int8", "int8-w7", "int8-dynamic")  # the ONNX policies of Table 2
QUANTIZED = PRECISIONS[1:]
# Table 2's column titles: static int8 with 8-bit weights (the seed's int8) and with 7-bit weights (airq's u8s7)
PRECISION_TITLES = {"fp32": "fp32", "fp16": "fp16", "int8": "int8", "int8-w7": "int8 w7", "int8-dynamic": "int8-dyn"}
WEIGHT_BITS = [8, 4]  # histogram grid (the smallest) and SQNR bit widths of the weight figures


def algo_order(algo: str) -> tuple[int, str]:
    """Sort key of algorithms: the seed's order (A2C, DQN, PPO, DDPG, TD3, SAC), then any other by name."""
    order = ("a2c", "dqn", "ppo", "ddpg", "td3", "sac")
    return (order.index(algo) if algo in order else len(order), algo)


@dataclass(frozen=True)
class Stat:
    """A mean over seeds (or episodes) with its sample standard deviation and 95% t interval (NaN for n < 2)."""

    mean: float
    std: float
    n: int
    low: float
    high: float

    @property
    def interval(self) -> tuple[float, float]:
        """(low, high), or (mean, mean) when there is no interval (one value): for plotting."""
        if math.isnan(self.low):
            return (self.mean, self.mean)
        return (self.low, self.high)


@dataclass(frozen=True)
class Skipped:
    path: str
    reason: str


@dataclass(frozen=True)
class Trial:
    result: TrialResult
    directory: Path


@dataclass
class CellReport:
    """One (env, algorithm) over its seeds."""

    env_id: str
    algo: str
    seeds: list[int]
    passed_seeds: list[int]
    threshold: float
    published: float
    published_source: str
    budget_note: str
    steps: int
    counted: bool  # at least one seed passed its baseline: the cell enters the means and the reading
    rewards: dict[str, Stat]  # PRECISIONS -> over the used seeds' mean returns
    errors: dict[str, Stat]  # QUANTIZED -> over the used seeds' error %
    ptq: dict[int, Stat]  # bits -> mean return over seeds
    qat: dict[int, Stat]
    ptq_errors: dict[int, Stat]
    qat_errors: dict[int, Stat]
    seed: SeedRow | None
    used_seeds: list[int] = field(default_factory=list)  # passed seeds, or all seeds for a failed cell

    @property
    def status(self) -> str:
        if not self.passed_seeds:
            return "baseline failed"
        failed = [s for s in self.seeds if s not in self.passed_seeds]
        if failed:
            return f"ok; baseline failed for seed(s) {', '.join(map(str, failed))}, left out"
        return "ok"

    @property
    def label(self) -> str:
        return f"{self.env_id} {self.algo.upper()}"


@dataclass(frozen=True)
class AlgoMean:
    algo: str
    cells: list[str]  # env ids counted
    errors: dict[str, float]  # QUANTIZED -> mean over the counted cells of their mean error %
    seed_errors: tuple[float, float] | None  # the seed's published (fp16, int8) mean errors
    seed_same_envs: dict[str, float]  # fp16/int8 -> the seed's mean over the counted cells it also has
    seed_same_envs_n: int


@dataclass(frozen=True)
class PairedDiff:
    """QAT - PTQ at one bit width for one cell."""

    env_id: str
    algo: str
    bits: int
    counted: bool
    seeds: Stat  # over seeds of (mean QAT return - mean PTQ return)
    per_seed: dict[int, Stat]  # seed -> over episodes of (QAT return - PTQ return), paired episodes

    @property
    def verdict(self) -> str:
        s = self.seeds
        if s.n >= 2 and not math.isnan(s.low):
            basis = f"95% t interval over {s.n} seeds"
            low, high = s.low, s.high
        elif s.n == 1 and self.per_seed:
            (ep,) = self.per_seed.values()
            if ep.n < 2:
                return "undecided (one seed, one episode)"
            basis = f"one seed: 95% t interval over {ep.n} paired episodes"
            low, high = ep.low, ep.high
        else:
            return "undecided (no paired data)"
        if low > 0:
            return f"QAT better ({basis} excludes 0)"
        if high < 0:
            return f"PTQ better ({basis} excludes 0)"
        return f"no clear difference ({basis} contains 0)"


@dataclass(frozen=True)
class WeightBitsDiff:
    """Static int8 with 8-bit against 7-bit weights (the same calibration, the same episodes) for one cell."""

    env_id: str
    algo: str
    counted: bool
    error8: Stat  # over seeds: error % of int8 (8-bit weights)
    error7: Stat  # over seeds: error % of int8-w7 (7-bit weights)
    seeds: Stat  # over seeds of (8-bit mean return - 7-bit mean return)
    episodes: int  # paired episodes pooled over the seeds
    episodes_differ: int  # of them, episodes whose returns differ
    wilcoxon_p: float  # Wilcoxon signed-rank test of the pooled paired differences (1.0 when none differ)
    seed_error_int8: float  # the seed's int8 error for this cell (NaN where it has none)

    @property
    def verdict(self) -> str:
        if self.episodes == 0:
            return "undecided (no paired episodes)"
        if self.episodes_differ == 0:
            return "identical returns in every episode"
        if self.wilcoxon_p >= 0.05:
            return f"no clear difference (Wilcoxon p = {self.wilcoxon_p:.2g})"
        return f"{'8' if self.seeds.mean > 0 else '7'}-bit weights score higher (Wilcoxon p = {self.wilcoxon_p:.2g})"


@dataclass(frozen=True)
class LayerWidth:
    layer: str
    shape: list[int]
    min: float
    max: float
    std: float
    sqnr_nearest_db: dict[int, float]


@dataclass(frozen=True)
class CellWidth:
    env_id: str
    algo: str
    counted: bool
    seeds: list[int]  # seeds whose fp32.onnx was read
    widest_range: Stat  # max over layers of (max W - min W), over seeds
    mean_range: Stat  # mean over layers of (max W - min W), over seeds
    figure_seed: int | None
    layers: list[LayerWidth]  # of the figure seed's model
    int8_error: float  # the cell's mean static int8 error %, for the comparison
