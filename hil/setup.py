"""A run's arguments checked once and resolved into a :class:`RunSetup`, which every later decision reads: the
level, where the bridge runs (a :class:`LocalBridge` process or a :class:`RemoteBridge` device), each policy's
timing and the act deadline."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from airq_cli import UserError, flag_of
from device_emulation.profiles import DeviceProfile, ProfileError, get_profile
from device_emulation.roofline import model_cost, predict_device, prediction_record
from firmware_bridge.mavlink_link import parse_endpoint
from firmware_bridge.protocol import sha256_hex
from hil.args import RunArgs
from hil.loop import LOCKSTEP, Timing, default_deadline_s
from nav_env.backends import backend_names, dynamics_for, get_backend
from nav_env.config import (
    ConfigError,
    NavConfig,
    load_level,
    observation_overrides_from_metadata,
    with_policy_observation,
)
from nav_env.latency import LatencySource, parse_latency


@dataclass(frozen=True)
class LocalBridge:
    """``--sim-only``: the bridge runs here, a fresh process for each policy (so memory figures belong to that
    policy alone) under a resource profile; its flight controller is mock hardware, or with ``fc`` an autopilot."""

    profile: DeviceProfile
    threads: int  # onnxruntime threads: --threads, else the profile's
    device_arch: str = "native"  # or aarch64: the bridge under qemu emulation
    fc: str | None = None  # --backend autopilot: the bridge's MAVLink link to the autopilot (its --fc)
    fc_signing_key: str | None = None  # ... signed with this key file (its --fc-signing-key)

    @property
    def mode(self) -> str:
        """How report.json's ``mode`` names where the bridge ran."""
        if self.fc:
            return f"sim-only (local bridge process, MAVLink to the autopilot at {self.fc})"
        return "sim-only (local bridge process, mock flight controller)"


@dataclass(frozen=True)
class RemoteBridge:
    """``--host``: the bridge a device serves (``python -m firmware_bridge.serve``); a real device is its own
    profile."""

    host: str  # name or address
    port: int
    keys: tuple[str, str] | None = None  # CurveZMQ: this host's key pair file, the bridge's public key file

    @property
    def endpoint(self) -> str:
        host = f"[{self.host}]" if ":" in self.host and not self.host.startswith("[") else self.host
        return f"tcp://{host}:{self.port}"

    @property
    def mode(self) -> str:
        return f"device {self.host}:{self.port}"


BridgeTarget = LocalBridge | RemoteBridge  # where the bridge runs


@dataclass(frozen=True)
class RunSetup:
    """What :func:`check_args` resolves from the arguments, once; every later decision reads it."""

    args: RunArgs
    cfg: NavConfig
    target: BridgeTarget
    timings: tuple[Timing, ...]  # each policy's, in --policy order
    deadline_s: float  # per act
    pace_hz: float | None  # the loop's pace on the wall clock (None: free-running)

    def describe_timing(self) -> dict[str, Any]:
        """report.json's ``timing``: the world waited for each act (lockstep), or each action landed late."""
        a = self.args
        if a.timing == "lockstep":
            return {"mode": "lockstep"}
        return {"mode": "latency", "source": a.latency, "device_rate": a.device_rate, "rate_hz": a.rate_hz}


_FIELDS = {f.name: f for f in fields(RunArgs)}
_COUNTS = ("episodes", "threads", "max_steps")  # at least 1 when given
_POSITIVE = ("rate_hz", "timeout_s", "deadline_ms", "max_outage_s")


def check_args(args: RunArgs) -> RunSetup:
    """The level, where the bridge runs, each policy's timing (with --timing latency its delay source, resolved
    once here: a replay picks its run, a profile predicts the model's time) and the act deadline; UserError
    for a bad argument."""
    for path in args.policy:
        if not Path(path).is_file():
            raise UserError(f"policy file not found: {path}")
    for name in _COUNTS + _POSITIVE:
        value, count = getattr(args, name), name in _COUNTS
        if value is not None and (value < 1 if count else value <= 0):  # None: not given
            raise UserError(f"{flag_of(_FIELDS[name])} must be {'>= 1' if count else 'positive'}, got {value}")
    if not 0 < args.port < 65536:
        raise UserError(f"--port must be in 1..65535, got {args.port}")
    if args.host is not None and args.device_arch != "native":
        raise UserError("--device-arch applies to --sim-only runs")
    if args.host is not None and args.profile != "native":
        raise UserError("--profile applies to --sim-only runs; a real device is its own profile")
    if (args.bridge_key is None) != (args.client_key is None):
        raise UserError("--bridge-key and --client-key go together (the bridge's public key and this host's key pair)")
    if args.bridge_key is not None and args.sim_only:
        raise UserError("--bridge-key/--client-key apply to --host runs (a --sim-only bridge is local)")
    _check_backend(args)
    timings = _check_timing(args)
    try:
        cfg = load_level(args.level, {"task.max_steps": args.max_steps} if args.max_steps else None)
        cfg = with_policy_observation(cfg, shared_observation(args.policy))
        profile = get_profile(args.profile)
    except (ConfigError, ProfileError) as e:
        raise UserError(str(e)) from None
    latency = args.timing == "latency"
    if args.deadline_ms:
        deadline_s = args.deadline_ms / 1e3
    elif latency:
        deadline_s = args.timeout_s  # a late action is flown late, not replaced: only a lost one is a miss
    else:
        deadline_s = default_deadline_s(cfg, args.rate_hz)
    # with latency the simulated clock runs apart from the wall's: --rate-hz is its period, nothing paces the loop
    pace_hz = None if latency else args.rate_hz
    return RunSetup(args, cfg, _target(args, profile), timings, deadline_s, pace_hz)


def policy_metadata(path: str) -> dict[str, str]:
    """A policy file's ``airq.*`` metadata (its observation among them); UserError if it is not an ONNX model."""
    # deferred: onnx, ~0.2 s to import; the weights are parsed with the graph
    import onnx

    try:
        props = onnx.load(path, load_external_data=False).metadata_props
    except Exception as e:  # onnx raises DecodeError and others for a file that is not a model
        raise UserError(f"{path}: not a loadable ONNX model ({type(e).__name__})") from None
    return {p.key: p.value for p in props}


def observation_key(metadata: dict[str, str]) -> str:
    """The observation a policy with this metadata takes, described (equal for policies that see alike)."""
    overrides = observation_overrides_from_metadata(metadata)
    return ", ".join(f"{k}={v}" for k, v in sorted(overrides.items())) or "the level's own"


def shared_observation(paths: list[str]) -> dict[str, str]:
    """The metadata of the first policy, whose observation (camera, attitude values) the run's simulator gives every
    policy (the env is made once per run); UserError if the policies were trained on different observations."""
    seen: dict[str, str] = {}  # each observation described -> the first policy taking it
    first: dict[str, str] = {}
    for path in paths:
        meta = policy_metadata(path)
        first = first or meta
        seen.setdefault(observation_key(meta), path)
    if len(seen) > 1:
        which = "; ".join(f"{path}: {described}" for described, path in seen.items())
        raise UserError(f"the policies were trained on different observations ({which}): fly them in separate runs")
    return first


def _target(args: RunArgs, profile: DeviceProfile) -> BridgeTarget:
    if args.sim_only:
        return LocalBridge(profile, args.threads or profile.threads, args.device_arch, args.fc, args.fc_signing_key)
    if args.host is None:
        raise UserError("give --host HOST or --sim-only: where the bridge runs")
    keys = (args.client_key, args.bridge_key) if args.bridge_key and args.client_key else None
    return RemoteBridge(args.host, args.port, keys)


def _check_backend(args: RunArgs) -> None:
    """The backend's arguments: a real vehicle's links and takeoff with a backend that flies one and with no other;
    nothing that paces the loop for a backend in its vehicle's own clock."""
    backend = get_backend(args.backend)
    try:
        dynamics_for(backend.name, args.dynamics)  # a bad file is a one-line error before the bridge starts
    except ConfigError as e:
        raise UserError(str(e)) from None
    if backend.own_clock and (args.timing != "lockstep" or args.rate_hz is not None):
        raise UserError(
            f"--backend {backend.name} flies in the {backend.name}'s clock: no --timing latency, no --rate-hz"
        )
    if not backend.flies_real_vehicle:
        given = [flag for flag, value in (("--telemetry", args.telemetry), ("--fc", args.fc),
                                          ("--fc-signing-key", args.fc_signing_key), ("--takeoff-m", args.takeoff_m))
                 if value is not None]  # fmt: skip
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
    if args.host is not None and args.fc_signing_key is not None:
        raise UserError("--fc-signing-key applies to --sim-only runs: a device's bridge has its own")
    if args.fc_signing_key is not None and not Path(args.fc_signing_key).is_file():
        raise UserError(f"--fc-signing-key: {args.fc_signing_key} is not a file")
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


def _check_timing(args: RunArgs) -> tuple[Timing, ...]:
    """--timing, --latency and --device-rate as each policy's timing; a replay's report is read once, here."""
    if args.timing == "lockstep":
        if args.latency != "measured" or args.device_rate:
            raise UserError("--latency and --device-rate apply to --timing latency")
        return (LOCKSTEP,) * len(args.policy)
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
    return tuple(Timing(s, period_s=period_s, device_rate=args.device_rate) for s in sources)


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
