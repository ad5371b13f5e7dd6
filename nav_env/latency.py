"""Where the delay of each act comes from: the loop's ``--timing latency`` (hil.run) and latency-aware training
(``policies.train --latency``). numpy only, so the env, the loop and training share it.

    measured            the act's own round trip (a real Pi, or the local bridge)
    fixed:MS            MS milliseconds every act
    replay:REPORT.json  resampled from the round trips an earlier hil.run recorded (e.g. on a real Pi), so
                        many policies can be judged at that device's speed without it
    profile:BOARD       each model's predicted time on a board (pi3b, pi4): a prediction, not a measurement;
                        the loop resolves it per model (device_emulation.roofline) with :meth:`LatencySource.predicted`

The delay is the time from the observation to the moment its action reaches the flight controller
(nav_env's ``set_latency``). A replayed distribution is drawn by inverse transform from the report's
``round_trip_quantiles_us`` with a generator seeded by the run's seed and the episode, so a replay is
as reproducible as the episodes.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from airq_cli import UserError

QUANTILE_LEVELS = np.linspace(0.0, 1.0, 201)  # what a report keeps of each policy's round trips (every 0.5%)


def round_trip_quantiles_us(rtt_ns: list[int]) -> list[float] | None:
    """The round trips a report keeps for replay: 201 quantiles (0, 0.5, ..., 100%) in microseconds."""
    if not rtt_ns:
        return None
    return [round(float(q), 3) for q in np.quantile(np.asarray(rtt_ns, dtype=np.float64) / 1e3, QUANTILE_LEVELS)]


@dataclass
class LatencySource:
    """One of the sources above; ``delay_s`` gives each act's delay."""

    kind: str  # measured, fixed, replay, profile
    fixed_s: float = 0.0  # fixed: the delay; profile: the model's predicted time once resolved
    profile: str | None = None  # profile: the board
    prediction: dict[str, Any] = field(default_factory=dict)  # profile: how the delay was predicted (resolved)
    replay_path: str | None = None
    quantiles_us: list[float] = field(default_factory=list)
    replay_from: dict[str, Any] = field(default_factory=dict)  # which run of the report, on what device
    # replay: the report as parse_latency read it, so resolving it for each policy reads the file no more
    replay_report: dict[str, Any] | None = field(default=None, repr=False, compare=False)
    _rng: np.random.Generator | None = None

    @property
    def spec(self) -> str:
        if self.kind == "fixed":
            return f"fixed:{self.fixed_s * 1e3:g}"
        if self.kind == "replay":
            return f"replay:{self.replay_path}"
        if self.kind == "profile":
            return f"profile:{self.profile}"
        return self.kind

    @property
    def resolved(self) -> bool:
        """A profile's delay exists only once predicted for a model; every other source is ready."""
        return self.kind != "profile" or bool(self.prediction)

    def predicted(self, delay_s: float, prediction: dict[str, Any]) -> LatencySource:
        """This profile source resolved for one model: ``delay_s`` every act, ``prediction`` how it was got."""
        if self.kind != "profile":
            raise RuntimeError(f"predicted() resolves a profile source, not {self.spec}")
        if not math.isfinite(delay_s) or delay_s < 0:
            raise ValueError(f"a predicted delay must be finite and >= 0, got {delay_s}")
        return LatencySource("profile", fixed_s=delay_s, profile=self.profile, prediction=dict(prediction))

    def start_episode(self, seed: int) -> None:
        self._rng = self.episode_generator(seed)

    def delay_s(self, measured_rtt_ns: int) -> float:
        if self.kind == "measured":
            return measured_rtt_ns / 1e9
        return self.delay_from(self._rng)  # a fixed source ignores the generator

    def episode_generator(self, seed: int) -> np.random.Generator:
        """The generator :meth:`start_episode` would make: one per env when episodes run side by side."""
        return np.random.default_rng([seed, 0x1A7E])

    def delay_from(self, rng: np.random.Generator | None) -> float:
        """One delay in seconds drawn with ``rng`` (a fixed or resolved profile source ignores it)."""
        if self.kind == "fixed" or (self.kind == "profile" and self.resolved):
            return self.fixed_s
        if self.kind != "replay":
            raise RuntimeError(f"delay_from() needs a fixed or replay source, not {self.spec}")
        if rng is None:
            raise RuntimeError("a replay draws from a generator: start_episode() or episode_generator() first")
        return float(np.interp(rng.random(), QUANTILE_LEVELS, self.quantiles_us)) / 1e6

    def draw(self, n: int) -> np.ndarray:
        """``n`` delays in seconds (one per env of a vector env), from the generator of :meth:`start_episode`."""
        if self.kind == "fixed" or (self.kind == "profile" and self.resolved):
            return np.full(n, self.fixed_s)
        if self.kind != "replay" or self._rng is None:
            raise RuntimeError(f"draw() needs a fixed or replay source after start_episode(), not {self.spec}")
        return np.interp(self._rng.random(n), QUANTILE_LEVELS, self.quantiles_us) / 1e6

    def for_policy(self, sha256: str, name: str) -> LatencySource:
        """A replay picks the report's run of the same model (by sha256, then file name), else its first run;
        which one it took and whether it is this policy go in the report."""
        if self.kind != "replay":
            return self
        report = self.replay_report
        if report is None:
            raise RuntimeError(f"replay source {self.replay_path} was built without its report (use parse_latency)")
        runs = [r for r in report.get("runs") or [] if r.get("round_trip_quantiles_us")]
        chosen = next((r for r in runs if r.get("sha256") == sha256), None) or next(
            (r for r in runs if Path(str(r.get("policy"))).name == name), runs[0]
        )
        device = ((report.get("device") or {}).get("device") or {}).get("cpu_model")
        return LatencySource(
            "replay",
            replay_path=self.replay_path,
            quantiles_us=list(chosen["round_trip_quantiles_us"]),
            replay_from={
                "policy": chosen.get("policy"),
                "same_model": chosen.get("sha256") == sha256,
                "device": device,
                "mode": report.get("mode"),
                "round_trip_p50_us": (chosen.get("round_trip_us") or {}).get("p50"),
            },
        )

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"source": self.spec}
        if self.kind == "replay":
            out["replay_from"] = self.replay_from
        if self.kind == "profile":
            out["predicted_delay_ms"] = self.fixed_s * 1e3
            out["prediction"] = self.prediction
        return out


def parse_latency(spec: str) -> LatencySource:
    """``--latency SPEC``; UserError (one line, exit 2) naming what is wrong."""
    kind, _, value = spec.partition(":")
    if kind == "measured" and not value:
        return LatencySource("measured")
    if kind == "fixed":
        try:
            ms = float(value)
        except ValueError:
            raise UserError(f"--latency fixed:MS needs a number of milliseconds, got {value!r}") from None
        if not math.isfinite(ms) or ms < 0:
            raise UserError(f"--latency fixed:MS must be finite and >= 0, got {value}")
        return LatencySource("fixed", fixed_s=ms / 1e3)
    if kind == "replay":
        path = Path(value)
        try:
            report = json.loads(path.read_text())
        except OSError as e:
            raise UserError(f"--latency replay: cannot read {path} ({e.strerror or e})") from None
        except ValueError:
            raise UserError(f"--latency replay: {path} is not JSON (a hil.run report.json is expected)") from None
        runs = report.get("runs") if isinstance(report, dict) else None
        if not isinstance(runs, list) or not any(
            isinstance(r, dict) and _valid_quantiles(r.get("round_trip_quantiles_us")) for r in runs
        ):
            raise UserError(
                f"--latency replay: {path} is not a hil.run report with recorded round trips "
                "(runs[].round_trip_quantiles_us; reports written before replay existed have none)"
            )
        return LatencySource("replay", replay_path=str(path), replay_report=report)
    if kind == "profile":
        if not value:
            raise UserError("--latency profile:BOARD needs a board (e.g. profile:pi3b)")
        return LatencySource("profile", profile=value)
    raise UserError(f"--latency must be measured, fixed:MS, replay:REPORT.json or profile:BOARD, got {spec!r}")


def _valid_quantiles(q: Any) -> bool:
    return (
        isinstance(q, list)
        and len(q) == len(QUANTILE_LEVELS)
        and all(isinstance(x, (int, float)) and math.isfinite(x) and x >= 0 for x in q)
        and all(a <= b for a, b in zip(q, q[1:]))
    )


def offline_latency(spec: str, flag: str = "--latency") -> LatencySource:
    """A source for flights with no device in the loop (training, in-process evaluation): fixed or replay
    (a replay takes the report's first run); UserError for one that needs a device or a model."""
    source = parse_latency(spec)
    if source.kind == "measured":
        raise UserError(f"{flag}: there is no device here to measure; give fixed:MS or replay:REPORT.json")
    if source.kind == "profile":
        raise UserError(
            f"{flag} profile:BOARD is predicted per model by hil.run; here give the prediction as fixed:MS "
            "(python -m device_emulation.roofline predict MODEL.onnx --profile BOARD)"
        )
    return source.for_policy("", "")
