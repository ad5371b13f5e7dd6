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

import json
import shlex
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import gymnasium as gym

from airq_cli import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    ArgumentParser,
    Progress,
    UserError,
    defaults_from,
    error_line,
    output_dir,
)
from device_emulation.profiles import DeviceProfile, ProfileError, get_profile
from device_emulation.roofline import model_cost, predict_device, prediction_record
from firmware_bridge.client import BridgeClient, BridgeError
from firmware_bridge.device import format_versions, package_versions
from firmware_bridge.keys import ClientCurve, KeyFileError
from firmware_bridge.launcher import BridgeProcess, BridgeStartError
from firmware_bridge.mavlink_link import ENDPOINT_FORMS, parse_endpoint
from firmware_bridge.protocol import sha256_hex
from hil.autopilot import VehicleNotReady, prepare_vehicle
from hil.loop import (
    MAX_OUTAGE_S,
    ControlLink,
    Event,
    Latency,
    Lockstep,
    LoopRecord,
    LoopTiming,
    PolicyUpload,
    default_deadline_s,
    run_closed_loop,
)
from hil.report import (
    RUN_LOG,
    RUN_LOG_VERSION,
    PolicyResult,
    PolicySummary,
    Report,
    RunLog,
    format_table,
    read_run_log,
    record_from_rows,
    repair_run_log,
    report_row,
    summarize_run,
    write_report,
)
from nav_env.autopilot import AutopilotLinkError, AutopilotNavEnv
from nav_env.backends import DEFAULT_BACKEND, backend_names, get_backend
from nav_env.config import ConfigError, NavConfig, load_level
from nav_env.latency import LatencySource, parse_latency
from nav_env.rollout import EpisodeResult


@dataclass
class RunArgs:
    policy: list[str] = field(default_factory=list)
    host: str | None = None  # the device's name or address
    port: int = 5555
    sim_only: bool = False  # start a local bridge with mock hardware instead
    profile: str = "native"  # --sim-only resource profile
    threads: int | None = None  # onnxruntime threads on a local bridge (default: the profile's)
    episodes: int = 20
    level: str = "default"
    seed: int = 0
    rate_hz: float | None = None  # pace the loop; deadline misses are counted
    backend: str = DEFAULT_BACKEND  # where the policy flies (nav_env.backends)
    airsim_host: str = "127.0.0.1"
    airsim_port: int = 41451
    airsim_scene: str | None = None  # TOML/JSON description of the map's obstacles (nav_env.airsim.scene)
    airsim_lockstep: bool = False  # pause the simulator between steps
    telemetry: str | None = None  # --backend autopilot: the ground station's MAVLink link to the autopilot
    fc: str | None = None  # --sim-only --backend autopilot: the local bridge's link to the autopilot (--fc)
    takeoff_m: float | None = None  # --backend autopilot: arm and take off to this altitude through the bridge
    preflight_timeout_s: float = 180.0  # --backend autopilot: for the vehicle to arm, climb and switch mode
    device_arch: str = "native"  # --sim-only: native, or aarch64 (the bridge under qemu emulation)
    timeout_s: float = 1.0  # per request, before a retry
    deadline_ms: float | None = None  # per act; default: 80% of the control period
    max_outage_s: float = MAX_OUTAGE_S  # give up after this long without the bridge
    max_steps: int | None = None  # override the level's episode length
    bridge_key: str | None = None  # CurveZMQ: the bridge's public key file (NAME.key)
    client_key: str | None = None  # CurveZMQ: this host's key pair file (NAME.key_secret)
    timing: str = "lockstep"  # lockstep: the world waits for each act; latency: it keeps flying (docs/latency.md)
    latency: str = "measured"  # --timing latency: measured, fixed:MS or replay:REPORT.json
    device_rate: bool = False  # --timing latency: each step lasts until the action lands
    out: str = "out/hil"
    quiet: bool = False
    resume: bool = False  # continuing the run logged in ``out``

    def command_line(self) -> str:
        """The ``python -m hil.run`` command that runs exactly these arguments (what a report records)."""
        if self.resume:
            return shlex.join(["python", "-m", "hil.run", "--resume", self.out, *(["--quiet"] if self.quiet else [])])
        words = ["python", "-m", "hil.run"]
        for path in self.policy:
            words += ["--policy", path]
        default = RunArgs()
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("policy", "resume") or value == getattr(default, f.name):
                continue
            flag = "--" + ("timeout" if f.name == "timeout_s" else f.name.replace("_", "-"))
            words += [flag] if value is True else [flag, str(value)]
        return shlex.join(words)


@dataclass(frozen=True)
class RunResult:
    """What :func:`run` did: the report it wrote (the JSON document of report.json) and where."""

    out_dir: Path
    report: dict[str, Any]
    already_complete: bool = False  # a finished run resumed: nothing flown, report.json left as it was
    notes: tuple[str, ...] = ()  # things done on the user's behalf (an earlier log kept beside)
    warnings: tuple[str, ...] = ()  # e.g. an int8 scheme the device's kernels do not compute exactly

    @property
    def report_path(self) -> Path:
        return self.out_dir / "report.json"

    @property
    def log_path(self) -> Path:
        return self.out_dir / RUN_LOG


class RunProgress:
    """Where :func:`run` reports as it goes; the default says nothing (a library prints nothing).
    The command line passes one that draws a bar on a terminal and plain lines otherwise."""

    def note(self, text: str) -> None:
        """Something the user should know now (a warning, an earlier log kept)."""

    def policy_started(self, path: str, episodes: int) -> None:
        pass

    def episode_done(self, record: LoopRecord) -> None:
        pass

    def policy_ended(self) -> None:
        pass


def parse_args(argv: list[str] | None) -> RunArgs:
    p = ArgumentParser(
        prog="python -m hil.run",
        description=__doc__.split("\n")[0],
        epilog="python -m hil.run --resume DIR [--quiet] continues an interrupted run from DIR/run.jsonl "
        "(same arguments, same seeds, finished episodes skipped).",
    )
    p.add_argument(
        "--policy",
        action="append",
        required=True,
        metavar="FILE",
        help="ONNX policy; repeat to compare (the first is the baseline)",
    )
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--host", help="the device running `python -m firmware_bridge.serve` (name or address)")
    where.add_argument(
        "--sim-only", action="store_true", help="run the bridge here as a local process with mock hardware"
    )
    p.add_argument("--port", type=int)
    p.add_argument("--profile", help="--sim-only resource profile (device_emulation/profiles.toml)")
    p.add_argument("--threads", type=int, help="onnxruntime threads of the local bridge")
    p.add_argument("--episodes", type=int)
    p.add_argument("--level")
    p.add_argument("--seed", type=int)
    p.add_argument("--rate-hz", type=float, help="pace the loop at this rate (default: free-running)")
    p.add_argument(
        "--backend",
        choices=backend_names(),
        help="where the policy flies: " + "; ".join(f"{b}: {get_backend(b).help}" for b in backend_names()),
    )
    p.add_argument("--airsim-host", help="AirSim / Cosys-AirSim server (with --backend airsim)")
    p.add_argument("--airsim-port", type=int)
    p.add_argument(
        "--airsim-scene",
        help="file describing the AirSim map's obstacles (docs/airsim.md); without it episodes have none",
    )
    p.add_argument("--airsim-lockstep", action="store_true", help="pause AirSim between control steps")
    p.add_argument(
        "--telemetry",
        metavar="ENDPOINT",
        help="--backend autopilot: this host's MAVLink link to the autopilot, as a ground station's "
        f"({ENDPOINT_FORMS}; docs/autopilot.md)",
    )
    p.add_argument(
        "--fc",
        metavar="ENDPOINT",
        help="--sim-only --backend autopilot: the local bridge's link to the autopilot (its --fc, the same forms as "
        "--telemetry)",
    )
    p.add_argument(
        "--takeoff-m",
        type=float,
        metavar="ALT",
        help="--backend autopilot: arm and take off to ALT metres through the bridge's vehicle commands, then "
        "switch to GUIDED (ArduPilot) / OFFBOARD (PX4); without it the vehicle must already fly in that mode",
    )
    p.add_argument(
        "--preflight-timeout-s", type=float, help="--backend autopilot: for the vehicle to arm, climb and switch mode"
    )
    p.add_argument(
        "--device-arch",
        choices=("native", "aarch64"),
        help="--sim-only: run the bridge natively or as aarch64 under qemu (proves the Arm stack, not Pi timing)",
    )
    p.add_argument("--timeout", dest="timeout_s", type=float, help="seconds per request before a retry")
    p.add_argument(
        "--deadline-ms",
        type=float,
        help="act deadline; a miss flies hover for that step "
        "(default: 80%% of the control period, --rate-hz or the simulator's dt)",
    )
    p.add_argument("--max-outage-s", type=float, help="give up after this long without the bridge")
    p.add_argument("--max-steps", type=int, help="episode length limit (default: the level's task.max_steps)")
    p.add_argument(
        "--bridge-key", metavar="FILE", help="CurveZMQ: the bridge's public key (bridge.key); with --client-key"
    )
    p.add_argument("--client-key", metavar="FILE", help="CurveZMQ: this host's key pair (host.key_secret)")
    p.add_argument(
        "--timing",
        choices=("lockstep", "latency"),
        help="lockstep: the simulated world waits while the device computes; latency: it keeps flying, each "
        "action lands its act's delay after the observation (--rate-hz sets the simulated control period)",
    )
    p.add_argument(
        "--latency",
        metavar="SOURCE",
        help="--timing latency: each act's delay: measured (its round trip), fixed:MS, replay:REPORT.json "
        "(resampled from an earlier run's round trips, e.g. a real Pi's) or profile:BOARD (each model's time "
        "predicted for a board of device_emulation/profiles.toml, e.g. profile:pi3b: a prediction)",
    )
    p.add_argument(
        "--device-rate",
        action="store_true",
        help="--timing latency: no fixed period; the next observation is taken when the action lands",
    )
    p.add_argument("--out", type=output_dir, help="folder for run.jsonl, report.json and the figures")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    defaults_from(p, RunArgs)  # each default written once, in RunArgs
    return RunArgs(**vars(p.parse_args(argv)))


def parse_resume_args(argv: list[str]) -> RunArgs:
    """``--resume DIR [--quiet]``: everything else comes from DIR/run.jsonl's header."""
    p = ArgumentParser(prog="python -m hil.run --resume", description="Continue an interrupted run.")
    p.add_argument(
        "--resume", required=True, type=output_dir, metavar="DIR", help="output directory of the interrupted run"
    )
    p.add_argument("--quiet", action="store_true")
    ns = p.parse_args(argv)
    log_path = Path(ns.resume) / RUN_LOG
    if not log_path.is_file():
        raise UserError(f"nothing to resume: {log_path} does not exist")
    records, _ = read_run_log(log_path)
    header = next((r for r in records if r.get("kind") == "run"), None)
    if header is None or header.get("log_version") != RUN_LOG_VERSION:
        raise UserError(f"{log_path} has no run header this version understands")
    known = {f.name for f in fields(RunArgs)}
    values = {k: v for k, v in header["args"].items() if k in known}
    args = RunArgs(**values | {"out": ns.resume, "quiet": ns.quiet, "resume": True})
    for entry in header["policies"]:
        path = Path(entry["path"])
        if not path.is_file():
            raise UserError(f"cannot resume: policy file {path} is gone")
        if sha256_hex(path.read_bytes()) != entry["sha256"]:
            raise UserError(f"cannot resume: policy file {path} changed since the run started (sha256 differs)")
    return args


@dataclass(frozen=True)
class LatencyTiming:
    """``--timing latency``, resolved: each policy's delay in --policy order (a replay's run of that model
    picked, a profile's time for that model predicted), and what the report says of the whole."""

    spec: str  # --latency as given
    policies: tuple[Latency, ...]
    rate_hz: float | None  # --rate-hz: the simulated control period here, not a pace on the wall clock
    device_rate: bool

    def describe(self) -> dict[str, Any]:
        return {"mode": "latency", "source": self.spec, "device_rate": self.device_rate, "rate_hz": self.rate_hz}

    def for_policy(self, index: int) -> Latency:
        """The delay source of the policy at ``index``."""
        return self.policies[index]


Timing = Lockstep | LatencyTiming  # --timing: the simulated world waits for each act, or keeps flying


@dataclass(frozen=True)
class RunSetup:
    """What :func:`check_args` resolves from the arguments, once; every later decision reads it."""

    cfg: NavConfig
    profile: DeviceProfile
    timing: Timing
    deadline_s: float  # per act
    pace_hz: float | None  # the loop's pace on the wall clock (None: free-running)


def check_args(args: RunArgs) -> RunSetup:
    """The level, the resource profile, the timing (with --timing latency each policy's delay source, resolved
    once here: a replay picks its run, a profile predicts the model's time) and the act deadline; UserError
    for a bad argument."""
    for path in args.policy:
        if not Path(path).is_file():
            raise UserError(f"policy file not found: {path}")
    if args.episodes < 1:
        raise UserError(f"--episodes must be >= 1, got {args.episodes}")
    if args.rate_hz is not None and args.rate_hz <= 0:
        raise UserError(f"--rate-hz must be positive, got {args.rate_hz}")
    if not 0 < args.port < 65536:
        raise UserError(f"--port must be in 1..65535, got {args.port}")
    if args.timeout_s <= 0:
        raise UserError(f"--timeout must be positive, got {args.timeout_s}")
    if args.threads is not None and args.threads < 1:
        raise UserError(f"--threads must be >= 1, got {args.threads}")
    if args.host is not None and args.device_arch != "native":
        raise UserError("--device-arch applies to --sim-only runs")
    if args.host is not None and args.profile != "native":
        raise UserError("--profile applies to --sim-only runs; a real device is its own profile")
    if args.deadline_ms is not None and args.deadline_ms <= 0:
        raise UserError(f"--deadline-ms must be positive, got {args.deadline_ms}")
    if args.max_outage_s <= 0:
        raise UserError(f"--max-outage-s must be positive, got {args.max_outage_s}")
    if args.max_steps is not None and args.max_steps < 1:
        raise UserError(f"--max-steps must be >= 1, got {args.max_steps}")
    if (args.bridge_key is None) != (args.client_key is None):
        raise UserError("--bridge-key and --client-key go together (the bridge's public key and this host's key pair)")
    if args.bridge_key is not None and args.sim_only:
        raise UserError("--bridge-key/--client-key apply to --host runs (a --sim-only bridge is local)")
    _check_backend(args)
    timing = _check_timing(args)
    try:
        cfg = load_level(args.level, {"task.max_steps": args.max_steps} if args.max_steps else None)
        profile = get_profile(args.profile)
    except (ConfigError, ProfileError) as e:
        raise UserError(str(e)) from None
    if args.deadline_ms:
        deadline_s = args.deadline_ms / 1e3
    elif isinstance(timing, LatencyTiming):
        deadline_s = args.timeout_s  # a late action is flown late, not replaced: only a lost one is a miss
    else:
        deadline_s = default_deadline_s(cfg, args.rate_hz)
    # with latency the simulated clock runs apart from the wall's: --rate-hz is its period, nothing paces the loop
    pace_hz = None if isinstance(timing, LatencyTiming) else args.rate_hz
    return RunSetup(cfg, profile, timing, deadline_s, pace_hz)


def _check_backend(args: RunArgs) -> None:
    """The backend's arguments: a real vehicle's links and takeoff with a backend that flies one and with no other;
    nothing that paces the loop for a backend in its vehicle's own clock."""
    backend = get_backend(args.backend)
    if backend.own_clock and (args.timing != "lockstep" or args.rate_hz is not None):
        raise UserError(
            f"--backend {backend.name} flies in the {backend.name}'s clock: no --timing latency, no --rate-hz"
        )
    if not backend.flies_real_vehicle:
        given = [flag for flag, value in (("--telemetry", args.telemetry), ("--fc", args.fc),
                                          ("--takeoff-m", args.takeoff_m)) if value is not None]  # fmt: skip
        if given:
            raise UserError(
                f"{', '.join(given)} {'apply' if len(given) > 1 else 'applies'} to --backend "
                + " or ".join(backend_names(flies_real_vehicle=True))
            )
        return
    if args.telemetry is None:
        raise UserError("--backend autopilot needs --telemetry ENDPOINT: this host's MAVLink link to the autopilot")
    if args.sim_only and args.fc is None:
        raise UserError("--sim-only --backend autopilot needs --fc ENDPOINT: the local bridge's link to the autopilot")
    if args.host is not None and args.fc is not None:
        raise UserError("--fc applies to --sim-only runs: a device's bridge has its own --fc")
    if args.sim_only and args.device_arch != "native":
        raise UserError("--backend autopilot runs the local bridge natively (--device-arch native)")
    if args.takeoff_m is not None and not 0.5 <= args.takeoff_m <= 120:
        raise UserError(f"--takeoff-m must be within 0.5..120 m, got {args.takeoff_m}")
    if args.preflight_timeout_s <= 0:
        raise UserError(f"--preflight-timeout-s must be positive, got {args.preflight_timeout_s}")
    for flag, spec in (("--telemetry", args.telemetry), ("--fc", args.fc)):
        if spec is not None:
            try:
                parse_endpoint(spec)
            except ValueError as e:
                raise UserError(f"{flag}: {e}") from None


def _check_timing(args: RunArgs) -> Timing:
    """--timing, --latency and --device-rate as one value; a replay's report is read once, here."""
    if args.timing == "lockstep":
        if args.latency != "measured" or args.device_rate:
            raise UserError("--latency and --device-rate apply to --timing latency")
        return Lockstep()
    if not get_backend(args.backend).in_process:
        raise UserError(
            "--timing latency needs a simulator nav_env runs (--backend "
            + " or ".join(backend_names(in_process=True))
            + ")"
        )
    if args.device_rate and args.rate_hz is not None:
        raise UserError("--device-rate and --rate-hz are two different periods: give one")
    source = parse_latency(args.latency)  # one-line error for a bad source
    sources = [policy_latency(source, path) for path in args.policy]
    if args.device_rate and any(s.kind in ("fixed", "profile") and s.fixed_s == 0 for s in sources):
        raise UserError("--device-rate with a delay of 0 would never let time pass")
    period_s = 1.0 / args.rate_hz if args.rate_hz else None
    return LatencyTiming(
        spec=args.latency,
        policies=tuple(Latency(s, period_s=period_s, device_rate=args.device_rate) for s in sources),
        rate_hz=args.rate_hz,
        device_rate=args.device_rate,
    )


def policy_latency(source: LatencySource, path: str) -> LatencySource:
    """A ``--latency`` source for one policy: a replay takes the report's run of the same model, a profile
    predicts this model's time on the board (device_emulation.roofline; a prediction, labelled so)."""
    onnx = Path(path).read_bytes()
    if source.kind != "profile":
        return source.for_policy(sha256_hex(onnx), Path(path).name)
    try:
        board = get_profile(str(source.profile))
        cost = model_cost(onnx)
    except ProfileError as e:
        raise UserError(f"--latency profile: {e}") from None
    except ValueError as e:
        raise UserError(f"--latency profile:{source.profile}: {path}: {e}") from None
    pred = predict_device(cost, board)
    if pred.missing or pred.predicted_s is None:
        raise UserError(
            f"--latency profile:{board.name} has no prediction for {path}: the profile lacks "
            + (", ".join(pred.missing) or "roofline figures")
        )
    return source.predicted(pred.predicted_s, prediction_record(cost, pred, board))


class LocalBridgeSupervisor:
    """--sim-only: notices that the local bridge process died and starts a new one on the same port.

    Called from the control loop (main thread) on every missed act; the restart does not wait for
    the new process, the client reconnects by itself once it listens.
    """

    def __init__(self, process: BridgeProcess, min_interval_s: float = 1.0) -> None:
        self.process = process
        self.min_interval_s = min_interval_s  # a bridge that dies at once is not restarted in a tight loop
        self._last_restart = 0.0

    def check(self) -> Event | None:
        if self.process.alive or time.monotonic() - self._last_restart < self.min_interval_s:
            return None
        old_pid = self.process.pid
        exit_code = self.process.process.returncode if self.process.process else None
        self._last_restart = time.monotonic()
        self.process.restart(wait=False)
        return {"event": "bridge_restarted", "old_pid": old_pid, "exit_code": exit_code, "pid": self.process.pid}


class Device:
    """The bridge for one policy: a fresh local process per policy with --sim-only (so memory
    figures belong to that policy alone), or the remote device."""

    def __init__(self, args: RunArgs, profile: DeviceProfile):
        self.args, self.profile = args, profile
        self.process: BridgeProcess | None = None

    def supervisor(self) -> LocalBridgeSupervisor | None:
        return LocalBridgeSupervisor(self.process) if self.process is not None else None

    def __enter__(self) -> BridgeClient:
        a = self.args
        if a.sim_only:
            threads = a.threads or self.profile.threads
            actuator = ["--actuator", "mavlink", "--fc", a.fc] if a.fc else ["--actuator", "mock"]
            self.process = BridgeProcess(["--threads", str(threads), *actuator])
            if a.device_arch == "aarch64":
                from device_emulation.arm import (
                    emulated_bridge_command,  # prepares (or reuses) the arm64 root filesystem
                )

                self.process.args = emulated_bridge_command(self.process.args[1:])
            self.process.args = self.profile.launch_prefix() + self.process.args
            self.process.start()
            endpoint = self.process.endpoint
        else:
            assert a.host is not None  # check_args: --host or --sim-only
            host = f"[{a.host}]" if ":" in a.host and not a.host.startswith("[") else a.host
            endpoint = f"tcp://{host}:{a.port}"
        curve = None
        if a.bridge_key and a.client_key:
            try:
                curve = ClientCurve.from_files(a.client_key, a.bridge_key)
            except KeyFileError as e:
                raise UserError(str(e)) from None
        self.client = BridgeClient(endpoint, timeout_s=a.timeout_s, curve=curve)
        return self.client

    def __exit__(self, *exc) -> None:
        self.client.close() if hasattr(self, "client") else None
        if self.process is not None:
            self.process.close()


def run(args: RunArgs, *, command: str, progress: RunProgress | None = None) -> RunResult:
    """Fly every policy of ``args`` over the same seeded episodes and write OUT/report.json (+ figures),
    logging each episode to OUT/run.jsonl as it ends. ``command`` is what the report records as the
    command that produced it (the CLI passes what the user typed; a study passes ``args.command_line()``).
    Prints nothing; raises UserError for bad arguments, BridgeError/BridgeStartError when the device fails."""
    progress = progress or RunProgress()
    notes: list[str] = []

    def note(text: str) -> None:
        notes.append(text)
        progress.note(f"note: {text}")

    setup = check_args(args)
    out_dir = Path(args.out)
    policy_bytes = [Path(path).read_bytes() for path in args.policy]
    log_path = out_dir / RUN_LOG
    earlier = (
        EarlierSessions.read(log_path, len(args.policy)) if args.resume else EarlierSessions.none(len(args.policy))
    )
    done = earlier.rows
    finished_all = args.resume and all(len({r["episode"] for r in rows}) >= args.episodes for rows in done.values())
    existing = _read_report(out_dir / "report.json") if finished_all else None
    if existing is not None and _report_matches(existing, policy_bytes, done):
        # Nothing left to fly: no bridge, and the report the run wrote stays as it is.
        return RunResult(out_dir, existing, already_complete=True)
    # The log is created with the first episode, not before: a run that fails before flying anything
    # (a user error, no bridge) leaves no log, and an earlier run's log stays where it is, resumable.
    log = RunLog(
        log_path, deferred=True, on_create=None if args.resume else lambda: _keep_earlier_log(log_path, out_dir, note)
    )
    report = Report(
        command=command,
        date=time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        args=asdict(args),
        mode=(
            f"sim-only (local bridge process, MAVLink to the autopilot at {args.fc})"
            if args.fc
            else "sim-only (local bridge process, mock flight controller)"
        )
        if args.sim_only
        else f"device {args.host}:{args.port}",
        profile=asdict(setup.profile) | {"emulated": setup.profile.emulated()} if args.sim_only else None,
        level=setup.cfg.level,
        obs_dim=setup.cfg.obs_dim,
        deadline_ms=setup.deadline_s * 1e3,
        # lockstep: the world waited for each act; latency: each action landed its act's delay late
        timing=setup.timing.describe(),
        run_log=str(log_path),
        host_versions=package_versions(),
        device=None,
        runs=[],
        comparisons=[],
        backend=args.backend,
    )
    if args.resume:
        log.append(
            {"kind": "resume", "t_wall": time.time(), "finished": {str(i): len(v) for i, v in done.items()}},
            durable=False,
        )
    else:
        log.append(
            {
                "kind": "run",
                "log_version": RUN_LOG_VERSION,
                "args": asdict(args),
                "command": command,
                "t_wall": time.time(),
                "deadline_ms": setup.deadline_s * 1e3,
                "policies": [{"path": p, "sha256": sha256_hex(b)} for p, b in zip(args.policy, policy_bytes)],
            },
            durable=False,
        )
    flights = Flights(args, setup, log, progress)
    results: list[PolicyResult] = []
    written = False
    try:
        for index, (path, onnx) in enumerate(zip(args.policy, policy_bytes)):
            finished = {row["episode"] for row in done[index]}
            todo = [j for j in range(args.episodes) if j not in finished]
            if not todo:
                # Finished in an earlier session: its summary comes from the log (the one that session
                # measured, or rebuilt from the episode rows); flying nothing would only measure nothing.
                summary = earlier.summary(index, path, onnx, setup.deadline_s)
                results.append(PolicyResult(summary, record_from_rows(done[index]), device=earlier.device.get(index)))
                written = False
                continue
            flight = PolicyFlight(index, path, onnx, todo, setup.timing.for_policy(index))
            flown = flights.fly_policy(flight)
            summary = summarize_run(path, flown.record, flown.load, prior_rows=done[index], deadline_s=setup.deadline_s)
            results.append(
                PolicyResult(
                    summary,
                    flown.record,
                    device=flown.device,
                    warning=flown.warning,
                    timing=None if isinstance(flight.timing, Lockstep) else flight.timing.describe(),
                )
            )
            report = replace(report.with_policies(results), vehicle=flights.vehicle())
            # The policy's summary goes to the log too (fsync'd): a resume takes it from there, not from
            # report.json, which may be missing (killed before writing it) or another run's.
            log.append(
                {
                    "kind": "policy_end",
                    "policy": path,
                    "policy_index": index,
                    "device": report.device,
                    "episodes": sorted(finished | set(todo)),
                    "summary": summary.to_json(episodes=False),
                }
            )
            write_report(out_dir, report, [r.record for r in results])  # after each policy: nothing measured is lost
            written = True
        if not written:  # the last policies were finished earlier: the report rebuilt from the log
            report = report.with_policies(results)
            write_report(out_dir, report, [r.record for r in results])
    finally:
        log.close()
    return RunResult(out_dir, report.to_json(), notes=tuple(notes), warnings=tuple(report.warnings))


def _make_env(args: RunArgs, cfg: NavConfig) -> gym.Env:
    backend = get_backend(args.backend)
    try:
        return backend.make_env(cfg, "rgb_array", backend.options_from(vars(args)))
    except (ValueError, RuntimeError) as e:
        raise UserError(str(e)) from None


def _keep_earlier_log(log_path: Path, out_dir: Path, note: Callable[[str], None]) -> None:
    """Called when a new run records its first episode: an earlier log in ``out_dir`` is kept beside."""
    if not log_path.exists():
        return
    if not any(r.get("kind") == "episode" for r in read_run_log(log_path)[0]):
        log_path.unlink()  # a run that flew nothing (killed before its first episode, older versions): nothing to keep
        return
    # A new run never destroys an old log: it is kept beside, e.g. run.20260101-120000.jsonl.
    kept = log_path.with_name(f"run.{time.strftime('%Y%m%d-%H%M%S', time.localtime(log_path.stat().st_mtime))}.jsonl")
    log_path.rename(kept)
    note(f"previous run log kept as {kept} (use --resume {out_dir} to continue a run instead)")


@dataclass
class EarlierSessions:
    """What the sessions before a --resume left in the log, by policy index."""

    rows: dict[int, list[dict[str, Any]]]  # episode rows
    ends: dict[int, dict[str, Any]] = field(default_factory=dict)  # policy_end records (summary as measured)
    loads: dict[int, dict[str, Any]] = field(default_factory=dict)  # the bridge's load_policy replies
    device: dict[int, Any] = field(default_factory=dict)

    @classmethod
    def none(cls, n: int) -> EarlierSessions:
        return cls({i: [] for i in range(n)})

    @classmethod
    def read(cls, log_path: Path, n: int) -> EarlierSessions:
        earlier = cls.none(n)
        for r in repair_run_log(log_path):
            index = int(r.get("policy_index") or 0)  # every record with one of these kinds names its policy
            if r.get("kind") == "episode":
                earlier.rows[index].append({k: v for k, v in r.items() if k not in ("kind", "policy", "policy_index")})
            elif r.get("kind") == "policy_end":
                earlier.ends[index] = r
                earlier.device[index] = r.get("device")
            elif r.get("kind") == "event" and r.get("event") == "policy_loaded":
                earlier.loads[index] = r.get("load") or {}
        return earlier

    def summary(self, index: int, path: str, onnx: bytes, deadline_s: float) -> PolicySummary:
        """A finished policy's summary: the one its session wrote to the log, with the episode rows;
        if that session was killed before writing it, rebuilt from the rows (latency from their samples)."""
        rows = sorted(self.rows[index], key=lambda r: r["episode"])
        end = self.ends.get(index)
        if end is not None and end.get("episodes") == [r["episode"] for r in rows]:
            return PolicySummary.from_json(end["summary"] | {"episodes": [report_row(r) for r in rows]})
        load = {"sha256": sha256_hex(onnx), "size_bytes": len(onnx)} | self.loads.get(index, {})
        return summarize_run(path, LoopRecord(), load, prior_rows=rows, deadline_s=deadline_s)


def _read_report(path: Path) -> dict[str, Any] | None:
    """report.json's document, or None if there is none to read."""
    try:
        report = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return report if isinstance(report, dict) else None


def _report_matches(report: dict[str, Any], policy_bytes: list[bytes], done: dict[int, list[dict[str, Any]]]) -> bool:
    """Whether ``report`` holds every policy of this run with every episode in the log."""
    try:
        runs = report.get("runs") or []
        return len(runs) == len(policy_bytes) and all(
            run.get("sha256") == sha256_hex(onnx)
            and [e.get("episode") for e in run.get("episodes") or []] == sorted(r["episode"] for r in done[i])
            for i, (run, onnx) in enumerate(zip(runs, policy_bytes))
        )
    except (AttributeError, TypeError):  # not a report this version wrote
        return False


@dataclass(frozen=True)
class PolicyFlight:
    """One policy to fly in this session."""

    index: int  # in --policy order
    path: str
    onnx: bytes
    episodes: list[int]  # those not flown in an earlier session
    timing: LoopTiming


@dataclass(frozen=True)
class Flown:
    """What flying one policy gave: the loop's record and what the bridge said on the way."""

    record: LoopRecord
    load: dict[str, Any]  # the bridge's load_policy reply
    device: dict[str, Any]  # the bridge's hello: device, versions, threads, actuator
    warning: str | None  # e.g. an int8 scheme the device's kernels do not compute exactly


class Flights:
    """What every policy of a session flies with: the arguments, their resolved setup, the simulator (made
    at the first flight, then flown by every policy), the log and the progress display."""

    def __init__(self, args: RunArgs, setup: RunSetup, log: RunLog, progress: RunProgress) -> None:
        self.args, self.setup, self.log, self.progress = args, setup, log, progress
        self._env: gym.Env | None = None
        self._warned: set[str] = set()  # a warning is noted once per run, however many policies it concerns
        self._preflights: list[dict[str, Any]] = []  # --backend autopilot: getting the vehicle ready, per policy
        self._autopilot_status: dict[str, Any] | None = None  # the bridge's actuator map after the last policy

    def vehicle(self) -> dict[str, Any] | None:
        """--backend autopilot: which autopilot, firmware and frame flew, its clock's speed, what getting it ready
        took (report.json's ``vehicle``); None on a simulator."""
        if not isinstance(self._env, AutopilotNavEnv):
            return None
        return {**self._env.describe(), "preflight": self._preflights, "bridge_actuator": self._autopilot_status}

    def fly_policy(self, flight: PolicyFlight) -> Flown:
        """Start (or reach) the bridge, load the policy, fly its episodes, log each as it ends."""
        args, cfg, log, path, onnx = self.args, self.setup.cfg, self.log, flight.path, flight.onnx
        # the autopilot's vehicle is reached through the bridge, which the env needs running first (ArduPilot SITL
        # starts its firmware only when its first serial port has a client: the bridge)
        if self._env is None and not get_backend(args.backend).bridge_first:
            self._env = _make_env(args, cfg)
        self.progress.policy_started(path, len(flight.episodes))
        with (device := Device(args, self.setup.profile)) as client:

            def log_event(event: Event) -> None:
                log.append(event, durable=False)  # visible to readers at once; only episodes need fsync

            if device.process is not None:
                log_event(
                    {
                        "kind": "event",
                        "event": "bridge_started",
                        "policy": path,
                        "pid": device.process.pid,
                        "endpoint": device.process.endpoint,
                        "t_mono": time.monotonic(),
                        "t_wall": time.time(),
                    }
                )
            hello = client.hello()
            load = client.load_policy(onnx, name=Path(path).name)
            log_event(
                {
                    "kind": "event",
                    "event": "policy_loaded",
                    "policy": path,
                    "policy_index": flight.index,
                    "load": load,
                    "t_mono": time.monotonic(),
                    "t_wall": time.time(),
                }
            )  # model size, load time: for a rebuilt summary
            warning = _int8_warning(path, load.get("metadata") or {}, (hello.get("device") or {}).get("int8_kernels"))
            if warning is not None and warning not in self._warned:
                self._warned.add(warning)
                self.progress.note(f"warning: {warning}")
            if load.get("obs_dim") not in (None, cfg.obs_dim):
                raise UserError(
                    f"policy {path} takes {load.get('obs_dim')} observations but level {cfg.level!r} gives {cfg.obs_dim}"
                )
            if load.get("sha256") != sha256_hex(onnx):
                raise BridgeError(
                    client.endpoint,
                    f"bridge reports sha256 {load.get('sha256')} for {path}, expected {sha256_hex(onnx)}",
                )
            deadline_s = self.setup.deadline_s
            if self._env is None:
                self._env = _make_env(args, cfg)
            if isinstance(self._env, AutopilotNavEnv):
                preflight = prepare_vehicle(
                    client, self._env, args.takeoff_m, args.preflight_timeout_s, lambda text: self.progress.note(text)
                )
                self._preflights.append(preflight.to_json())
                # the deadline is a share of the autopilot's control period: a SITL running faster shortens it
                deadline_s /= self._env.telemetry.speedup() or 1.0
            link = ControlLink(
                client,
                deadline_s,
                PolicyUpload(onnx, Path(path).name),
                supervisor=device.supervisor(),
                on_event=log_event,
                max_outage_s=args.max_outage_s,
            )
            link.context["policy"] = path

            def on_episode(ep: EpisodeResult, rec: LoopRecord) -> None:
                log.append(
                    {
                        "kind": "episode",
                        "policy": path,
                        "policy_index": flight.index,
                        **asdict(ep),
                        **rec.episode_rows[-1],
                    }
                )
                self.progress.episode_done(rec)

            rec = run_closed_loop(
                client,
                cfg,
                flight.episodes,
                args.seed,
                rate_hz=self.setup.pace_hz,
                on_episode=on_episode,
                env=self._env,
                link=link,
                deadline_s=deadline_s,
                timing=flight.timing,
            )
            if isinstance(self._env, AutopilotNavEnv):
                self._autopilot_status = rec.status_end.get("actuator")
        self.progress.policy_ended()
        device_info = {k: hello.get(k) for k in ("device", "bridge_version", "version", "threads", "actuator")}
        return Flown(rec, load, device_info, warning)


def _int8_warning(path: str, metadata: dict, device_kernels: dict | None) -> str | None:
    """Why the device's kernels do not compute a policy's int8 scheme exactly, or None if they do."""
    from firmware_bridge.int8_kernels import Int8Kernels, saturation_warning

    warning = saturation_warning(metadata, Int8Kernels.from_dict(device_kernels or {}))
    return f"{Path(path).name}: {warning}" if warning else None


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


def _world(report: dict) -> str:
    return get_backend(report.get("backend", DEFAULT_BACKEND)).world


def _header(report: dict) -> str:
    d = (report["device"] or {}).get("device") or {}
    where = report["mode"] + (
        f", profile {report['profile']['name']}: {report['profile']['emulated']}" if report["profile"] else ""
    )
    return (
        f"{where}\ndevice: {d.get('cpu_model') or d.get('machine')} ({d.get('cores')} cores), onnxruntime "
        f"{d.get('onnxruntime_version')}; {_world(report)}, level {report['level']}, "
        f"{report['args']['episodes']} "
        f"episodes from seed {report['args']['seed']}, "
        + _timing_line(report)
        + f"\n{_int8_line(d)}\nhost versions: {format_versions(report.get('host_versions') or {})}"
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


def _terminate(signum: int, frame: Any) -> None:
    # SIGTERM takes the same way out as Ctrl-C: the local bridge is stopped, the log is closed.
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = parse_resume_args(argv) if "--resume" in argv else parse_args(argv)
    except SystemExit as e:  # argparse: --help, or a bad flag already reported in one line
        return int(e.code or 0)
    except UserError as e:
        print(error_line(e), file=sys.stderr)
        return EXIT_USAGE
    if threading.current_thread() is threading.main_thread():  # signal handlers live in the main thread only
        signal.signal(signal.SIGTERM, _terminate)
    resume_hint = (
        f"finished episodes are in {Path(args.out) / RUN_LOG}; continue with: python -m hil.run --resume {args.out}"
    )

    def episodes_logged() -> bool:
        path = Path(args.out) / RUN_LOG
        return path.exists() and any(r.get("kind") == "episode" for r in read_run_log(path)[0])

    try:
        result = run(
            args, command=shlex.join(["python", "-m", "hil.run", *argv]), progress=CommandLineProgress(args.quiet)
        )
        print(describe(result))
        return 0
    except UserError as e:
        print(error_line(e), file=sys.stderr)
        return EXIT_USAGE
    except (BridgeError, BridgeStartError, AutopilotLinkError, VehicleNotReady) as e:
        print(error_line(e), file=sys.stderr)
        if episodes_logged():
            print(resume_hint, file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        # Before its first episode a run has left no log (hil.report.RunLog is deferred): nothing to resume.
        print(
            f"interrupted: {resume_hint}"
            if episodes_logged()
            else f"interrupted before any episode was recorded: nothing written to {args.out}",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
