"""Run policies on the device inside the control loop and report what they achieve.

    python -m hil.run --policy policy3_int8.onnx --host raspberrypi.local [--port 5555]
    python -m hil.run --policy models/policy1_fp32.onnx --policy models/policy1_int8.onnx --sim-only
    python -m hil.run --resume out/hil        # continue an interrupted run where it stopped
    python -m hil.run --policy models/policy1_int8.onnx --sim-only --backend autopilot --level easy \
        --fc tcp:127.0.0.1:5760 --telemetry tcp:127.0.0.1:5762 --takeoff-m 5   # ArduCopter SITL (docs/autopilot.md)

The host flies the embedded simulator; every observation goes to the bridge (firmware_bridge) over
ZeroMQ, the device's action comes back and is applied. With --sim-only the bridge is started here as
a separate process with mock flight-controller hardware, optionally under a Pi-like resource profile
(device_emulation/profiles.toml). Every policy meets the same seeded episodes, so results pair up.

Every act has a deadline (--deadline-ms, default 80% of the control period); a miss flies the
fail-safe (hover) for that step. Episodes go to OUT/run.jsonl (fsync'd) as they end, so an
interrupted run loses nothing finished and --resume continues it; see docs/reliability.md.
"""

from __future__ import annotations

import shlex
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import airq_cli
from airq_cli import EXIT_FAILURE, EXIT_INTERRUPTED, error_line
from airq_cli.journal import read_journal
from firmware_bridge.client import BridgeError
from firmware_bridge.launcher import BridgeStartError
from hil.args import RunArgs, parse_args
from hil.autopilot import VehicleNotReady
from hil.orchestrate import RunProgress, RunResult, fly_run
from hil.printing import CommandLineProgress, describe
from hil.resume import RUN_LOG, parse_resume_args
from hil.setup import check_args
from nav_env.autopilot import AutopilotLinkError


def run(args: RunArgs, *, command: str, progress: RunProgress | None = None) -> RunResult:
    """Fly every policy of ``args`` over the same seeded episodes and write OUT/report.json (+ figures),
    logging each episode to OUT/run.jsonl as it ends. ``command`` is what the report records as the
    command that produced it (the CLI passes what the user typed; a study passes ``args.command_line()``).
    Prints nothing; raises UserError for bad arguments, BridgeError/BridgeStartError when the device fails."""
    return fly_run(check_args(args), command, progress or RunProgress())


def _terminate(signum: int, frame: Any) -> None:
    # SIGTERM takes the same way out as Ctrl-C: the local bridge is stopped, the log is closed.
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    return airq_cli.run(_main, sys.argv[1:] if argv is None else argv)  # a UserError: one line, exit 2


def _main(argv: list[str] | None) -> int:
    argv = argv or []
    args = parse_resume_args(argv) if "--resume" in argv else parse_args(argv)
    if threading.current_thread() is threading.main_thread():  # signal handlers live in the main thread only
        signal.signal(signal.SIGTERM, _terminate)
    log_path = Path(args.out) / RUN_LOG
    resume_hint = f"finished episodes are in {log_path}; continue with: python -m hil.run --resume {args.out}"

    def episodes_logged() -> bool:
        return log_path.exists() and any(r.get("kind") == "episode" for r in read_journal(log_path)[0])

    try:
        progress = CommandLineProgress(args.quiet)
        result = run(args, command=shlex.join(["python", "-m", "hil.run", *argv]), progress=progress)
    except (BridgeError, BridgeStartError, AutopilotLinkError, VehicleNotReady) as e:
        print(error_line(e), file=sys.stderr)
        if episodes_logged():
            print(resume_hint, file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        # Before its first episode a run has left no log (its Journal is created with the first episode): nothing to resume.
        print(
            f"interrupted: {resume_hint}"
            if episodes_logged()
            else f"interrupted before any episode was recorded: nothing written to {args.out}",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    print(describe(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
