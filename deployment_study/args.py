"""The deployment study's arguments and the defaults they name: what every stage, the results and the
command read, so none of them imports another for it (study.json's "args" is a StudyArgs).

Standard library only and no other module of the package: it is the bottom of deployment_study.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRECISIONS = ("fp32", "fp16", "int8", "int8-dynamic")


def group_and_precision(path: str | Path) -> tuple[str, str] | None:
    """('policy1_quadrotor', 'int8') from models/policy1_quadrotor_int8.onnx (GROUP_PRECISION.onnx, PRECISION one
    of PRECISIONS, the longest that fits), or None when the name says no precision."""
    stem = Path(path).stem
    precision = next((q for q in sorted(PRECISIONS, key=len, reverse=True) if stem.endswith("_" + q)), None)
    return None if precision is None else (stem[: -len(precision) - 1], precision)


SHIPPED = [ROOT / "models" / f"policy{i}_{p}.onnx" for i in (1, 2, 3) for p in PRECISIONS]
# the memory stage's defaults: Policy III, widened, and where the large models are kept between studies
DEFAULT_MEMORY_SOURCE = ROOT / "models" / "policy3_fp32.onnx"
DEFAULT_MEMORY_CACHE = ROOT / ".cache" / "study-memory"


@dataclass
class StudyArgs:
    models: list[str] = field(default_factory=lambda: [str(p) for p in SHIPPED])
    host: str | None = None
    port: int = 5555
    sim_only: bool = False
    profile: str | None = None  # sim-only: the resource profile; --host: the board whose roofline figures apply
    episodes: int = 100
    levels: list[str] = field(default_factory=lambda: ["default", "hard"])
    seed: int = 0
    backend: str = "embedded"  # the closed loop's simulator: embedded, or mujoco (rigid-body quadrotor)
    timing_acts: int = 200  # acts per model per round of the timing pass
    timing_rounds: int = 10
    out: str = "out/study"
    quiet: bool = False
    # the memory stage (deployment_study.memory_stage): None = on with --host (report) and with a sim-only profile that has a memory size
    memory_study: bool | None = None
    memory_source: str = str(DEFAULT_MEMORY_SOURCE)
    memory_camera: str = "144x256"
    memory_limits: list[str] | None = None  # MB[:SWAP_MB]; None: the profile's size with swap, without, and 512 MB
    memory_swap_mb: int = 2048
    memory_episodes: int = 5
    memory_thrash_acts: int = 8
    memory_calibration_episodes: int = 20
    memory_cache: str = str(DEFAULT_MEMORY_CACHE)
    # the latency stage (deployment_study.latency_stage): on when the profile names a board with roofline figures
    latency_study: bool = True
