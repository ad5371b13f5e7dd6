"""hil.run's command line: the arguments of a run (:class:`RunArgs`, also the library's input) and their parser."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field, fields

from airq_cli import ArgumentParser, defaults_from, output_dir
from firmware_bridge.mavlink_link import ENDPOINT_FORMS
from hil.loop import MAX_OUTAGE_S
from nav_env.backends import DEFAULT_BACKEND, backend_names, get_backend


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


def parse_args(argv: list[str] | None) -> RunArgs:
    p = ArgumentParser(
        prog="python -m hil.run",
        description="Run policies on the device inside the control loop and report what they achieve.",
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
