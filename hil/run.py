"""Run policies on the device inside the control loop and report what they achieve.

    python -m hil.run --policy policy3_int8.onnx --host raspberrypi.local [--port 5555]
    python -m hil.run --policy models/policy1_fp32.onnx --policy models/policy1_int8.onnx --sim-only

The host flies the embedded simulator; every observation goes to the bridge (firmware_bridge) over
ZeroMQ, the device's action comes back and is applied. With --sim-only the bridge is started here as
a separate process with mock flight-controller hardware, optionally under a Pi-like resource profile
(configs/hil/profiles.toml). Every policy meets the same seeded episodes, so results pair up.
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from firmware_bridge.launcher import BridgeProcess, BridgeStartError
from hil.client import BridgeClient, BridgeError
from hil.loop import LoopRecord, run_closed_loop
from hil.profiles import DeviceProfile, ProfileError, get_profile
from hil.report import compare, format_table, summarize_run, write_report
from nav_env.backends import BACKENDS, make_env
from nav_env.config import ConfigError, NavConfig, load_level

USAGE_EXIT, FAILURE_EXIT = 2, 1


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
    backend: str = "embedded"  # simulator: embedded or airsim
    airsim_host: str = "127.0.0.1"
    airsim_port: int = 41451
    device_arch: str = "native"  # --sim-only: native, or aarch64 (the bridge under qemu emulation)
    timeout_s: float = 1.0  # per request, before a retry
    out: str = "out/hil"
    quiet: bool = False


class UserError(Exception):
    """A mistake in the command line or its files: one line, exit 2."""


def parse_args(argv: list[str] | None) -> RunArgs:
    p = argparse.ArgumentParser(prog="python -m hil.run", description=__doc__.split("\n")[0])
    p.add_argument("--policy", action="append", required=True, metavar="FILE", help="ONNX policy; repeat to compare (the first is the baseline)")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--host", help="the device running `python -m firmware_bridge.serve` (name or address)")
    where.add_argument("--sim-only", action="store_true", help="run the bridge here as a local process with mock hardware")
    p.add_argument("--port", type=int, default=5555)
    p.add_argument("--profile", default="native", help="--sim-only resource profile (configs/hil/profiles.toml)")
    p.add_argument("--threads", type=int, help="onnxruntime threads of the local bridge")
    p.add_argument("--episodes", type=int, default=20)
    p.add_argument("--level", default="default")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rate-hz", type=float, help="pace the loop at this rate (default: free-running)")
    p.add_argument("--backend", choices=BACKENDS, default="embedded", help="simulator backend (default: embedded)")
    p.add_argument("--airsim-host", default="127.0.0.1", help="AirSim / Cosys-AirSim server (with --backend airsim)")
    p.add_argument("--airsim-port", type=int, default=41451)
    p.add_argument("--device-arch", choices=("native", "aarch64"), default="native",
                   help="--sim-only: run the bridge natively or as aarch64 under qemu (proves the Arm stack, not Pi timing)")
    p.add_argument("--timeout", dest="timeout_s", type=float, default=1.0, help="seconds per request before a retry")
    p.add_argument("--out", default="out/hil")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return RunArgs(**vars(p.parse_args(argv)))


def check_args(args: RunArgs) -> tuple[NavConfig, DeviceProfile]:
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
    try:
        cfg = load_level(args.level)
        profile = get_profile(args.profile)
    except (ConfigError, ProfileError) as e:
        raise UserError(str(e)) from None
    return cfg, profile


class Device:
    """The bridge for one policy: a fresh local process per policy with --sim-only (so memory
    figures belong to that policy alone), or the remote device."""

    def __init__(self, args: RunArgs, profile: DeviceProfile):
        self.args, self.profile = args, profile
        self.process: BridgeProcess | None = None

    def __enter__(self) -> BridgeClient:
        a = self.args
        if a.sim_only:
            threads = a.threads or self.profile.threads
            self.process = BridgeProcess(["--threads", str(threads), "--actuator", "mock"])
            if a.device_arch == "aarch64":
                from hil.arm import emulated_bridge_command  # prepares (or reuses) the arm64 root filesystem

                self.process.args = emulated_bridge_command(self.process.args[1:])
            self.process.args = self.profile.launch_prefix() + self.process.args
            self.process.start()
            endpoint = self.process.endpoint
        else:
            host = f"[{a.host}]" if ":" in a.host and not a.host.startswith("[") else a.host
            endpoint = f"tcp://{host}:{a.port}"
        self.client = BridgeClient(endpoint, timeout_s=a.timeout_s)
        return self.client

    def __exit__(self, *exc) -> None:
        self.client.close() if hasattr(self, "client") else None
        if self.process is not None:
            self.process.close()


def run(args: RunArgs) -> int:
    cfg, profile = check_args(args)
    out_dir = Path(args.out)
    report: dict = {
        "command": " ".join(["python -m hil.run", *sys.argv[1:]]),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "args": asdict(args),
        "mode": "sim-only (local bridge process, mock flight controller)" if args.sim_only else f"device {args.host}:{args.port}",
        "profile": asdict(profile) | {"emulated": profile.emulated()} if args.sim_only else None,
        "level": cfg.level,
        "obs_dim": cfg.obs_dim,
        "device": None,
        "runs": [],
        "comparisons": [],
    }
    records: list[LoopRecord] = []
    try:
        options = {"host": args.airsim_host, "port": args.airsim_port} if args.backend == "airsim" else {}
        env = make_env(cfg, args.backend, render_mode="rgb_array", **options)
    except (ValueError, RuntimeError) as e:
        raise UserError(str(e)) from None
    report["backend"] = args.backend
    for path in args.policy:
        with Device(args, profile) as client:
            hello = client.hello()
            report["device"] = report["device"] or {k: hello.get(k) for k in ("device", "bridge_version", "version", "threads", "actuator")}
            load = client.load_policy(path)
            if load.get("obs_dim") not in (None, cfg.obs_dim):
                raise UserError(f"policy {path} takes {load.get('obs_dim')} observations but level {cfg.level!r} gives {cfg.obs_dim}")
            rec = run_closed_loop(client, cfg, args.episodes, args.seed, args.rate_hz, on_episode=_progress(path, args), env=env)
        _end_progress(args)
        records.append(rec)
        report["runs"].append(summarize_run(path, rec, load))
        report["comparisons"] = compare(report["runs"])
        write_report(out_dir, report, records, report["runs"])  # after each policy: nothing measured is lost
    print(_header(report))
    print(format_table(report["runs"], report["comparisons"]))
    print(f"report: {out_dir / 'report.json'} (+ latency_histogram.png, memory_over_time.png, trajectory_*.png)")
    return 0


def _header(report: dict) -> str:
    d = (report["device"] or {}).get("device") or {}
    where = report["mode"] + (f", profile {report['profile']['name']}: {report['profile']['emulated']}" if report["profile"] else "")
    return (f"{where}\ndevice: {d.get('cpu_model') or d.get('machine')} ({d.get('cores')} cores), onnxruntime "
            f"{d.get('onnxruntime_version')}; level {report['level']}, {report['args']['episodes']} "
            f"episodes from seed {report['args']['seed']}, " + (f"paced at {report['args']['rate_hz']} Hz" if report["args"]["rate_hz"] else "free-running"))


_bar = None


def _progress(path: str, args: RunArgs):
    global _bar
    if args.quiet:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    _bar = tqdm(total=args.episodes, desc=Path(path).name, unit="ep", file=sys.stderr, leave=False)

    def update(ep, rec: LoopRecord) -> None:
        n = len(rec.episodes)
        _bar.set_postfix(hz=f"{len(rec.rtt_ns) / max(rec.loop_s, 1e-9):,.0f}", success=f"{sum(e.success for e in rec.episodes) / n:.0%}")
        _bar.update(1)

    return update


def _end_progress(args: RunArgs) -> None:
    global _bar
    if _bar is not None:
        _bar.close()
        _bar = None


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    try:
        return run(args)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return USAGE_EXIT
    except (BridgeError, BridgeStartError) as e:
        print(f"error: {e}", file=sys.stderr)
        return FAILURE_EXIT
    except KeyboardInterrupt:
        print("interrupted: results of finished policies are in the report", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
