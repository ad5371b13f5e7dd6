"""The deployment study (QuaRL Table 4 / Figure 4, our way): every policy at every precision in the loop.

    python -m deployment_study --sim-only --profile pi3b --episodes 100 --levels default hard --out out/study
    python -m deployment_study --host raspberrypi.local --profile pi3b --out out/study-pi
    python -m deployment_study --sim-only --models a_fp32.onnx a_int8.onnx --episodes 5 --out /tmp/s

For each policy group (models named GROUP_PRECISION.onnx, PRECISION one of fp32, fp16, int8,
int8-dynamic; default: the 12 shipped models) and each level:

1. closed loop: hil.run flies all of the group's models over the same seeded episodes (a fresh
   bridge process per model with --sim-only, so each memory figure belongs to one model), which gives
   success with Wilson intervals, the paired difference against fp32 (McNemar), device inference
   p50/p99, actuation rate and device memory over time;
2. timing pass (once per group, after its closed loops): the device runs N acts per model on
   observations recorded from the levels, the models interleaved round by round, so the speed-up
   ratio is not at the mercy of one noisy stretch of time;
3. roofline (deployment_study.roofline): with --sim-only this machine's bandwidth and compute throughput are
   measured (pinned to one core like the bridge) and each model's predicted time is checked against
   its measured timing-pass p50; only where they agree within 2x is a prediction shown for the
   real Pi boards of hil/profiles.toml ("predicted on Pi (roofline)");
4. memory (deployment_study.memory_stage; on with a sim-only profile that has a memory size, e.g. pi3b, off with
   --no-memory-study): Policy III widened to Air Learning's 144 x 256 depth image (615 MB fp32) and its
   static int8 (cached by sha256), flown by deployment_study.memfit unconstrained and in memory cgroups at the
   profile's RAM with and without swap and at 512 MB: does it load, how fast, how much swap. Needs root
   and a memory cgroup controller, else "skipped: <reason>". With --host the device's own RAM is the
   experiment: its total RAM and each model's RSS are reported.

Outputs in --out: study.json, study.md (tables ready to paste, with the seed's numbers beside ours),
latency.png, memory_over_time.png, success.png; per-cell results under cells/ as they finish
(hil.run's report.json + run.jsonl), so an interrupted study loses no finished episode: run the same
command again and it continues.

Adding a section: a stage is a function (Study) -> None that stores its results in ``study.data``
(run it from :meth:`Study.run`), and a markdown section is a function (data) -> str appended to
``MARKDOWN_SECTIONS``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from airq_cli import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    ArgumentParser,
    defaults_from,
    error_line,
    output_dir,
    write_atomic,
    write_json,
)
from deployment_study import memory_stage, roofline
from deployment_study.seed import TABLE4
from deployment_study.seed import label as policy_label
from firmware_bridge.client import BridgeClient, BridgeError
from firmware_bridge.device import format_versions, package_versions
from firmware_bridge.launcher import BridgeProcess, BridgeStartError
from hil.profiles import DeviceProfile, ProfileError, get_profile, load_profiles
from hil.report import percentiles_us, read_run_log, save_figure
from hil.run import CommandLineProgress, RunArgs, UserError
from hil.run import run as hil_run
from nav_env.config import ConfigError, load_level
from nav_env.stats import wilson_interval

USAGE_EXIT, FAILURE_EXIT = EXIT_USAGE, EXIT_FAILURE  # the names callers and tests use
PRECISIONS = ("fp32", "fp16", "int8", "int8-dynamic")
ROOT = Path(__file__).resolve().parents[1]
SHIPPED = [ROOT / "models" / f"policy{i}_{p}.onnx" for i in (1, 2, 3) for p in PRECISIONS]
STUDY_VERSION = 1


@dataclass
class StudyArgs:
    models: list[str] = field(default_factory=lambda: [str(p) for p in SHIPPED])
    host: str | None = None
    port: int = 5555
    sim_only: bool = False
    profile: str | None = None  # sim-only: the resource profile; --host: the board whose roofline figures apply
    episodes: int = 100
    levels: list[str] = field(default_factory=lambda: ["default", "hard"])
    seed: int = 0
    timing_acts: int = 200  # acts per model per round of the timing pass
    timing_rounds: int = 10
    out: str = "out/study"
    quiet: bool = False
    # the memory stage (deployment_study.memory_stage): None = on with --host (report) and with a sim-only profile that has a memory size
    memory_study: bool | None = None
    memory_source: str = str(memory_stage.DEFAULT_SOURCE)
    memory_camera: str = "144x256"
    memory_limits: list[str] | None = None  # MB[:SWAP_MB]; None: the profile's size with swap, without, and 512 MB
    memory_swap_mb: int = 2048
    memory_episodes: int = 5
    memory_thrash_acts: int = 8
    memory_calibration_episodes: int = 20
    memory_cache: str = str(memory_stage.DEFAULT_CACHE)


def parse_args(argv: list[str] | None) -> StudyArgs:
    p = ArgumentParser(prog="python -m deployment_study", description=__doc__.split("\n")[0])
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--host", help="the device running `python -m firmware_bridge.serve` (name or address)")
    where.add_argument(
        "--sim-only", action="store_true", help="run each bridge here as a local process with mock hardware"
    )
    p.add_argument("--port", type=int)
    p.add_argument(
        "--profile",
        help="--sim-only: resource profile (hil/profiles.toml; default native); "
        "--host: the board, for its roofline figures",
    )
    p.add_argument(
        "--models",
        nargs="+",
        metavar="FILE",
        help="ONNX models named GROUP_PRECISION.onnx "
        f"(PRECISION: {', '.join(PRECISIONS)}); each group needs its fp32 (default: the 12 shipped models)",
    )
    p.add_argument("--episodes", type=int, help="seeded episodes per model and level")
    p.add_argument("--levels", nargs="+")
    p.add_argument("--seed", type=int)
    p.add_argument("--timing-acts", type=int, help="timing pass: acts per model per round")
    p.add_argument("--timing-rounds", type=int, help="timing pass: rounds (models interleaved in each)")
    p.add_argument("--out", type=output_dir, help="folder for study.json, study.md, the figures and cells/")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    m = p.add_argument_group("memory stage (does an Air Learning-sized Policy III fit the device's RAM? docs/study.md)")
    m.add_argument(
        "--memory-study",
        action=argparse.BooleanOptionalAction,
        help="run it (default: with --host, a report of the device's RAM; sim-only, when the profile has a memory size)",
    )
    m.add_argument(
        "--memory-source",
        metavar="FILE",
        help="fp32 policy to widen to the large camera (default: models/policy3_fp32.onnx)",
    )
    m.add_argument("--memory-camera", metavar="HxW", help="large depth image (default: Air Learning's 144x256)")
    m.add_argument(
        "--memory-limits",
        nargs="+",
        metavar="MB[:SWAP_MB]",
        help="RAM limits (default: the profile's size with swap, without swap, and 512 MB with swap)",
    )
    m.add_argument("--memory-swap-mb", type=int, help="swap of a limit that does not give its own")
    m.add_argument("--memory-episodes", type=int, help="seeded episodes per memory run")
    m.add_argument(
        "--memory-thrash-acts",
        type=int,
        help="acts flown under a limit at or below the model's weight bytes (each pages the weights back in)",
    )
    m.add_argument("--memory-calibration-episodes", type=int, help="calibration episodes of the large model's int8")
    m.add_argument(
        "--memory-cache",
        metavar="DIR",
        help="where the large models are kept between studies (default .cache/study-memory)",
    )
    defaults_from(p, StudyArgs)  # each default written once, in StudyArgs
    p.set_defaults(models=None)  # shown as "the 12 shipped models", filled in below
    ns = vars(p.parse_args(argv))
    if ns["models"] is None:
        ns["models"] = [str(m) for m in SHIPPED]
    return StudyArgs(**ns)


@dataclass(frozen=True)
class Model:
    path: str
    group: str
    precision: str


def parse_models(paths: list[str]) -> dict[str, list[Model]]:
    """Models grouped by policy, fp32 first, then in PRECISIONS order."""
    groups: dict[str, list[Model]] = {}
    for path in paths:
        if not Path(path).is_file():
            raise UserError(f"model file not found: {path}")
        stem = Path(path).stem
        prec = next((q for q in sorted(PRECISIONS, key=len, reverse=True) if stem.endswith("_" + q)), None)
        if prec is None:
            raise UserError(
                f"cannot tell the precision of {path}: name it GROUP_PRECISION.onnx with PRECISION one of {', '.join(PRECISIONS)}"
            )
        group = stem[: -len(prec) - 1]
        if any(m.precision == prec for m in groups.get(group, [])):
            raise UserError(
                f"two {prec} models for {group}: {path} and {next(m.path for m in groups[group] if m.precision == prec)}"
            )
        groups.setdefault(group, []).append(Model(str(path), group, prec))
    for group, models in groups.items():
        if not any(m.precision == "fp32" for m in models):
            raise UserError(f"{group} has no fp32 model ({group}_fp32.onnx): ratios need the fp32 baseline")
        models.sort(key=lambda m: PRECISIONS.index(m.precision))
    return groups


def check_args(args: StudyArgs) -> tuple[dict[str, list[Model]], DeviceProfile | None, dict | None]:
    if args.episodes < 1:
        raise UserError(f"--episodes must be >= 1, got {args.episodes}")
    if args.timing_acts < 1 or args.timing_rounds < 1:
        raise UserError("--timing-acts and --timing-rounds must be >= 1")
    if not 0 < args.port < 65536:
        raise UserError(f"--port must be in 1..65535, got {args.port}")
    if len(set(args.levels)) != len(args.levels):
        raise UserError(f"--levels lists a level twice: {args.levels}")
    try:
        for level in args.levels:
            load_level(level)
        profile = get_profile(args.profile or "native") if args.sim_only or args.profile else None
    except (ConfigError, ProfileError) as e:
        raise UserError(str(e)) from None
    if args.host and profile is not None and not profile.has_roofline():
        raise UserError(f"--profile {profile.name} has no roofline figures; with --host it names the board (e.g. pi3b)")
    groups = parse_models(args.models)
    return groups, profile, memory_stage.resolve_plan(args, profile)


# ---------------------------------------------------------------------------------- the study


class Study:
    def __init__(
        self,
        args: StudyArgs,
        groups: dict[str, list[Model]],
        profile: DeviceProfile | None,
        memory_plan: dict | None = None,
        *,
        command: str,
    ):
        """``command``: what study.json records as the command that ran the study (main() passes what was typed)."""
        self.args, self.groups, self.profile, self.memory_plan = args, groups, profile, memory_plan
        self.out = Path(args.out)
        self.started = time.monotonic()
        self.measured_anything = False
        self.previous: dict = {}  # the study.json of the sessions before this one (a resumed or re-rendered study)
        self.session_date = time.strftime("%Y-%m-%d %H:%M:%S %Z")
        self.data: dict[str, Any] = {
            "study_version": STUDY_VERSION,
            "command": command,
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "args": asdict(args),
            "mode": "sim-only" if args.sim_only else f"device {args.host}:{args.port}",
            "profile": (asdict(profile) | {"emulated": profile.emulated()}) if profile else None,
            "device": None,
            "host_versions": package_versions(),  # this side's packages (this session's); the device's: device.device
            "complete": False,
            "cells": {},  # "level/group" -> hil.run report (trimmed)
            "timing": {},  # group -> timing pass
            "machine": None,  # this machine's roofline figures (sim-only)
            "rows": [],
            "roofline": [],
            "targets": [],
            "seed": TABLE4,
            "memory": None,  # the memory stage (deployment_study.memory_stage)
        }

    # -------------------------------------------------------------- bookkeeping

    def check_out_dir(self) -> None:
        """A study directory belongs to one set of arguments; rerunning them continues it."""
        marker = self.out / "study_args.json"
        key = {k: v for k, v in asdict(self.args).items() if k not in ("quiet", "out")}
        if marker.exists():
            try:
                old = json.loads(marker.read_text())
            except ValueError:
                old = None
            if old != key:
                raise UserError(
                    f"{self.out} holds a study with other arguments ({marker}); use another --out or remove it"
                )

    def claim_out_dir(self) -> None:
        """Written with the first result, not before: a study that fails before recording anything
        (an unreachable device, a bad model) leaves nothing that would refuse the corrected rerun."""
        marker = self.out / "study_args.json"
        if not marker.exists():
            key = {k: v for k, v in asdict(self.args).items() if k not in ("quiet", "out")}
            write_json(marker, key)

    def say(self, text: str) -> None:
        print(f"[study {time.monotonic() - self.started:6.0f} s] {text}", file=sys.stderr, flush=True)

    def save(self) -> None:
        self.claim_out_dir()
        self.data["rows"] = build_rows(self.data, self.groups)
        self.data["roofline"] = build_roofline(self.data, self.groups, self.profile)
        self.data["targets"] = build_targets(self.data)
        write_json(self.out / "study.json", self.data)
        write_atomic(self.out / "study.md", render_markdown(self.data).encode())

    # -------------------------------------------------------------- stages

    def run(self) -> int:
        self.out.mkdir(parents=True, exist_ok=True)
        self.check_out_dir()
        try:  # earlier sessions of this study (a resumed study adds up their wall times)
            old = json.loads((self.out / "study.json").read_text())
            self.previous = old
            self.data["sessions"] = old.get("sessions") or (
                [{"date": old["date"], "wall_s": old["wall_s"]}] if old.get("wall_s") else []
            )
        except (OSError, ValueError):
            self.data["sessions"] = []
        if self.data["sessions"]:
            self.data["date"] = self.data["sessions"][0]["date"]  # the study's date is when its first session ran
        self.data["rendered"] = self.session_date
        n_cells = len(self.groups) * len(self.args.levels)
        self.say(
            f"{len(self.args.models)} models in {len(self.groups)} groups x {len(self.args.levels)} levels x "
            f"{self.args.episodes} episodes; {self.data['mode']}"
            + (f", profile {self.profile.name}" if self.profile else "")
        )
        if self.args.sim_only:
            self.measure_machine()
        done = 0
        for group, models in self.groups.items():
            for level in self.args.levels:
                done += 1
                self.closed_loop(group, models, level, done, n_cells)
                self.save()
            self.timing_pass(group, models)
            self.save()
        memory_stage.run_stage(self)
        self.save()
        self.data["complete"] = True
        if self.measured_anything:  # a rerun that only re-renders finished results is not a session
            self.data["sessions"].append(
                {
                    "date": self.session_date,
                    "wall_s": time.monotonic() - self.started,
                    "host_versions": self.data["host_versions"],
                }
            )
        self.data["date"] = self.data["sessions"][0]["date"] if self.data["sessions"] else self.session_date
        self.data["wall_s"] = sum(x["wall_s"] for x in self.data["sessions"])
        self.save()
        written = write_plots(self.out, self.data, self.groups)
        print(render_markdown(self.data))
        self.say(f"done: {self.out / 'study.md'}, {self.out / 'study.json'}, " + ", ".join(p.name for p in written))
        return 0

    def measure_machine(self) -> None:
        path = self.out / "machine.json"
        if not path.exists():
            sizes = [roofline.model_cost(m.path).weight_bytes for ms in self.groups.values() for m in ms]
            self.say("measuring this machine's bandwidth and compute throughput (one core) for the roofline check")
            env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
            cmd = [
                *_cpu_prefix(self.profile),
                sys.executable,
                "-m",
                "deployment_study.roofline",
                "measure",
                "--out",
                str(path),
                "--sizes",
                *map(str, sizes),
            ]
            self.measured_anything = True
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if proc.returncode != 0:
                raise RuntimeError(f"machine measurement failed: {proc.stderr.strip()[-500:]}")
        self.data["machine"] = json.loads(path.read_text())

    def closed_loop(self, group: str, models: list[Model], level: str, k: int, n: int) -> None:
        cell = self.out / "cells" / level / group
        key = f"{level}/{group}"
        paths = [m.path for m in models]
        report = _finished_report(cell, paths, self.args.episodes)
        if report is None:
            run_args = RunArgs(
                policy=paths,
                host=self.args.host,
                port=self.args.port,
                sim_only=self.args.sim_only,
                profile=self.profile.name if self.args.sim_only and self.profile else "native",
                episodes=self.args.episodes,
                level=level,
                seed=self.args.seed,
                out=str(cell),
                quiet=self.args.quiet,
                resume=_can_resume(cell, paths, self.args, level),
            )
            t0 = time.monotonic()
            self.say(
                f"[{k}/{n}] {level} {policy_label(group)}: {len(models)} models x {self.args.episodes} episodes"
                + (" (resuming)" if run_args.resume else "")
            )
            cell.mkdir(parents=True, exist_ok=True)
            self.measured_anything = True
            report = hil_run(
                run_args, command=run_args.command_line(), progress=CommandLineProgress(self.args.quiet)
            ).report
            self.say(
                f"[{k}/{n}] {level} {policy_label(group)} done in {time.monotonic() - t0:.0f} s: "
                + ", ".join(f"{Path(r['policy']).stem} {r['outcomes']['success_rate']:.1%}" for r in report["runs"])
            )
        else:
            self.say(f"[{k}/{n}] {level} {policy_label(group)}: already done ({cell / 'report.json'})")
        self.data["device"] = self.data["device"] or report.get("device")
        self.data["cells"][key] = {
            "level": level,
            "group": group,
            "dir": str(cell),
            "date": report.get("date"),
            "runs": [
                {k2: v for k2, v in r.items() if k2 != "episodes"}
                | {
                    "episodes": [
                        {"episode": e["episode"], "seed": e["seed"], "outcome": e["outcome"], "steps": e["steps"]}
                        for e in r["episodes"]
                    ]
                }
                for r in report["runs"]
            ],
            "comparisons": report["comparisons"],
        }

    def timing_pass(self, group: str, models: list[Model]) -> None:
        path = self.out / "timing" / f"{group}.json"
        if path.exists():
            self.data["timing"][group] = json.loads(path.read_text())
            return
        a = self.args
        self.say(
            f"timing pass {policy_label(group)}: {a.timing_rounds} rounds x {a.timing_acts} acts per model, interleaved"
        )
        self.measured_anything = True
        obs = recorded_observations(a.levels, a.seed, a.timing_acts)
        result = timing_pass(models, obs, a, self.profile)
        write_json(path, result)
        self.data["timing"][group] = result
        summary = ", ".join(
            f"{Path(m).stem} p50 {r['device_inference_us']['p50']:.1f} us" for m, r in result["models"].items()
        )
        self.say(f"timing pass {policy_label(group)} done: {summary}")


def _cpu_prefix(profile: DeviceProfile | None) -> list[str]:
    """The profile's core pinning only (the measurement allocates a 256 MB DRAM working set)."""
    prefix = profile.launch_prefix() if profile else []
    return prefix[:3] if prefix[:1] == ["taskset"] else []


def _finished_report(cell: Path, paths: list[str], episodes: int) -> dict | None:
    try:
        report = json.loads((cell / "report.json").read_text())
    except (OSError, ValueError):
        return None
    runs = report.get("runs") or []
    if [r["policy"] for r in runs] != paths or any(len(r["episodes"]) != episodes for r in runs):
        return None
    if report["args"]["episodes"] != episodes:
        return None
    return report


def _can_resume(cell: Path, paths: list[str], args: StudyArgs, level: str) -> bool:
    log = cell / "run.jsonl"
    if not log.is_file():
        return False
    records, _ = read_run_log(log)
    header = next((r for r in records if r.get("kind") == "run"), None)
    if header is None:
        return False
    old = header.get("args", {})
    return (
        old.get("policy") == paths
        and old.get("episodes") == args.episodes
        and old.get("seed") == args.seed
        and old.get("level") == level
        and any(r.get("kind") == "episode" for r in records)
    )


# ---------------------------------------------------------------------------------- timing pass


def recorded_observations(levels: list[str], seed: int, n: int) -> np.ndarray:
    """``n`` observations recorded from seeded episodes of each level flown by the scripted heuristic
    (evenly spread over the flights), so the timing pass sees real depth images and states."""
    from nav_env.backends import make_env
    from nav_env.baselines import HeuristicPolicy

    per_level = []
    for level in levels:
        cfg = load_level(level)
        env, pilot, seen = make_env(cfg), HeuristicPolicy(cfg), []
        for j in range(4):
            obs, _ = env.reset(seed=seed + j)
            done = False
            while not done:
                seen.append(obs)
                obs, _, terminated, truncated, _ = env.step(int(pilot(obs[None])[0]))
                done = terminated or truncated
        env.close()
        idx = np.linspace(0, len(seen) - 1, max(1, -(-n // len(levels)))).astype(int)
        per_level.append(np.asarray(seen, dtype=np.float32)[idx])
    return np.concatenate(per_level)[:n]


def timing_pass(models: list[Model], obs: np.ndarray, args: StudyArgs, profile: DeviceProfile | None) -> dict:
    """Device inference of every model over the same observations, round-robin: each round runs
    ``timing_acts`` acts per model, in an order rotated every round. --sim-only: one bridge process per
    model (pinned by the profile), all alive at once; --host: the one device, re-loading each round."""
    processes: list[BridgeProcess] = []
    clients: dict[str, BridgeClient] = {}
    infer: dict[str, list[int]] = {m.path: [] for m in models}
    rtt: dict[str, list[int]] = {m.path: [] for m in models}
    sizes: dict[str, int | None] = {}
    try:
        if args.sim_only:
            for m in models:
                proc = BridgeProcess(["--threads", str(profile.threads if profile else 1), "--actuator", "mock"])
                proc.args = (profile.launch_prefix() if profile else []) + proc.args
                processes.append(proc.start())
                client = BridgeClient(proc.endpoint, timeout_s=30.0)
                sizes[m.path] = client.load_policy(m.path).get("size_bytes")
                clients[m.path] = client
        else:
            host = f"[{args.host}]" if ":" in args.host and not args.host.startswith("[") else args.host
            shared = BridgeClient(f"tcp://{host}:{args.port}", timeout_s=30.0)
            clients = {m.path: shared for m in models}
        for r in range(args.timing_rounds):
            order = models[r % len(models) :] + models[: r % len(models)]
            for m in order:
                client = clients[m.path]
                if not args.sim_only:
                    sizes[m.path] = client.load_policy(m.path).get("size_bytes")
                for o in (
                    obs[: args.timing_acts]
                    if len(obs) >= args.timing_acts
                    else np.resize(obs, (args.timing_acts, obs.shape[1]))
                ):
                    res = client.act(o)
                    infer[m.path].append(res.infer_ns)
                    rtt[m.path].append(res.rtt_ns)
    finally:
        for c in {id(c): c for c in clients.values()}.values():
            c.close()
        for p in processes:
            p.close()
    return {
        "rounds": args.timing_rounds,
        "acts_per_round": args.timing_acts,
        "observations": int(len(obs)),
        "models": {
            m.path: {
                "precision": m.precision,
                "model_bytes": sizes.get(m.path),
                "device_inference_us": percentiles_us(infer[m.path]),
                "round_trip_us": percentiles_us(rtt[m.path]),
                "acts": len(infer[m.path]),
            }
            for m in models
        },
    }


# ---------------------------------------------------------------------------------- tables


def _fp32_run(cell: dict) -> dict:
    return cell["runs"][0]


def build_rows(data: dict, groups: dict[str, list[Model]]) -> list[dict]:
    rows = []
    for cell in data["cells"].values():
        base = _fp32_run(cell)
        comparisons = {c["policy"]: c for c in cell["comparisons"]}
        timing = data["timing"].get(cell["group"], {}).get("models", {})
        base_t = timing.get(base["policy"], {}).get("device_inference_us", {}).get("p50")
        for run in cell["runs"]:
            model = next(m for m in groups[cell["group"]] if m.path == run["policy"])
            outcomes = run["outcomes"]
            n = len(run["episodes"])
            successes = sum(e["outcome"] == "success" for e in run["episodes"])
            t = timing.get(run["policy"], {}).get("device_inference_us", {})
            comp = comparisons.get(run["policy"])
            mem = run["device_memory"]
            rows.append(
                {
                    "level": cell["level"],
                    "group": cell["group"],
                    "precision": model.precision,
                    "model": run["policy"],
                    "episodes": n,
                    "successes": successes,
                    "success_rate": successes / n if n else 0.0,
                    "success_ci95": list(wilson_interval(successes, n)),
                    "reported_success_rate": outcomes["success_rate"],
                    "paired_vs_fp32": comp["success_difference"] if comp else None,
                    "loop_inference_us": {
                        "p50": run["device_inference_us"]["p50"],
                        "p99": run["device_inference_us"]["p99"],
                    },
                    "timing_inference_us": {"p50": t.get("p50"), "p99": t.get("p99")} if t else None,
                    "actuation_hz": run["actuation_hz"],
                    "round_trip_us_p50": run["round_trip_us"]["p50"],
                    "speedup_vs_fp32": base_t / t["p50"] if t and base_t and t.get("p50") else None,
                    "loop_speedup_vs_fp32": comp["inference_speedup"] if comp else (1.0 if run is base else None),
                    "rss_bytes": mem["rss_bytes"],
                    "peak_rss_bytes": mem["peak_rss_bytes"],
                    "model_rss_bytes": mem.get("model_rss_bytes"),
                    "model_bytes": run["model_bytes"],
                    "peak_rss_ratio_vs_fp32": _ratio(base["device_memory"]["peak_rss_bytes"], mem["peak_rss_bytes"]),
                    "model_rss_ratio_vs_fp32": _ratio(
                        base["device_memory"].get("model_rss_bytes") or 0, mem.get("model_rss_bytes") or 0
                    ),
                    "model_size_ratio_vs_fp32": _ratio(base["model_bytes"] or 0, run["model_bytes"] or 0),
                    "deadline_misses": run["deadline_misses"],
                }
            )
    return rows


def _ratio(a: float, b: float) -> float | None:
    return a / b if a and b else None


def build_roofline(data: dict, groups: dict[str, list[Model]], profile: DeviceProfile | None) -> list[dict]:
    """Per model: cost, the check on this machine (sim-only) or on the device (--host), and the
    prediction for every board profile with roofline figures - shown only where the check agrees."""
    boards = {name: p for name, p in load_profiles().items() if p.has_roofline()}
    out = []
    for group, models in groups.items():
        timing = data["timing"].get(group, {}).get("models", {})
        for m in models:
            cost = roofline.model_cost(m.path)
            measured = timing.get(m.path, {}).get("device_inference_us", {}).get("p50")
            measured_s = measured / 1e6 if measured else None
            entry = {
                "model": m.path,
                "group": group,
                "precision": m.precision,
                "cost": asdict(cost) | {"ops": cost.ops},
            }
            if data["args"]["sim_only"] and data.get("machine"):
                check = roofline.check_here(cost, data["machine"], measured_s)
                entry["check"] = check | {"where": "this machine"}
            elif not data["args"]["sim_only"] and profile is not None:
                pred = roofline.predict_device(cost, profile)
                ratio = measured_s / pred["predicted_s"] if measured_s and pred["predicted_s"] else None
                entry["check"] = pred | {
                    "where": f"the device ({profile.name} figures)",
                    "measured_s": measured_s,
                    "measured_over_predicted": ratio,
                    "agrees": ratio is not None and 1 / roofline.AGREEMENT <= ratio <= roofline.AGREEMENT,
                }
            else:
                entry["check"] = None
            agrees = bool(entry["check"] and entry["check"]["agrees"])
            entry["predicted_on_pi"] = {}
            for name, board in boards.items():
                pred = roofline.predict_device(cost, board)
                entry["predicted_on_pi"][name] = pred | {
                    "shown": agrees and pred["predicted_s"] is not None and not pred["missing"]
                }
            out.append(entry)
    return out


def build_targets(data: dict) -> list[dict]:
    """The issue's targets, judged on this run's measurements."""
    rows = data.get("rows") or []
    targets = []
    for r in rows:
        if r["precision"] == "int8" and r["paired_vs_fp32"]:
            d = r["paired_vs_fp32"]["diff"]
            targets.append(
                {
                    "target": f"{policy_label(r['group'])} int8 success within 2 points of fp32 on {r['level']}",
                    "value": f"{d * 100:+.1f} pts",
                    "met": abs(d) <= 0.02 + 1e-12,
                }
            )
    big = max(
        {r["group"] for r in rows},
        key=lambda g: max((x["model_bytes"] or 0) for x in rows if x["group"] == g),
        default=None,
    )
    if big is not None:
        int8 = [r for r in rows if r["group"] == big and r["precision"] == "int8"]
        if int8:
            r = int8[0]
            s, z = r["speedup_vs_fp32"], r["model_size_ratio_vs_fp32"]
            targets.append(
                {
                    "target": f"{policy_label(big)} int8 >= 4x faster than fp32 (timing-pass p50)",
                    "value": f"{s:.2f}x" if s else "n/a",
                    "met": bool(s and s >= 4.0),
                }
            )
            targets.append(
                {
                    "target": f"{policy_label(big)} int8 >= 3.9x smaller than fp32 (model bytes)",
                    "value": f"{z:.2f}x" if z else "n/a",
                    "met": bool(z and z >= 3.9),
                }
            )
            pk = r["peak_rss_ratio_vs_fp32"]
            targets.append(
                {
                    "target": f"{policy_label(big)} int8 peak device RSS vs fp32 (reported, no target)",
                    "value": f"{pk:.2f}x smaller" if pk else "n/a",
                    "met": None,
                }
            )
    return targets


# ---------------------------------------------------------------------------------- markdown


def _us(v: float | None) -> str:
    return "-" if v is None else (f"{v:,.0f}" if v >= 100 else f"{v:.1f}")


def _ms(s: float | None) -> str:
    return "-" if s is None else (f"{s * 1e3:.3f}" if s < 0.01 else f"{s * 1e3:.2f}")


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def _mb(b: int | None) -> str:
    return "-" if not b else f"{b / 2**20:.1f}"


def md_header(data: dict) -> str:
    a = data["args"]
    d = (data.get("device") or {}).get("device") or {}
    lines = [
        "# Deployment study: Policies I-III at fp32, fp16, int8 and int8-dynamic in the loop",
        "",
        f"`{data['command']}` - {data['date']}"
        + ("" if data["complete"] else " - **partial: the study did not finish**"),
        "",
        f"Device: {d.get('cpu_model') or d.get('machine') or '?'} ({d.get('cores', '?')} cores), onnxruntime "
        f"{d.get('onnxruntime_version', '?')}; {a['episodes']} seeded episodes per model and level (seeds "
        f"{a['seed']}-{a['seed'] + a['episodes'] - 1}), levels {', '.join(a['levels'])}; every precision flies the same episodes."
        + (
            f" Wall time {data['wall_s'] / 60:.1f} min"
            + (f" over {len(data['sessions'])} sessions (resumed)." if len(data["sessions"]) > 1 else ".")
            if data.get("wall_s")
            else ""
        ),
        "",
    ]
    if d.get("int8_kernels"):
        from firmware_bridge.int8_kernels import Int8Kernels

        lines[-1:-1] = [f"Device {Int8Kernels.from_dict(d['int8_kernels']).describe()}."]
    if data.get("host_versions"):
        lines += [f"Host versions: {format_versions(data['host_versions'])}."]
        earlier = [x for x in data.get("sessions") or [] if x.get("host_versions") not in (None, data["host_versions"])]
        lines += [
            f"An earlier session ({x['date']}) ran with: {format_versions(x['host_versions'])}." for x in earlier
        ] + [""]
    if a["sim_only"]:
        p = data.get("profile") or {}
        lines += [
            f"**Honest labelling: sim-only, profile `{p.get('name')}`.** The bridge runs on this machine as a separate "
            f"process ({p.get('emulated')}). Every time below is this machine's, not a Raspberry Pi's; the only Pi "
            'figures are the roofline predictions, labelled "predicted on Pi (roofline)", from published bandwidth '
            "and throughput figures (hil/profiles.toml).",
            "",
        ]
    else:
        lines += [
            f"Measured on the device at {a['host']}:{a['port']}: every time and memory figure is that device's.",
            "",
        ]
    return "\n".join(lines)


def md_results(data: dict) -> str:
    rows = data.get("rows") or []
    if not rows:
        return "## Results\n\nNo cell finished yet.\n"
    out = [
        "## Results",
        "",
        "Device inference: the timing pass (interleaved acts on recorded observations; microseconds) and, in brackets, the "
        "closed loop's. Speed-up: fp32 timing-pass p50 / this model's. Paired difference: same episodes as fp32, "
        "McNemar exact p. Memory: bridge process RSS at the end, peak RSS, the model's share (RSS growth on loading), "
        "file size; ratio: fp32 / this (peak RSS and model share).",
        "",
    ]
    for level in data["args"]["levels"]:
        lr = [r for r in rows if r["level"] == level]
        if not lr:
            continue
        out += [
            f"### Level `{level}`",
            "",
            "| policy | precision | infer p50 / p99 us (closed loop) | act Hz | success (95% CI) | vs fp32, paired | speed-up | "
            "RSS / peak MB | model share MB | file MB | memory ratio (peak / model share) |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in lr:
            t, lo = r["timing_inference_us"] or {}, r["loop_inference_us"]
            d = r["paired_vs_fp32"]
            pair = (
                "-"
                if d is None
                else f"{d['diff'] * 100:+.1f} pts ({d['low'] * 100:+.1f}..{d['high'] * 100:+.1f}, p={d['mcnemar_p']:.2f})"
            )
            ci = r["success_ci95"]
            out.append(
                f"| {policy_label(r['group'])} | {r['precision']} | {_us(t.get('p50'))} / {_us(t.get('p99'))} ({_us(lo['p50'])} / {_us(lo['p99'])}) | "
                f"{r['actuation_hz']:,.0f} | {r['success_rate']:.1%} ({ci[0]:.1%}-{ci[1]:.1%}), {r['successes']}/{r['episodes']} | {pair} | "
                f"{_x(r['speedup_vs_fp32'])} | {_mb(r['rss_bytes'])} / {_mb(r['peak_rss_bytes'])} | {_mb(r['model_rss_bytes'])} | "
                f"{(r['model_bytes'] or 0) / 2**20:.2f} | {_x(r['peak_rss_ratio_vs_fp32'])} / {_x(r['model_rss_ratio_vs_fp32'])} |"
            )
        out.append("")
    return "\n".join(out)


def md_seed(data: dict) -> str:
    rows = data.get("rows") or []
    roof = {e["model"]: e for e in data.get("roofline") or []}
    level = data["args"]["levels"][0]
    out = [
        "## Beside the seed's Table 4",
        "",
        f"Seed: {TABLE4.source} (success on Air Learning's arena). Ours: level `{level}`, device inference p50 from the timing pass "
        '(this machine unless run with --host), int8 = static int8; "predicted on Pi 3B (roofline)" only where the '
        "roofline check agreed within 2x.",
        "",
        "| policy | layers | seed fp32 ms | seed fp32 success | seed int8 ms | seed int8 success | seed speed-up | "
        "ours fp32 ms | ours fp32 success | ours int8 ms | ours int8 success | ours speed-up | predicted on Pi 3B (roofline) fp32 / int8 ms (speed-up) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for group, quarl in TABLE4.table.items():
        f = next((r for r in rows if r["group"] == group and r["level"] == level and r["precision"] == "fp32"), None)
        i = next((r for r in rows if r["group"] == group and r["level"] == level and r["precision"] == "int8"), None)
        if f is None or i is None:
            continue

        def pi_s(r):
            p = (roof.get(r["model"]) or {}).get("predicted_on_pi", {}).get("pi3b")
            return p["predicted_s"] if p and p["shown"] else None

        pf, pi8 = pi_s(f), pi_s(i)
        predicted = f"{_ms(pf) if pf else 'n/a'} / {_ms(pi8) if pi8 else 'n/a'}" + (
            f" ({pf / pi8:.2f}x)" if pf and pi8 else ""
        )

        ft, it = (f["timing_inference_us"] or {}).get("p50"), (i["timing_inference_us"] or {}).get("p50")
        out.append(
            f"| {quarl.name} | {quarl.layers} | {quarl.fp32_ms} | {quarl.fp32_success:.0%} | {quarl.int8_ms} | "
            f"{quarl.int8_success:.0%} | {quarl.speedup}x | {_ms(ft / 1e6 if ft else None)} | {f['success_rate']:.1%} | "
            f"{_ms(it / 1e6 if it else None)} | {i['success_rate']:.1%} | {_x(i['speedup_vs_fp32'])} | {predicted} |"
        )
    return "\n".join(out) + "\n"


def md_roofline(data: dict) -> str:
    entries = data.get("roofline") or []
    if not entries:
        return ""
    boards = sorted({b for e in entries for b in e["predicted_on_pi"]})
    m = data.get("machine")
    out = [
        "## Roofline",
        "",
        "time >= weight bytes / bandwidth and >= ops / throughput (ops = 2 x multiply-adds, one per weight; fp32 "
        "throughput for fp32 weights, int8 for int8; biases, activations, (de)quantisation and per-operator runtime cost "
        "not counted). Predicted = the larger bound. A Pi prediction is shown only where the prediction for the "
        "machine that ran the timing pass agrees with its measured p50 within 2x.",
        "",
    ]
    if m:
        bw = ", ".join(
            f"{int(k) / 1e6:.2f} MB: {v:.1f}" for k, v in sorted(m["bandwidth_gbs"].items(), key=lambda kv: int(kv[0]))
        )
        tp = m["throughput_gops"]
        out += [
            f"This machine, measured in this run (one core): streaming-read bandwidth GB/s at working sets {bw}; "
            f"DRAM ({m['dram_bytes'] // 2**20} MB) {m['dram_bandwidth_gbs']:.1f} GB/s. Matrix-product throughput "
            f"(onnxruntime, one thread): fp32 {tp['fp32']:.0f}, fp16 {tp['fp16']:.0f}, int8 {tp['int8']:.0f} Gop/s.",
            "",
        ]
    where = next((e["check"]["where"] for e in entries if e["check"]), None)
    if where:
        out += [f"Check against {where}: predicted us from its figures, measured = its timing-pass p50.", ""]
    head = (
        "| model | weight MB | Mop | predicted us (bound) | measured p50 us | measured / predicted | agrees (2x) | "
        + " | ".join(f"predicted on Pi ({b}) (roofline) ms" for b in boards)
        + " |"
    )
    out += [head, "|" + "---|" * (7 + len(boards))]
    for e in entries:
        c = e["check"] or {}
        preds = []
        for b in boards:
            p = e["predicted_on_pi"][b]
            if p["shown"]:
                preds.append(
                    f"{_ms(p['predicted_s'])} ({p['bound_by']}{', fits in cache' if p['fits_in_cache'] else ''})"
                )
            elif p["missing"]:
                preds.append("no figure: " + ", ".join(p["missing"]))
            else:
                preds.append("not shown (check failed)" if c else "not shown (no check)")
        out.append(
            f"| {Path(e['model']).stem} | {e['cost']['weight_bytes'] / 1e6:.2f} | {e['cost']['ops'] / 1e6:.2f} | "
            f"{_us(c['predicted_s'] * 1e6) if c.get('predicted_s') else '-'} ({c.get('bound_by') or '-'}) | "
            f"{_us(c['measured_s'] * 1e6) if c.get('measured_s') else '-'} | {_x(c.get('measured_over_predicted'))} | "
            f"{'yes' if c.get('agrees') else 'no'} | " + " | ".join(preds) + " |"
        )
    out.append("")
    out += ["Pi figures and their sources (hil/profiles.toml):", ""]
    for name, p in load_profiles().items():
        if not p.has_roofline():
            continue
        out.append(
            f"- **{name}**: DRAM {p.memory_bandwidth_gbs} GB/s, fp32 {p.compute_gflops} Gop/s, int8 "
            f"{p.int8_gops if p.int8_gops else 'none'} Gop/s, cache {p.cache_kb} KB. Sources: "
            + " / ".join(
                " ".join(getattr(p, k).split())
                for k in ("memory_bandwidth_source", "compute_source", "int8_source", "cache_source")
                if getattr(p, k)
            )
        )
    return "\n".join(out) + "\n"


def md_targets(data: dict) -> str:
    targets = data.get("targets") or []
    if not targets:
        return ""
    out = ["## Targets (measured in this run)", "", "| target | measured | met |", "|---|---|---|"]
    for t in targets:
        out.append(
            f"| {t['target']} | {t['value']} | {'-' if t['met'] is None else ('yes' if t['met'] else '**no**')} |"
        )
    return "\n".join(out) + "\n"


def md_files(data: dict) -> str:
    return (
        "## Files\n\nstudy.json (everything above, per-episode outcomes included), latency.png (device inference by "
        "policy and precision), memory_over_time.png (bridge memory over each run, like the seed's Figure 4), "
        "success.png (success with Wilson 95% intervals); cells/LEVEL/GROUP/ holds each closed loop's hil.run "
        "report and run log, timing/ the timing passes, machine.json this machine's roofline figures; with the memory "
        "stage, memory_fit_over_time.png (cgroup RAM, swap and bridge RSS per memory run) and memory/PART/ (deployment_study.memfit's "
        "memfit.json, memfit.md and plot per part).\n"
    )


MARKDOWN_SECTIONS: list[Callable[[dict], str]] = [
    md_header,
    md_results,
    md_seed,
    md_roofline,
    memory_stage.md_memory,
    md_targets,
    md_files,
]


def render_markdown(data: dict) -> str:
    return "\n".join(s for s in (section(data) for section in MARKDOWN_SECTIONS) if s)


# ---------------------------------------------------------------------------------- plots


def write_plots(out: Path, data: dict, groups: dict[str, list[Model]]) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    rows = data["rows"]
    level0 = data["args"]["levels"][0]
    colors = {"fp32": "tab:blue", "fp16": "tab:orange", "int8": "tab:green", "int8-dynamic": "tab:red"}
    # latency by policy and precision (timing pass, p50 bar, p99 whisker)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    names = list(groups)
    width = 0.8 / len(PRECISIONS)
    for k, prec in enumerate(PRECISIONS):
        xs, p50, p99 = [], [], []
        for g, group in enumerate(names):
            r = next((r for r in rows if r["group"] == group and r["precision"] == prec and r["level"] == level0), None)
            if r and r["timing_inference_us"]:
                xs.append(g + (k - 1.5) * width)
                p50.append(r["timing_inference_us"]["p50"])
                p99.append(r["timing_inference_us"]["p99"])
        if xs:
            ax.bar(xs, p50, width, color=colors[prec], label=prec)
            ax.errorbar(
                xs, p50, yerr=[np.zeros(len(p50)), np.asarray(p99) - np.asarray(p50)], fmt="none", ecolor="k", capsize=2
            )
    ax.set_xticks(range(len(names)), [policy_label(g) for g in names])
    ax.set_yscale("log")
    ax.set_ylabel("device inference, microseconds (bar p50, whisker p99)")
    ax.set_title("Device inference by policy and precision (timing pass)")
    ax.legend()
    paths.append(save_figure(fig, out / "latency.png"))
    # memory over time per policy (the seed's Figure 4)
    fig, axes = plt.subplots(1, len(names), figsize=(4.5 * len(names), 4), squeeze=False)
    for ax, group in zip(axes[0], names):
        cell = data["cells"].get(f"{level0}/{group}")
        for run in (cell or {}).get("runs", []):
            prec = next(m.precision for m in groups[group] if m.path == run["policy"])
            s = np.asarray(run["device_memory"]["samples"], dtype=float)
            if len(s):
                ax.plot(s[:, 0], s[:, 1] / 2**20, color=colors[prec], label=f"{prec} RSS")
                ax.plot(s[:, 0], s[:, 2] / 2**20, color=colors[prec], linestyle="--", label=f"{prec} peak")
        ax.set_title(f"{policy_label(group)} ({level0})")
        ax.set_xlabel("seconds into the run")
        ax.set_ylabel("bridge memory (MiB)")
        ax.legend(fontsize=7)
    paths.append(save_figure(fig, out / "memory_over_time.png"))
    # success with intervals
    levels = data["args"]["levels"]
    fig, axes = plt.subplots(1, len(levels), figsize=(6 * len(levels), 4), squeeze=False)
    for ax, level in zip(axes[0], levels):
        lr = [r for r in rows if r["level"] == level]
        for i, r in enumerate(lr):
            lo, hi = r["success_ci95"]
            ax.errorbar(
                [i],
                [r["success_rate"] * 100],
                yerr=[[max(0.0, r["success_rate"] - lo) * 100], [max(0.0, hi - r["success_rate"]) * 100]],
                fmt="o",
                color=colors[r["precision"]],
                capsize=3,
            )
        ax.set_xticks(range(len(lr)), [f"{policy_label(r['group'])}\n{r['precision']}" for r in lr], fontsize=6)
        ax.set_ylabel("success %, Wilson 95% interval")
        ax.set_title(f"Success on {level}")
    paths.append(save_figure(fig, out / "success.png"))
    plt.close("all")
    return paths


# ---------------------------------------------------------------------------------- main


def _terminate(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = parse_args(argv)
        groups, profile, memory_plan = check_args(args)
    except SystemExit as e:  # argparse: --help, or a bad flag already reported in one line
        return int(e.code or 0)
    except UserError as e:
        print(error_line(e), file=sys.stderr)
        return EXIT_USAGE
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminate)
    study = Study(args, groups, profile, memory_plan, command=shlex.join(["python", "-m", "deployment_study", *argv]))
    try:
        return study.run()
    except UserError as e:
        print(error_line(e), file=sys.stderr)
        return EXIT_USAGE
    except (BridgeError, BridgeStartError, RuntimeError) as e:
        print(error_line(e), file=sys.stderr)
        _save_partial(study)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        _save_partial(study)
        print(
            f"interrupted: finished cells are kept in {args.out}; run the same command again to continue",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED


def _save_partial(study: Study) -> None:
    if not (study.data["cells"] or study.data["timing"] or study.data["memory"]):
        return  # nothing recorded: leave no study behind (and no claim on --out)
    with contextlib.suppress(Exception):
        study.save()
