"""hil.run's command line: the arguments of a run (:class:`RunArgs`, also the library's input) and their parser."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field, fields

from airq_cli import ArgumentParser, add_arguments, arg, flag_of, output_dir
from firmware_bridge.mavlink_link import ENDPOINT_FORMS
from hil.loop import MAX_OUTAGE_S
from nav_env.backends import DEFAULT_BACKEND, backend_names, get_backend


def _backends_help() -> str:
    return "where the policy flies: " + "; ".join(f"{b}: {get_backend(b).help}" for b in backend_names())


@dataclass
class RunArgs:
    """hil.run's arguments; each field's flag, help and check is in its :func:`airq_cli.arg` metadata."""

    policy: list[str] = field(
        default_factory=list,
        metadata=arg("ONNX policy; repeat to compare (the first is the baseline)", metavar="FILE", required=True),
    )
    host: str | None = field(
        default=None, metadata=arg("the device running `python -m firmware_bridge.serve` (name or address)")
    )
    sim_only: bool = field(default=False, metadata=arg("run the bridge here as a local process with mock hardware"))
    port: int = 5555
    profile: str = field(default="native", metadata=arg("--sim-only resource profile (device_emulation/profiles.toml)"))
    threads: int | None = field(
        default=None, metadata=arg("onnxruntime threads of the local bridge (default: the profile's)")
    )
    episodes: int = 20
    level: str = "default"
    seed: int = 0
    rate_hz: float | None = field(
        default=None, metadata=arg("pace the loop at this rate, deadline misses counted (default: free-running)")
    )
    backend: str = field(default=DEFAULT_BACKEND, metadata=arg(_backends_help, choices=backend_names))
    dynamics: str | None = field(
        default=None,
        metadata=arg(
            "--backend mujoco: the vehicle's dynamics file (default nav_env/dynamics/iris.toml; e.g. "
            "configs/dynamics/x500.toml, or iris_randomized.toml to draw each episode's physics; docs/dynamics.md)",
            metavar="TOML",
        ),
    )
    airsim_host: str = field(default="127.0.0.1", metadata=arg("AirSim / Cosys-AirSim server (with --backend airsim)"))
    airsim_port: int = 41451
    airsim_scene: str | None = field(
        default=None,
        metadata=arg("file describing the AirSim map's obstacles (docs/airsim.md); without it episodes have none"),
    )
    airsim_lockstep: bool = field(default=False, metadata=arg("pause AirSim between control steps"))
    telemetry: str | None = field(
        default=None,
        metadata=arg(
            "--backend autopilot: this host's MAVLink link to the autopilot, as a ground station's "
            f"({ENDPOINT_FORMS}; docs/autopilot.md)",
            metavar="ENDPOINT",
        ),
    )
    fc: str | None = field(
        default=None,
        metadata=arg(
            "--sim-only --backend autopilot: the local bridge's link to the autopilot (its --fc, the same forms as "
            "--telemetry)",
            metavar="ENDPOINT",
        ),
    )
    fc_signing_key: str | None = field(
        default=None,
        metadata=arg(
            "--sim-only --backend autopilot: the local bridge signs its autopilot link with this MAVLink 2 key file "
            "(its --fc-signing-key; docs/autopilot.md)",
            metavar="FILE",
        ),
    )
    takeoff_m: float | None = field(
        default=None,
        metadata=arg(
            "--backend autopilot: arm and take off to ALT metres through the bridge's vehicle commands, then "
            "switch to GUIDED (ArduPilot) / OFFBOARD (PX4); without it the vehicle must already fly in that mode",
            metavar="ALT",
        ),
    )
    preflight_timeout_s: float = field(
        default=180.0, metadata=arg("--backend autopilot: for the vehicle to arm, climb and switch mode")
    )
    device_arch: str = field(
        default="native",
        metadata=arg(
            "--sim-only: run the bridge natively or as aarch64 under qemu (proves the Arm stack, not Pi timing)",
            choices=("native", "aarch64"),
        ),
    )
    timeout_s: float = field(default=1.0, metadata=arg("seconds per request before a retry", flag="--timeout"))
    deadline_ms: float | None = field(
        default=None,
        metadata=arg(
            "act deadline; a miss flies hover for that step "
            "(default: 80%% of the control period, --rate-hz or the simulator's dt)"
        ),
    )
    max_outage_s: float = field(default=MAX_OUTAGE_S, metadata=arg("give up after this long without the bridge"))
    max_steps: int | None = field(
        default=None, metadata=arg("episode length limit (default: the level's task.max_steps)")
    )
    bridge_key: str | None = field(
        default=None, metadata=arg("CurveZMQ: the bridge's public key (bridge.key); with --client-key", metavar="FILE")
    )
    client_key: str | None = field(
        default=None, metadata=arg("CurveZMQ: this host's key pair (host.key_secret)", metavar="FILE")
    )
    timing: str = field(
        default="lockstep",
        metadata=arg(
            "lockstep: the simulated world waits while the device computes; latency: it keeps flying, each "
            "action lands its act's delay after the observation (--rate-hz sets the simulated control period; "
            "docs/latency.md)",
            choices=("lockstep", "latency"),
        ),
    )
    latency: str = field(
        default="measured",
        metadata=arg(
            "--timing latency: each act's delay: measured (its round trip), fixed:MS, replay:REPORT.json "
            "(resampled from an earlier run's round trips, e.g. a real Pi's) or profile:BOARD (each model's time "
            "predicted for a board of device_emulation/profiles.toml, e.g. profile:pi3b: a prediction)",
            metavar="SOURCE",
        ),
    )
    device_rate: bool = field(
        default=False,
        metadata=arg("--timing latency: no fixed period; the next observation is taken when the action lands"),
    )
    out: str = field(
        default="out/hil", metadata=arg("folder for run.jsonl, report.json and the figures", type=output_dir)
    )
    quiet: bool = field(default=False, metadata=arg("no progress bar"))
    resume: bool = False  # continuing the run logged in ``out`` (``--resume DIR``, hil.resume)

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
            if f.name not in ("policy", "resume") and value != getattr(default, f.name):
                words += [flag_of(f)] if value is True else [flag_of(f), str(value)]
        return shlex.join(words)


def parse_args(argv: list[str] | None) -> RunArgs:
    p = ArgumentParser(
        prog="python -m hil.run",
        description="Run policies on the device inside the control loop and report what they achieve.",
        epilog="python -m hil.run --resume DIR [--quiet] continues an interrupted run from DIR/run.jsonl "
        "(same arguments, same seeds, finished episodes skipped).",
    )
    where = p.add_mutually_exclusive_group(required=True)
    add_arguments(p, RunArgs, skip=("resume",), groups={"host": where, "sim_only": where})
    return RunArgs(**vars(p.parse_args(argv)))
