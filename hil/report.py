"""Summaries of closed-loop runs, the comparisons between policies, report.json and its figures."""

from __future__ import annotations

import weakref
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from airq_cli import write_json
from firmware_bridge.bench import percentiles_us
from firmware_bridge.client import PolicyInfo
from hil.loop import LoopRecord
from hil.report_html import write_run_html
from nav_env.backends import get_backend
from nav_env.config import NavConfig, load_level
from nav_env.latency import round_trip_quantiles_us
from nav_env.render import episode_title, save_episode_png, save_figure
from nav_env.rollout import EpisodeResult, episode_row, summarize
from nav_env.stats import paired_difference


@dataclass(frozen=True)
class Reliability:
    """What one policy's run lived through and how the loop recovered: report.json's ``runs[].reliability``."""

    deadline_ms: float | None
    deadline_misses: int
    failsafe_steps: int
    outages: int
    outage_s: float
    policy_reuploads: int
    bridge_restarts: int
    episodes_spanning_outage: list[int]
    # BridgeClient.reliability_counters that were measured (CLIENT_COUNTS): report.json has them beside the
    # fields above, and only those measured (a run resumed from an older log may lack some)
    client: dict[str, int] = field(default_factory=dict)
    vehicle_link_errors: int | None = 0  # acts refused VEHICLE_LINK: the bridge's autopilot link was lost
    pilot_acts: int | None = 0  # acts answered while a pilot had the vehicle: the bridge sent nothing

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        del out["client"]
        return out | self.client

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Reliability:
        values: dict[str, Any] = {f.name: data.get(f.name) for f in fields(cls) if f.name != "client"}
        return cls(**values, client={k: data[k] for k in CLIENT_COUNTS if k in data})


@dataclass(frozen=True)
class DeviceMemory:
    """The bridge's memory while the policy ran: report.json's ``runs[].device_memory``."""

    rss_bytes: int
    peak_rss_bytes: int
    model_rss_bytes: int | None
    samples: list[list[float]]  # [seconds into the run, rss, peak rss]


@dataclass(frozen=True)
class PolicySummary:
    """One policy's results over the run's episodes: an element of report.json's ``runs``."""

    policy: str
    sha256: str | None
    model_bytes: int | None
    obs_dim: int | None
    load_ms: float | None
    outcomes: dict[str, Any]  # nav_env.rollout.summarize
    steps: int
    acts: int
    actuation_hz: float
    round_trip_us: dict[str, float]  # percentiles_us
    round_trip_quantiles_us: list[float] | None  # for --latency replay:THIS_REPORT
    device_inference_us: dict[str, float]
    overhead_us: dict[str, float]
    deadline_misses: int
    overruns: int
    reliability: Reliability
    device_memory: DeviceMemory
    device_counters: dict[str, int | None]
    act_seq_increasing: bool
    episodes: list[dict[str, Any]]  # report_row of each episode

    def to_json(self, *, episodes: bool = True) -> dict[str, Any]:
        """report.json's shape; without ``episodes`` it is what the run log's policy_end record keeps."""
        out = asdict(self) | {"reliability": self.reliability.to_json()}
        if not episodes:
            del out["episodes"]
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PolicySummary:
        """A summary as to_json wrote it (report.json, a policy_end record with the episodes added back); a
        field a log of an earlier version lacks reads as None."""
        values: dict[str, Any] = {f.name: data.get(f.name) for f in fields(cls)}
        return cls(
            **values
            | {
                "reliability": Reliability.from_json(data.get("reliability") or {}),
                "device_memory": DeviceMemory(**data["device_memory"]),
                "episodes": data.get("episodes") or [],
            }
        )


def summarize_run(
    name: str,
    rec: LoopRecord,
    load: PolicyInfo | None,
    prior_rows: list[dict[str, Any]] | None = None,
    deadline_s: float | None = None,
) -> PolicySummary:
    """One policy's summary. ``load``: the bridge's load_policy reply (None: no reply known, the policy's sha256,
    size and observation length are then None). ``prior_rows``: episodes flown before a --resume (from the run log).
    Reliability counts, latency and the act rate add up every session: the earlier ones from their
    per-episode rows (which carry counter shares and latency samples; rows logged before they did
    add nothing). Memory and device counters are this session's, or the rows' samples if it flew
    nothing."""
    prior = prior_rows or []
    extras = rec.episode_rows or [{}] * len(rec.episodes)  # a LoopRecord built by hand may have none
    flown = [episode_row(ep) | extra for ep, extra in zip(rec.episodes, extras)]
    rows = sorted(prior + flown, key=lambda r: r["episode"])
    episodes = [EpisodeResult(**{k: r[k] for k in EpisodeResult.__dataclass_fields__ if k in r}) for r in rows]
    earlier = record_from_rows(prior)
    rtt_ns, infer_ns = earlier.rtt_ns + rec.rtt_ns, earlier.infer_ns + rec.infer_ns
    acts = len(rtt_ns)
    loop_s = _prior(prior, "loop_s") + rec.loop_s
    steps = sum(e.steps for e in episodes)
    overhead = [r - i for r, i in zip(rtt_ns, infer_ns)]
    end = rec.status_end
    memory = rec.memory or [tuple(r["memory"]) for r in prior if r.get("memory")]
    # no status of this session (it flew nothing): the memory the logged rows sampled last
    rss, peak = (end.rss_bytes or 0, end.peak_rss_bytes or 0) if end else memory[-1][1:] if memory else (0, 0)
    peaks = [m[2] for m in memory] + [peak]
    seqs = np.asarray(rec.seqs)
    misses = rec.deadline_misses + _prior(prior, "failsafe_steps")
    return PolicySummary(
        policy=name,
        sha256=None if load is None else load.sha256,
        model_bytes=None if load is None else load.size_bytes,
        obs_dim=None if load is None else load.obs_dim,
        load_ms=None if load is None or load.load_time_ns is None else round(load.load_time_ns / 1e6, 3),
        outcomes=summarize(episodes),
        steps=steps,
        acts=acts,
        actuation_hz=acts / loop_s if loop_s else 0.0,
        round_trip_us=percentiles_us(rtt_ns),
        round_trip_quantiles_us=round_trip_quantiles_us(rtt_ns),
        device_inference_us=percentiles_us(infer_ns),
        overhead_us=percentiles_us(overhead),
        deadline_misses=misses,
        overruns=rec.overruns + _prior(prior, "overruns"),
        reliability=Reliability(
            deadline_ms=deadline_s * 1e3 if deadline_s else None,
            deadline_misses=misses,
            failsafe_steps=sum(int(r.get("failsafe_steps") or 0) for r in rows),
            outages=rec.link.outages + _prior(prior, "outages"),
            outage_s=round(rec.link.outage_s + _prior(prior, "outage_s"), 3),
            policy_reuploads=rec.link.policy_uploads + _prior(prior, "policy_uploads"),
            bridge_restarts=rec.link.bridge_restarts + _prior(prior, "bridge_restarts"),
            vehicle_link_errors=rec.link.vehicle_link_errors + _prior(prior, "vehicle_link_errors"),
            pilot_acts=rec.link.pilot_acts + _prior(prior, "pilot_acts"),
            episodes_spanning_outage=[r["episode"] for r in rows if r.get("spans_outage")],
            client={
                k: rec.client_counters.get(k, 0) + _prior(prior, k)
                for k in CLIENT_COUNTS
                if k in rec.client_counters or any(k in r for r in prior)
            },
        ),
        device_memory=DeviceMemory(
            rss_bytes=rss,
            peak_rss_bytes=max(peaks),
            model_rss_bytes=None if end is None else end.model_rss_delta_bytes,
            samples=[[round(t, 4), rss, peak] for t, rss, peak in memory],
        ),
        device_counters={k: None if end is None else end.counters.get(k) for k in ("acts", "errors", "holds")},
        act_seq_increasing=bool(len(seqs) < 2 or np.all(np.diff(seqs) > 0)),
        episodes=[report_row(r) for r in rows],
    )


CLIENT_COUNTS = ("retries", "reconnects", "stale_replies", "connections", "disconnects")  # reliability_counters
SAMPLES = ("rtt_ns", "infer_ns")  # per-act lists in the log's episode rows, left out of report.json


def report_row(row: dict[str, Any]) -> dict[str, Any]:
    """An episode row as report.json shows it: without the per-act samples the log keeps."""
    return {k: v for k, v in row.items() if k not in SAMPLES}


def record_from_rows(rows: list[dict[str, Any]]) -> LoopRecord:
    """The latency samples of logged episodes, for the figures of a policy flown in earlier sessions."""
    return LoopRecord(
        rtt_ns=[x for r in rows for x in r.get("rtt_ns") or []],
        infer_ns=[x for r in rows for x in r.get("infer_ns") or []],
    )


def _prior(rows: list[dict[str, Any]] | None, name: str) -> Any:
    """A counter summed over episodes of earlier sessions (rows logged before this version have none)."""
    return sum(r.get(name) or 0 for r in rows or [])


@dataclass(frozen=True)
class Comparison:
    """One policy against the run's first (the baseline): an element of report.json's ``comparisons``."""

    policy: str
    against: str
    inference_speedup: float | None  # device inference p50, baseline over this policy
    actuation_rate_ratio: float | None
    peak_rss_ratio: float | None  # baseline over this policy: a memory saving above 1
    model_size_ratio: float | None
    success_difference: dict[str, float] | None  # nav_env.stats.paired_difference; None: episodes differ


def compare(runs: list[PolicySummary]) -> list[Comparison]:
    """Each run against the first: speed-up, memory ratio and the paired success difference."""
    base = runs[0]
    out = []
    base_success = [e["outcome"] == "success" for e in base.episodes]
    for run in runs[1:]:
        success = [e["outcome"] == "success" for e in run.episodes]
        out.append(
            Comparison(
                policy=run.policy,
                against=base.policy,
                inference_speedup=_ratio(base.device_inference_us["p50"], run.device_inference_us["p50"]),
                actuation_rate_ratio=_ratio(run.actuation_hz, base.actuation_hz),
                peak_rss_ratio=_ratio(base.device_memory.peak_rss_bytes, run.device_memory.peak_rss_bytes),
                model_size_ratio=_ratio(base.model_bytes or 0, run.model_bytes or 0),
                success_difference=paired_difference(np.asarray(base_success), np.asarray(success))
                if len(success) == len(base_success)
                else None,
            )
        )
    return out


@dataclass(frozen=True)
class PolicyResult:
    """One policy's part of a run: its summary, the samples its figures are drawn from, and what flying it
    told about the device (a policy finished in an earlier session has only what the log kept)."""

    summary: PolicySummary
    record: LoopRecord
    device: dict[str, Any] | None = None  # the bridge's hello: device, versions, threads, actuator
    warning: str | None = None  # e.g. an int8 scheme the device's kernels do not compute exactly
    timing: dict[str, Any] | None = None  # --timing latency: the delay this policy flew (Timing.describe)


@dataclass(frozen=True)
class Report:
    """report.json: the run's settings, then each policy's summary and the comparisons with the first."""

    command: str
    date: str
    args: dict[str, Any]  # hil.run's RunArgs
    mode: str
    profile: dict[str, Any] | None  # --sim-only: the resource profile
    level: str
    obs_dim: int
    deadline_ms: float
    timing: dict[str, Any]  # lockstep, or latency and its source
    run_log: str
    host_versions: dict[str, str]  # this side's packages; the device's are in device.device
    device: dict[str, Any] | None  # the bridge's hello, from the first policy that reached it
    runs: list[PolicySummary]
    comparisons: list[Comparison]
    backend: str  # the simulator
    warnings: list[str] = field(default_factory=list)  # in report.json only when there is one
    timing_by_policy: dict[str, dict[str, Any]] | None = None  # --timing latency: each flown policy's delay
    vehicle: dict[str, Any] | None = None  # --backend autopilot: autopilot, firmware, frame, clock speed, preflight

    def with_policies(self, results: list[PolicyResult]) -> Report:
        """This report with the policies so far: the device is the first one reached."""
        runs = [r.summary for r in results]
        timings = {r.summary.policy: r.timing for r in results if r.timing is not None}
        return replace(
            self,
            device=next((r.device for r in results if r.device), None),
            runs=runs,
            comparisons=compare(runs),
            warnings=list(dict.fromkeys(r.warning for r in results if r.warning)),
            timing_by_policy=timings or None,
        )

    def to_json(self) -> dict[str, Any]:
        """The document report.json holds; the optional entries only when there is something to say."""
        out = asdict(self) | {"runs": [run.to_json() for run in self.runs]}
        return {k: v for k, v in out.items() if v or k not in ("warnings", "timing_by_policy", "vehicle")}


def _ratio(a: float, b: float) -> float | None:
    return a / b if b else None


def short_name(name: str) -> str:
    return Path(name).name[-28:]


def write_report(out_dir: Path, report: Report, records: list[LoopRecord]) -> list[Path]:
    """report.json and the figures; ``records``: each run's samples and pictures, in the order of report.runs."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [write_json(out_dir / "report.json", report.to_json())]
    cfg = _level_config(report)
    for run, rec in zip(report.runs, records):
        stem = Path(run.policy).stem
        rows = {r["episode"]: r for r in run.episodes}
        for j, frame in rec.frames.items():
            path = out_dir / f"trajectory_{stem}_ep{j}.png"
            drawn = _DRAWN.get(path)
            if drawn is None or drawn() is not frame or not path.is_file():  # else: drawn by an earlier call
                _trajectory_png(path, frame, cfg, report, run, rows.get(j))
                _DRAWN[path] = weakref.ref(frame)
            written.append(path)
    written += _plots(out_dir, report.runs, records)
    written.append(write_run_html(out_dir / "report.json", written))  # report.html: the JSON and figures in one page
    return written


# trajectory PNGs written in this process, by the frame they show: hil.run calls write_report after each
# policy, and a finished policy's frames (about half a second each to draw) need not be drawn again
_DRAWN: dict[Path, weakref.ref] = {}


def _level_config(report: Report) -> NavConfig | None:
    """The level the run flew (its arena size and camera give the pictures their scale), or None."""
    level = report.args.get("level") or report.level
    try:
        return load_level(level) if level else None
    except Exception:  # a level file moved since: pictures without a scale bar, not no report
        return None


def _trajectory_png(
    path: Path, frame: np.ndarray, cfg: NavConfig | None, report: Report, run: PolicySummary, row: dict[str, Any] | None
) -> Path:
    """One episode's last frame with a title (policy, episode, outcome), legend, scale bar and labelled depth."""
    row = row or {}
    stem = Path(run.policy).stem
    title = episode_title(stem, row.get("outcome"), row.get("steps"), row.get("episode"), row.get("seed"))
    subtitle = f"{run.policy} in the closed loop, level {report.level}"
    if report.vehicle:
        v = report.vehicle
        subtitle += f", flown by {v.get('autopilot')} {v.get('firmware')} (the arena placed on its start pose)"
    elif not (backend := get_backend(report.backend)).is_default:
        subtitle += f", {backend.world}"
    if row.get("path_length") is not None:
        subtitle += (
            f"; path flown {row['path_length']:.1f} m, start to goal {row['start_distance']:.1f} m in a straight line"
        )
    return save_episode_png(path, frame, cfg, title, subtitle, row.get("outcome"))


MIB = 2**20


def _plots(out_dir: Path, runs: list[PolicySummary], records: list[LoopRecord]) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return [_latency_plot(plt, out_dir, runs, records), _memory_plot(plt, out_dir, runs)]


def _latency_plot(plt: ModuleType, out_dir: Path, runs: list[PolicySummary], records: list[LoopRecord]) -> Path:
    """Round trip and device inference per act, every policy, on log-spaced bins (the tail stays visible
    without squeezing the peaks); p50/p99 in the legend, which sits below the axes."""
    fig, ax = plt.subplots(figsize=(9, 5.2), layout="constrained")
    series = []
    for k, (r, rec) in enumerate(zip(runs, records)):
        color = f"C{k}"
        series.append((r, "round trip (host send to reply)", np.asarray(rec.rtt_ns) / 1e3, color, "-"))
        series.append((r, "device inference", np.asarray(rec.infer_ns) / 1e3, color, "--"))
    values = np.concatenate([v for *_, v, _, _ in series if len(v)] or [np.ones(1)])
    positive = values[values > 0]
    lo = max(float(positive.min()) if len(positive) else 1.0, 0.1)
    hi = max(float(values.max()), lo * 10)
    bins = np.geomspace(lo * 0.95, hi * 1.05, 80)
    for r, what, v, color, style in series:
        if not len(v):
            continue
        p50, p99 = np.percentile(v, [50, 99])
        ax.hist(
            np.clip(v, bins[0], bins[-1]),
            bins=bins,
            histtype="step",
            color=color,
            linestyle=style,
            linewidth=1.6 if style == "-" else 1.3,
            label=f"{short_name(r.policy)} {what}: p50 {p50:,.0f} µs, p99 {p99:,.0f} µs, {len(v):,} acts",
        )
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_xscale("log")
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1, 2, 5)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:,.0f}" if x >= 1 else f"{x:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("latency per act (µs, log scale)")
    ax.set_ylabel("acts per bin (bins equal on the log scale)")
    ax.set_title("Closed-loop latency per act (µs): round trip and device inference")
    ax.grid(True, which="major", alpha=0.3)
    fig.legend(loc="outside lower center", ncol=1, fontsize=8, frameon=False)
    return save_figure(fig, out_dir / "latency_histogram.png")


def _memory_plot(plt: ModuleType, out_dir: Path, runs: list[PolicySummary]) -> Path:
    """The bridge's memory: on a linear axis from zero (the magnitudes compare), and, below, the growth
    above each run's first sample (where MiB-sized changes show). RSS solid with markers, peak RSS
    dashed and wider underneath; the numbers in the legend, which sits below the axes."""
    fig, (ax, growth) = plt.subplots(2, 1, figsize=(9, 7.2), sharex=True, height_ratios=(3, 2), layout="constrained")
    top = 0.0
    for k, r in enumerate(runs):
        s = np.asarray(r.device_memory.samples, dtype=float)
        if not len(s):
            continue
        color, name = f"C{k}", short_name(r.policy)
        t, rss, peak = s[:, 0], s[:, 1] / MIB, s[:, 2] / MIB
        same = bool(np.allclose(rss, peak))
        peak_label = f"{name} peak RSS: {peak.max():.1f} MiB" + (" (equal to RSS at every sample)" if same else "")
        rss_style = {"color": color, "linestyle": "-", "linewidth": 1.5, "marker": "o", "markersize": 3.5}
        peak_style = {"color": color, "linestyle": "--", "linewidth": 4, "alpha": 0.35}
        for a, base in ((ax, 0.0), (growth, rss[0])):
            a.plot(t, peak - base, **peak_style, zorder=2)
            a.plot(t, rss - base, **rss_style, zorder=3)
        rss_label = f"{name} RSS: {rss[0]:.1f} MiB at the start, {rss[-1]:.1f} MiB at the end"
        ax.plot([], [], **rss_style, label=f"{rss_label} ({rss[-1] - rss[0]:+.1f} MiB)")
        ax.plot([], [], **peak_style, label=peak_label)
        top = max(top, peak.max())
    ax.set_ylim(0, top * 1.12 if top else 1)
    ax.set_ylabel("memory (MiB)")
    ax.set_title("Bridge process memory while each policy runs (MiB, 1 MiB = 2^20 bytes)")
    ax.grid(True, alpha=0.3)
    growth.axhline(0, color="0.5", linewidth=0.8)
    growth.set_ylabel("growth since the\nfirst sample (MiB)")
    growth.set_title("The same, as growth above each run's first sample (note the finer scale)", fontsize=10)
    growth.set_xlabel("seconds into the policy's run")
    growth.grid(True, alpha=0.3)
    fig.legend(loc="outside lower center", ncol=1, fontsize=8, frameon=False)
    return save_figure(fig, out_dir / "memory_over_time.png")
