"""What hil.run's command line shows: progress as a run goes (a bar on a terminal, plain lines otherwise) and, when
it ends, where it flew, on what, the side-by-side table and the files written."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from airq_cli import Progress, shown
from firmware_bridge.device import format_versions
from firmware_bridge.int8_kernels import Int8Kernels
from hil.loop import LoopRecord
from hil.orchestrate import RunProgress, RunResult
from hil.report import short_name
from nav_env.backends import backend_named


def _timing_line(report: dict) -> str:
    args, timing = report["args"], report.get("timing") or {"mode": "lockstep"}
    if timing["mode"] == "latency":
        period = (
            "the device's rate"
            if args.get("device_rate")
            else (f"{args['rate_hz']} Hz" if args.get("rate_hz") else "the level's control period")
        )
        return f"latency timing: each action lands {args.get('latency')} late, period {period}"
    vehicle = report.get("vehicle")
    if vehicle:
        return (
            f"flown by {vehicle['autopilot']} {vehicle['firmware']} ({vehicle['frame']}) in its own clock "
            f"(x{vehicle['speedup']} wall time)"
        )
    return "lockstep, " + (f"paced at {args['rate_hz']} Hz" if args["rate_hz"] else "free-running")


def _header(report: dict) -> str:
    d, args, profile = (report["device"] or {}).get("device") or {}, report["args"], report["profile"]
    world = backend_named(report.get("backend")).world
    return (
        report["mode"]
        + (f", profile {profile['name']}: {profile['emulated']}" if profile else "")
        + f"\ndevice: {d.get('cpu_model') or d.get('machine')} ({d.get('cores')} cores), onnxruntime "
        f"{d.get('onnxruntime_version')}; {world}, level {report['level']}, {args['episodes']} episodes from seed "
        f"{args['seed']}, {_timing_line(report)}\n"
        f"device {Int8Kernels.from_dict(d.get('int8_kernels') or {}).describe()}\n"
        f"host versions: {format_versions(report.get('host_versions') or {})}"
    )


class CommandLineProgress(RunProgress):
    """hil.run's own (airq_cli.Progress): a bar on a terminal; otherwise (a pipe, a log file) a plain line per
    tenth of a policy's episodes, so ``make demo | cat`` is readable. Notes and warnings go to stderr at once."""

    def __init__(self, quiet: bool = False) -> None:
        self.quiet = quiet
        self._bar: Progress | None = None

    def note(self, text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    def policy_started(self, path: str, episodes: int) -> None:
        self._bar = Progress(episodes, Path(path).name, unit="ep", quiet=self.quiet)

    def episode_done(self, record: LoopRecord) -> None:
        if self._bar is None:
            return
        hz = len(record.rtt_ns) / max(record.loop_s, 1e-9)
        success = sum(e.success for e in record.episodes) / max(len(record.episodes), 1)
        self._bar.update(1, postfix=f"{hz:,.0f} Hz, success {success:.0%}")

    def policy_ended(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def describe(result: RunResult) -> str:
    """What the command line prints when a run ends: where, on what, the side-by-side table, the files."""
    if result.already_complete:
        args = result.report["args"]
        return (
            f"the run in {result.out_dir} is complete ({args['episodes']} episodes of each of {len(args['policy'])} "
            f"policies in {result.log_path}); report: {result.report_path}"
        )
    report = result.report
    return "\n".join(
        [
            _header(report),
            format_table(report["runs"], report["comparisons"]),
            f"report: {result.report_path} (+ latency_histogram.png, memory_over_time.png, trajectory_*.png); "
            f"open in a browser: {result.out_dir / 'report.html'}; log: {result.log_path}",
        ]
    )


def format_table(runs: list[dict[str, Any]], comparisons: list[dict[str, Any]]) -> str:
    """report.json's runs and comparisons, as its document has them (RunResult.report), side by side."""
    head = (
        f"{'policy':<28}{'success':>9}{'95% CI':>14}{'coll.':>7}{'t/o':>6}{'act Hz':>9}{'rtt p50':>9}{'p95':>8}{'p99':>8}"
        f"{'infer p50':>10}{'p99':>8}{'ovh p50':>9}{'RSS MB':>8}{'peak MB':>8}{'model MB':>9}{'misses':>7}{'outages':>8}"
    )
    lines = [head, "-" * len(head)]
    for r in runs:
        o, m = r["outcomes"], r["device_memory"]
        lo, hi = o["success_ci95"]
        lines.append(
            f"{short_name(r['policy']):<28}{o['success_rate']:>9.1%}{f'{lo:.0%}-{hi:.0%}':>14}{o['collision_rate']:>7.1%}{o['timeout_rate']:>6.1%}"
            f"{r['actuation_hz']:>9,.0f}{r['round_trip_us']['p50']:>9.0f}{r['round_trip_us']['p95']:>8.0f}{r['round_trip_us']['p99']:>8.0f}"
            f"{r['device_inference_us']['p50']:>10.1f}{r['device_inference_us']['p99']:>8.1f}{r['overhead_us']['p50']:>9.0f}"
            f"{m['rss_bytes'] / 2**20:>8.1f}{m['peak_rss_bytes'] / 2**20:>8.1f}{(r['model_bytes'] or 0) / 2**20:>9.2f}{r['deadline_misses']:>7}{r['reliability']['outages']:>8}"
        )
    lines.append(
        "latencies in microseconds; act Hz = closed-loop actuation rate; ovh = round trip minus device inference; "
        "misses = acts past their deadline (hover applied instead)"
    )
    for r in runs:
        rel = r["reliability"]
        counted = ("deadline_misses", "outages", "retries", "reconnects", "vehicle_link_errors", "pilot_acts")
        if any(rel.get(k) for k in counted):
            lines.append(
                f"{short_name(r['policy'])}: {rel['deadline_misses']} deadline misses (deadline {rel['deadline_ms'] or 0:.0f} ms), "
                f"{rel['outages']} outage(s) {rel['outage_s']:.2f} s, {rel.get('retries', 0)} retries, "
                f"{rel.get('reconnects', 0)} reconnects, {rel.get('stale_replies', 0)} stale replies dropped, "
                f"{rel['bridge_restarts']} bridge restart(s), {rel['policy_reuploads']} policy re-upload(s), "
                f"{rel.get('vehicle_link_errors') or 0} act(s) refused with the autopilot link lost, "
                f"{rel.get('pilot_acts') or 0} answered with a pilot in control (nothing sent); "
                f"episodes spanning an outage: {rel['episodes_spanning_outage'] or 'none'}"
            )
    for c in comparisons:
        d = c["success_difference"]
        diff = (
            f"success {d['diff']:+.1%} ({d['low']:+.1%}..{d['high']:+.1%}, McNemar p={d['mcnemar_p']:.2f})"
            if d
            else "success: episodes differ"
        )
        lines.append(
            f"{short_name(c['policy'])} vs {short_name(c['against'])}: speed-up {_x(c['inference_speedup'])} (device inference p50), "
            f"actuation rate {_x(c['actuation_rate_ratio'])}, memory saving {_x(c['peak_rss_ratio'])} (peak RSS), "
            f"model {_x(c['model_size_ratio'])} smaller file; {diff}"
        )
    return "\n".join(lines)


def _x(v: float | None) -> str:
    return shown(v or None, ".2f", "x")  # a ratio of zero is a missing measurement
