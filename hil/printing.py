"""What hil.run's command line shows: progress as a run goes (a bar on a terminal, plain lines otherwise) and, when
it ends, where it flew, on what, the side-by-side table and the files written."""

from __future__ import annotations

import sys
from pathlib import Path

from airq_cli import Progress
from firmware_bridge.device import format_versions
from hil.loop import LoopRecord
from hil.orchestrate import RunProgress, RunResult
from hil.report import format_table
from nav_env.backends import DEFAULT_BACKEND, get_backend


def _int8_line(d: dict) -> str:
    from firmware_bridge.int8_kernels import Int8Kernels

    return "device " + Int8Kernels.from_dict(d.get("int8_kernels") or {}).describe()


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
    world = get_backend(report.get("backend", DEFAULT_BACKEND)).world
    return (
        report["mode"]
        + (f", profile {profile['name']}: {profile['emulated']}" if profile else "")
        + f"\ndevice: {d.get('cpu_model') or d.get('machine')} ({d.get('cores')} cores), onnxruntime "
        f"{d.get('onnxruntime_version')}; {world}, level {report['level']}, {args['episodes']} episodes from seed "
        f"{args['seed']}, {_timing_line(report)}\n{_int8_line(d)}\n"
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
