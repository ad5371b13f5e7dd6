"""The study's latency stage: does int8's speed on the board turn into success? (docs/latency.md)

Every model with a board prediction (the roofline's "predicted on Pi", shown only where the roofline check
agreed) flies the study's seeded episodes twice more: in lockstep and with each action landing the model's
predicted time on the board late (nav_env's latency stepping, control period 0.1 s). Beside them a sweep of
fixed delays for each group's fp32 and int8 gives success and flight time against latency, so one can read
where a model's predicted delay sits on the curve. The memory stage's Air Learning-sized Policy III (the
model that swaps on a Pi 3b) adds a row: its predicted delays (roofline, times the slowdown the memory
stage measured at the board's RAM) flown by the shipped Policy III networks, which act as the widened
model does on the area-downsampled image (policies.widen), labelled so.

The flights run in this process (policies' onnxruntime sessions, nav_env's vector env over the same seeds
as the closed loop): with a modelled delay the device's own speed plays no part in a flight, so the loop
adds nothing but time. The stage checks that claim on every run: its lockstep flights are compared with the
closed loop's, episode by episode (``lockstep_matches_loop``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np

from airq_cli import known_fields, write_json
from deployment_study.memory_stage import sha256_file
from firmware_bridge.protocol import sha256_hex
from nav_env.backends import DEFAULT_BACKEND
from nav_env.config import load_level, with_policy_observation
from nav_env.latency import LatencySource
from nav_env.rollout import run_episodes
from nav_env.stats import paired_difference, wilson_interval
from policies.loading import load_policy

SWEEP_DELAYS_MS = (0.0, 50.0, 100.0, 200.0, 300.0, 500.0)
SWEEP_PRECISIONS = ("fp32", "int8")
STAND_IN = "Policy III networks (32 x 32) at the Air Learning-sized model's predicted delay"


@dataclass(frozen=True)
class Flight:
    """One model over the study's episodes at one fixed delay (0: lockstep)."""

    delay_ms: float
    episodes: int
    success_rate: float
    success_ci95: tuple[float, float]
    collision_rate: float
    mean_time_to_goal_s: float | None  # successful flights
    mean_path_length_m: float | None
    outcomes: list[str]  # per episode (success, collision, timeout), for pairing

    @property
    def successes(self) -> list[bool]:
        return [o == "success" for o in self.outcomes]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Flight:
        return cls(**known_fields(cls, data) | {"success_ci95": tuple(data["success_ci95"])})


@dataclass(frozen=True)
class LatencyRow:
    """One model at one level: lockstep beside its predicted board delay."""

    level: str
    group: str
    precision: str
    model: str
    predicted_ms: float
    prediction: str  # how the delay was got ("roofline", "roofline x 1.02 (memory stage, 900 MB + swap)")
    lockstep: Flight
    at_board: Flight
    paired: dict[str, Any]  # at_board against lockstep, same episodes (nav_env.stats.paired_difference)
    stand_in: str = ""  # the Air Learning-sized row: which networks flew
    lockstep_matches_loop: int | None = None  # episodes whose outcome equals the closed loop's (None: no cell)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LatencyRow:
        flights = {k: Flight.from_dict(data[k]) for k in ("lockstep", "at_board")}
        return cls(**known_fields(cls, data) | flights)


def int8_against_fp32(rows: list[LatencyRow]) -> list[tuple[LatencyRow, LatencyRow, dict[str, float]]]:
    """Each fp32 row with the int8 row of its level, group and size (an Air Learning-sized one apart), and int8 -
    fp32 at their board delays, paired over the same episodes (nav_env.stats.paired_difference)."""
    return [
        (fp32, int8, paired_difference(fp32.at_board.successes, int8.at_board.successes))
        for fp32 in rows
        for int8 in rows
        if fp32.precision == "fp32"
        and int8.precision == "int8"
        and (fp32.level, fp32.group, bool(fp32.stand_in)) == (int8.level, int8.group, bool(int8.stand_in))
    ]


@dataclass(frozen=True)
class SweepCurve:
    level: str
    group: str
    precision: str
    model: str
    flights: list[Flight]


@dataclass
class LatencyResult:
    board: str
    episodes: int
    seed: int
    period_s: float
    method: str
    rows: list[LatencyRow] = field(default_factory=list)
    sweep: list[SweepCurve] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # models without a shown prediction, and why
    wall_s: float = 0.0
    flown: int = 0  # flights flown by this session (the others were read back from latency/)


@dataclass(frozen=True)
class LatencyTarget:
    """A model to fly: its file, the delay predicted for it and how."""

    level: str
    group: str
    precision: str
    model: str
    predicted_ms: float
    prediction: str
    stand_in: str = ""
    loop_outcomes: list[str] | None = None  # the closed loop's lockstep outcomes, episode by episode


def _quantizes_per_call(model: str) -> bool:
    """Does the model quantize its activations with a scale taken from its input (DynamicQuantizeLinear)?"""
    # deferred: onnx: ~0.2 s to import, paid only where used
    import onnx

    graph = onnx.load(model, load_external_data=False).graph
    return any(n.op_type in ("DynamicQuantizeLinear", "DynamicQuantizeMatMul") for n in graph.node)


def fly(
    model: str,
    level: str,
    episodes: int,
    seed: int,
    delay_ms: float,
    num_envs: int = 64,
    backend: str = DEFAULT_BACKEND,
) -> Flight:
    """``model`` over ``episodes`` seeded episodes of ``level`` with every action ``delay_ms`` late, on the simulator
    ``backend`` (the study's: the closed loop's cells fly it too)."""
    policy = load_policy(model)
    cfg = with_policy_observation(load_level(level), policy.metadata)
    act = policy.act
    if _quantizes_per_call(model):
        # Dynamic int8 takes its activation scale from the whole input: a batch of observations would be
        # quantized together, unlike on the device, which sees one at a time. So one at a time here too.
        def act(obs: np.ndarray) -> np.ndarray:
            return np.concatenate([policy.act(o[None]) for o in obs])

    source = LatencySource("fixed", fixed_s=delay_ms / 1e3) if delay_ms > 0 else None
    results = sorted(run_episodes(act, cfg, episodes, seed, num_envs, source, backend=backend), key=lambda r: r.episode)
    wins = [r.success for r in results]
    won = [r for r in results if r.success]
    timed = [r.flight_time for r in won if r.flight_time is not None]
    return Flight(
        delay_ms=delay_ms,
        episodes=len(results),
        success_rate=sum(wins) / len(wins),
        success_ci95=tuple(wilson_interval(sum(wins), len(wins))),  # type: ignore[arg-type]
        collision_rate=sum(r.outcome == "collision" for r in results) / len(results),
        mean_time_to_goal_s=sum(timed) / len(timed) if timed else None,
        mean_path_length_m=sum(r.path_length for r in won) / len(won) if won else None,
        outcomes=[r.outcome for r in results],
    )


def _fly_job(job: tuple[str, str, int, int, float, str, str]) -> tuple[str, Flight]:
    model, level, episodes, seed, delay_ms, path, backend = job
    flight = fly(model, level, episodes, seed, delay_ms, backend=backend)
    write_json(path, flight)  # cached as it ends: an interrupted stage repeats none
    return path, flight


def run_stage(
    targets: list[LatencyTarget],
    board: str,
    episodes: int,
    seed: int,
    out: Path,
    say: Callable[[str], None],
    sweep_group: str | None,
    workers: int = 2,
    backend: str = DEFAULT_BACKEND,
) -> LatencyResult:
    """Fly every target in lockstep and at its predicted delay, and ``sweep_group``'s fp32 and int8 at
    every delay of SWEEP_DELAYS_MS, on the simulator ``backend``; ``workers`` processes fly side by side (flights
    are independent: with a modelled delay no time is measured). Each flight is cached in ``out/latency/``
    (``out/latency/BACKEND/`` for a backend other than the default)."""
    t0 = time.monotonic()
    cache = out / "latency" if backend == DEFAULT_BACKEND else out / "latency" / backend
    result = LatencyResult(
        board=board,
        episodes=episodes,
        seed=seed,
        period_s=0.1,
        method=f"In-process flights (policies.loading, onnxruntime; nav_env's vector env, {backend} simulator, over the "
        "closed loop's seeds), every action landing a fixed delay late (nav_env set_latency)",
    )
    sweep = [t for t in targets if t.group == sweep_group and t.precision in SWEEP_PRECISIONS and not t.stand_in]
    wanted: dict[str, tuple[str, str, int, int, float, str, str]] = {}

    model_sha = {m: sha256_file(Path(m)) for m in {t.model for t in targets}}  # each file read once

    def key(t: LatencyTarget, delay_ms: float) -> str:
        # the model's content and the episodes in the name: a retrained model or other seeds fly again
        what = f"{model_sha[t.model]} {episodes} {seed}"
        path = cache / t.level / f"{Path(t.model).stem}_{delay_ms:g}ms_{sha256_hex(what.encode())[:12]}.json"
        wanted.setdefault(str(path), (t.model, t.level, episodes, seed, delay_ms, str(path), backend))
        return str(path)

    rows = [(t, key(t, 0.0), key(t, round(t.predicted_ms, 3))) for t in targets]
    curves = [(t, [key(t, d) for d in SWEEP_DELAYS_MS]) for t in sweep]
    flights: dict[str, Flight] = {}
    for path in wanted:
        try:
            flights[path] = Flight.from_dict(json.loads(Path(path).read_text()))
        except (OSError, ValueError, KeyError, TypeError):
            pass
    todo = [job for path, job in wanted.items() if path not in flights]
    say(
        f"latency stage ({board}): {len(wanted)} flights of {episodes} episodes "
        f"({len(wanted) - len(todo)} done earlier), {workers} processes"
    )
    if todo:
        with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
            for k, (path, flight) in enumerate(pool.map(_fly_job, todo), 1):
                flights[path] = flight
                if k % max(1, len(todo) // 10) == 0 or k == len(todo):
                    say(f"latency stage: {k}/{len(todo)} flights")
    for t, lock_key, late_key in rows:
        lock, late = flights[lock_key], flights[late_key]
        matches = None if t.loop_outcomes is None else sum(a == b for a, b in zip(t.loop_outcomes, lock.outcomes))
        result.rows.append(
            LatencyRow(
                level=t.level,
                group=t.group,
                precision=t.precision,
                model=t.model,
                predicted_ms=t.predicted_ms,
                prediction=t.prediction,
                lockstep=lock,
                at_board=late,
                paired=paired_difference(lock.successes, late.successes),
                stand_in=t.stand_in,
                lockstep_matches_loop=matches,
            )
        )
    for t, keys in curves:
        result.sweep.append(SweepCurve(t.level, t.group, t.precision, t.model, [flights[k] for k in keys]))
    result.wall_s = time.monotonic() - t0
    result.flown = len(todo)
    return result
