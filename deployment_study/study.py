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
3. roofline (device_emulation.roofline): with --sim-only this machine's bandwidth and compute throughput are
   measured (pinned to one core like the bridge) and each model's predicted time is checked against
   its measured timing-pass p50; only where they agree within 2x is a prediction shown for the
   real Pi boards of device_emulation/profiles.toml ("predicted on Pi (roofline)");
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

Layout: this module runs the stages and computes the tables; deployment_study.args holds the arguments
(StudyArgs) and their defaults, at the bottom of the package; deployment_study.results the typed results the
stages hand each other (study.json is a StudyResults); deployment_study.render (with render_latency and
render_memfit) the markdown and the figures: the stages return data and render nothing, this module writes
the files; deployment_study.seed the seed's Table 4. Adding a section: a stage computes a typed result
that :meth:`Study.run` stores in ``Study.results`` (a field of StudyResults), and a markdown section is a
function (StudyResults) -> str appended to ``render.MARKDOWN_SECTIONS``.
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
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from airq_cli import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    ArgumentParser,
    UserError,
    defaults_from,
    error_line,
    output_dir,
    shown,
    write_atomic,
    write_json,
)
from airq_cli.journal import read_journal
from deployment_study import latency_stage, memory_stage, render, render_memfit
from deployment_study.args import PRECISIONS, SHIPPED, StudyArgs, group_and_precision
from deployment_study.memfit_run import MemfitResult
from deployment_study.memory_stage import MemoryPlan, MemoryResult
from deployment_study.report_html import write_study_html
from deployment_study.results import (
    Cell,
    Latency,
    Model,
    ModelTiming,
    PairedDifference,
    Percentiles,
    PiPrediction,
    RooflineEntry,
    Row,
    Session,
    StudyResults,
    Target,
    TimingPass,
)
from deployment_study.seed import label as policy_label
from device_emulation import roofline
from device_emulation.profiles import DeviceProfile, ProfileError, get_profile, load_profiles
from device_emulation.roofline import MachineFigures
from firmware_bridge.bench import percentiles_us
from firmware_bridge.client import BridgeClient, BridgeError
from firmware_bridge.device import package_versions
from firmware_bridge.launcher import BridgeProcess, BridgeStartError
from firmware_bridge.toy_policy import build_mlp_policy
from hil.run import CommandLineProgress, RunArgs
from hil.run import run as hil_run
from hil.setup import observation_key, policy_metadata
from nav_env.backends import DEFAULT_BACKEND, make_env
from nav_env.baselines import HeuristicPolicy
from nav_env.config import ConfigError, load_level, with_policy_observation
from nav_env.stats import wilson_interval

USAGE_EXIT, FAILURE_EXIT = EXIT_USAGE, EXIT_FAILURE  # the names callers and tests use


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
        help="--sim-only: resource profile (device_emulation/profiles.toml; default native); "
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
    p.add_argument(
        "--backend",
        choices=("embedded", "mujoco"),
        help="the closed loop's simulator (default embedded; mujoco: the rigid-body quadrotor, docs/dynamics.md)",
    )
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
    lat = p.add_argument_group("latency stage (does int8's speed on the board turn into success? docs/latency.md)")
    lat.add_argument(
        "--latency-study",
        action=argparse.BooleanOptionalAction,
        help="fly every model with a board prediction at its predicted delay, and the fp32/int8 delay sweep "
        "(needs --profile naming a board with roofline figures, e.g. pi3b)",
    )
    defaults_from(p, StudyArgs)  # each default written once, in StudyArgs
    p.set_defaults(models=None)  # shown as "the 12 shipped models", filled in below
    ns = vars(p.parse_args(argv))
    if ns["models"] is None:
        ns["models"] = [str(m) for m in SHIPPED]
    return StudyArgs(**ns)


def parse_models(paths: list[str], levels: list[str] | tuple[str, ...] = ()) -> dict[str, list[Model]]:
    """Models grouped by policy, fp32 first, then in PRECISIONS order. A group GROUP_LEVEL (LEVEL one of ``levels``)
    beside a group GROUP holds GROUP's models trained for that level: they join GROUP and fly LEVEL in its place."""
    named: dict[str, list[tuple[str, str]]] = {}
    for path in paths:
        if not Path(path).is_file():
            raise UserError(f"model file not found: {path}")
        found = group_and_precision(path)
        if found is None:
            raise UserError(
                f"cannot tell the precision of {path}: name it GROUP_PRECISION.onnx with PRECISION one of {', '.join(PRECISIONS)}"
            )
        named.setdefault(found[0], []).append((str(path), found[1]))
    groups: dict[str, list[Model]] = {}
    for name, files in named.items():
        base, level = next(
            (
                (name.removesuffix(f"_{lv}"), lv)
                for lv in levels
                if name.endswith(f"_{lv}") and name.removesuffix(f"_{lv}") in named
            ),
            (name, None),
        )
        for path, prec in files:
            clash = next((m for m in groups.get(base, []) if m.precision == prec and m.level == level), None)
            if clash is not None:
                raise UserError(f"two {prec} models for {name}: {path} and {clash.path}")
            groups.setdefault(base, []).append(Model(path, base, prec, level))
    for group, models in groups.items():
        for level in dict.fromkeys(m.level for m in models):
            if not any(m.precision == "fp32" and m.level == level for m in models):
                name = group if level is None else f"{group}_{level}"
                raise UserError(f"{name} has no fp32 model ({name}_fp32.onnx): ratios need the fp32 baseline")
        models.sort(key=lambda m: (m.level or "", PRECISIONS.index(m.precision)))
    return groups


def models_for_level(models: list[Model], level: str) -> list[Model]:
    """The group's models that fly ``level``: those trained for it, else the group's own."""
    return [m for m in models if m.level == level] or [m for m in models if m.level is None]


def check_args(args: StudyArgs) -> tuple[dict[str, list[Model]], DeviceProfile | None, MemoryPlan | None]:
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
    groups = parse_models(args.models, args.levels)
    return groups, profile, memory_stage.resolve_plan(args, profile)


# ---------------------------------------------------------------------------------- the study


class Study:
    def __init__(
        self,
        args: StudyArgs,
        groups: dict[str, list[Model]],
        profile: DeviceProfile | None,
        memory_plan: MemoryPlan | None = None,
        *,
        command: str,
    ):
        """``command``: what study.json records as the command that ran the study (main() passes what was typed)."""
        self.args, self.groups, self.profile, self.memory_plan = args, groups, profile, memory_plan
        self.out = Path(args.out)
        self.started = time.monotonic()
        self.measured_anything = False
        self.session_date = time.strftime("%Y-%m-%d %H:%M:%S %Z")
        self.results = StudyResults(
            command=command,
            date=self.session_date,
            args=args,
            mode="sim-only" if args.sim_only else f"device {args.host}:{args.port}",
            profile=(asdict(profile) | {"emulated": profile.emulated()}) if profile else None,
            host_versions=package_versions(),  # this side's packages (this session's); the device's: device.device
        )

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

    def recorded_anything(self) -> bool:
        r = self.results
        return bool(r.cells or r.timing or r.memory)

    def save(self) -> None:
        self.claim_out_dir()
        r = self.results
        r.rows = build_rows(r, self.groups)
        r.roofline = build_roofline(r, self.groups, self.profile)
        r.targets = build_targets(r.rows)
        write_json(self.out / "study.json", r)
        write_atomic(self.out / "study.md", render.render_markdown(r).encode())

    # -------------------------------------------------------------- stages

    def run(self) -> int:
        self.out.mkdir(parents=True, exist_ok=True)
        self.check_out_dir()
        r = self.results
        previous: dict[str, Any] = {}  # the study.json of the sessions before this one (a resumed or re-rendered study)
        try:  # earlier sessions of this study (a resumed study adds up their wall times)
            previous = json.loads((self.out / "study.json").read_text())
            r.sessions = [Session.from_dict(x) for x in previous.get("sessions") or []] or (
                [Session(date=previous["date"], wall_s=previous["wall_s"])] if previous.get("wall_s") else []
            )
        except (OSError, ValueError, KeyError, TypeError):
            r.sessions = []
        if r.sessions:
            r.date = r.sessions[0].date  # the study's date is when its first session ran
        r.rendered = self.session_date
        n_cells = len(self.groups) * len(self.args.levels)
        self.say(
            f"{len(self.args.models)} models in {len(self.groups)} groups x {len(self.args.levels)} levels x "
            f"{self.args.episodes} episodes; {r.mode}" + (f", profile {self.profile.name}" if self.profile else "")
        )
        if self.args.sim_only:
            self.measure_machine()
        done = 0
        for group, models in self.groups.items():
            for level in self.args.levels:
                done += 1
                self.closed_loop(group, models_for_level(models, level), level, done, n_cells)
                self.save()
            self.timing_pass(group, models)
            self.save()
        self.run_memory_stage(memory_stage.previous_measured(previous.get("memory")))
        self.save()
        self.run_latency_stage()
        self.save()
        r.complete = True
        if self.measured_anything:  # a rerun that only re-renders finished results is not a session
            r.sessions.append(
                Session(date=self.session_date, wall_s=time.monotonic() - self.started, host_versions=r.host_versions)
            )
        r.date = r.sessions[0].date if r.sessions else self.session_date
        r.wall_s = sum(x.wall_s for x in r.sessions)
        self.save()
        written = render.write_plots(self.out, r)
        written.append(write_study_html(self.out / "study.json", written))  # study.json and figures in one page
        print(render.render_markdown(r))
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
                "device_emulation.roofline",
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
        self.results.machine = MachineFigures.from_dict(json.loads(path.read_text()))

    def closed_loop(self, group: str, models: list[Model], level: str, k: int, n: int) -> None:
        cell = self.out / "cells" / level / group
        paths = [m.path for m in models]
        report = _finished_report(cell, paths, self.args.episodes, self.args.backend)
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
                backend=self.args.backend,
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
        self.results.device = self.results.device or report.get("device")
        self.results.cells[f"{level}/{group}"] = Cell(
            level=level,
            group=group,
            dir=str(cell),
            date=report.get("date"),
            runs=[
                {k2: v for k2, v in r.items() if k2 != "episodes"}
                | {
                    "episodes": [
                        {"episode": e["episode"], "seed": e["seed"], "outcome": e["outcome"], "steps": e["steps"]}
                        for e in r["episodes"]
                    ]
                }
                for r in report["runs"]
            ],
            comparisons=report["comparisons"],
        )

    def timing_pass(self, group: str, models: list[Model]) -> None:
        path = self.out / "timing" / f"{group}.json"
        if path.exists():
            earlier = TimingPass.from_dict(json.loads(path.read_text()))
            if {p: t.sha256 for p, t in earlier.models.items()} == {
                m.path: memory_stage.sha256_file(Path(m.path)) for m in models
            }:
                self.results.timing[group] = earlier
                return
            self.say(f"timing pass {policy_label(group)}: its models changed since {path} was written, timing again")
        a = self.args
        self.say(
            f"timing pass {policy_label(group)}: {a.timing_rounds} rounds x {a.timing_acts} acts per model, interleaved"
        )
        self.measured_anything = True
        # each model is timed on the observation it takes (a level's own models may add the attitude values)
        metadata = {m.path: policy_metadata(m.path) for m in models}
        recorded: dict[str, np.ndarray] = {}
        for meta in metadata.values():
            if observation_key(meta) not in recorded:
                recorded[observation_key(meta)] = recorded_observations(a.levels, a.seed, a.timing_acts, meta)
        obs = {m.path: recorded[observation_key(metadata[m.path])] for m in models}
        null = null_model(path.parent, obs[models[0].path].shape[1])
        obs[null.path] = obs[models[0].path]
        result = timing_pass(models, obs, a, self.profile, null)
        write_json(path, result)
        self.results.timing[group] = result
        summary = ", ".join(f"{Path(m).stem} p50 {t.device_inference_us.p50:.1f} us" for m, t in result.models.items())
        self.say(f"timing pass {policy_label(group)} done: {summary}")

    def run_memory_stage(self, previous: memory_stage.StageMeasured | None) -> None:
        def progress(memory: MemoryResult, part: MemfitResult) -> None:
            render_memfit.write_report(part)  # the part's memfit.md and figure, beside its memfit.json
            self.results.memory = memory  # results so far: saved, so an interrupted stage keeps them
            self.save()

        out = memory_stage.run_stage(
            memory_stage.StageInput(
                plan=self.memory_plan, out=self.out, say=self.say, previous=previous, progress=progress
            )
        )
        if out.memory is not None and out.memory.status == "done":
            written = render_memfit.plot_memory(out.runs, self.out / "memory_fit_over_time.png")
            out.memory.plot = written.name if written else None
        self.results.memory = out.memory
        self.measured_anything = self.measured_anything or out.measured

    def run_latency_stage(self) -> None:
        board = self.profile
        if not self.args.latency_study or board is None or not board.has_roofline():
            return
        # the roofline entries are those the save() before this stage built
        targets, skipped = latency_targets(self.results, self.groups, board)
        source = Path(self.args.memory_source).resolve()  # the swept group: the memory stage's source
        sweep_group = next(
            (m.group for ms in self.groups.values() for m in ms if Path(m.path).resolve() == source), None
        )
        result = latency_stage.run_stage(
            targets,
            board.name,
            self.args.episodes,
            self.args.seed,
            self.out,
            self.say,
            sweep_group=sweep_group or list(self.groups)[-1],
            backend=self.args.backend,
        )
        result.skipped = skipped
        self.measured_anything = self.measured_anything or result.flown > 0
        self.results.latency = result


def latency_targets(
    results: StudyResults, groups: dict[str, list[Model]], board: DeviceProfile
) -> tuple[list[latency_stage.LatencyTarget], list[str]]:
    """Every model whose board prediction is shown, at each level; then the memory stage's Air Learning-sized
    Policy III, its predicted delays flown by its source group's networks. Also what was left out, and why."""
    entries = {e.model: e for e in results.roofline}
    targets, skipped = [], []
    for cell in results.cells.values():
        for run in cell.runs:
            entry = entries.get(run["policy"])
            pred = entry.predicted_on_pi.get(board.name) if entry else None
            if pred is None or not pred.shown or pred.predicted_s is None:
                why = "no roofline entry" if pred is None else ", ".join(pred.missing) or "the roofline check failed"
                skipped.append(f"{cell.level} {Path(run['policy']).stem}: no {board.name} prediction ({why})")
                continue
            targets.append(
                latency_stage.LatencyTarget(
                    level=cell.level,
                    group=cell.group,
                    precision=entry.precision if entry else "",
                    model=run["policy"],
                    predicted_ms=pred.predicted_s * 1e3,
                    prediction="roofline",
                    loop_outcomes=[e["outcome"] for e in sorted(run["episodes"], key=lambda e: e["episode"])],
                )
            )
    memory = results.memory
    if memory is None or memory.models is None or memory.status != "done":
        return targets, skipped
    wide_source = Path(memory.models.source).resolve()
    source = next((m for ms in groups.values() for m in ms if Path(m.path).resolve() == wide_source), None)
    if source is None:
        skipped.append(f"Air Learning-sized: its source {memory.models.source} is not one of the study's models")
        return targets, skipped
    for precision, built in (("fp32", memory.models.fp32), ("int8", memory.models.int8)):
        big = roofline.predict_device(roofline.model_cost(built.path), board)
        slowdown, where = memory_slowdown(memory, built.path, board.memory_mb)
        if big.predicted_s is None or slowdown is None:
            skipped.append(f"Air Learning-sized {precision}: {where}")
            continue
        for level in results.args.levels:
            # the group's networks that fly this level (its models trained for the level, where it has them)
            flying = models_for_level(groups[source.group], level)
            stand_in = next((m for m in flying if m.precision == precision), None)
            shown = stand_in and entries.get(stand_in.path) and entries[stand_in.path].predicted_on_pi.get(board.name)
            if stand_in is None or not shown or not shown.shown:
                skipped.append(
                    f"Air Learning-sized {precision} on {level}: no checked {board.name} prediction for its stand-in"
                )
                continue
            targets.append(
                latency_stage.LatencyTarget(
                    level=level,
                    group=source.group,
                    precision=precision,
                    model=stand_in.path,
                    predicted_ms=big.predicted_s * 1e3 * slowdown,
                    prediction=f"roofline of the {built.bytes / 1e6:.0f} MB model x {slowdown:.2f} ({where})",
                    stand_in=latency_stage.STAND_IN,
                )
            )
    return targets, skipped


def memory_slowdown(memory: MemoryResult, model: str, memory_mb: int) -> tuple[float | None, str]:
    """How much slower the memory stage measured ``model`` at the board's RAM (with swap, as a Pi runs)
    than unconstrained: (factor, where) or (None, why not). A factor below 1 is taken as 1: a RAM limit does
    not make inference faster, so a measured speed-up is the host's noise."""
    rows = [r for r in memory.rows if Path(r.model) == Path(model) and r.infer_p50_ms]
    free = next((r for r in rows if r.condition == "unconstrained"), None)
    at_board = next((r for r in rows if r.condition == "constrained" and r.memory_limit_mb == memory_mb), None)
    if free is None or at_board is None:
        tried = [r for r in memory.rows if Path(r.model) == Path(model) and r.memory_limit_mb == memory_mb]
        if tried and not any(r.loaded for r in tried):
            return None, f"does not load at {memory_mb} MB (memory stage)"
        return None, f"the memory stage has no flight of it unconstrained and at {memory_mb} MB"
    assert free.infer_p50_ms and at_board.infer_p50_ms
    swap = f" + {at_board.swap_limit_mb} MB swap" if at_board.swap_limit_mb else ", no swap"
    measured = at_board.infer_p50_ms / free.infer_p50_ms
    where = f"memory stage, {memory_mb} MB{swap}, measured here"
    if measured < 1.0:
        return 1.0, f"{where}: {measured:.2f}x, no slowdown"
    return measured, where


def _cpu_prefix(profile: DeviceProfile | None) -> list[str]:
    """The profile's core pinning only (the measurement allocates a 256 MB DRAM working set)."""
    prefix = profile.launch_prefix() if profile else []
    return prefix[:3] if prefix[:1] == ["taskset"] else []


def _finished_report(cell: Path, paths: list[str], episodes: int, backend: str = "embedded") -> dict | None:
    try:
        report = json.loads((cell / "report.json").read_text())
    except (OSError, ValueError):
        return None
    runs = report.get("runs") or []
    if [r["policy"] for r in runs] != paths or any(len(r["episodes"]) != episodes for r in runs):
        return None
    if any(r.get("sha256") != memory_stage.sha256_file(Path(p)) for r, p in zip(runs, paths)):
        return None  # a model file changed since (retrained, re-quantized): its episodes are flown again
    if report["args"]["episodes"] != episodes or (report.get("backend") or DEFAULT_BACKEND) != backend:
        return None
    return report


def _can_resume(cell: Path, paths: list[str], args: StudyArgs, level: str) -> bool:
    log = cell / "run.jsonl"
    if not log.is_file():
        return False
    records, _ = read_journal(log)
    header = next((r for r in records if r.get("kind") == "run"), None)
    if header is None:
        return False
    old = header.get("args", {})
    return (
        old.get("policy") == paths
        and old.get("episodes") == args.episodes
        and old.get("seed") == args.seed
        and old.get("level") == level
        and (old.get("backend") or DEFAULT_BACKEND) == args.backend
        and any(r.get("kind") == "episode" for r in records)
    )


# ---------------------------------------------------------------------------------- timing pass


def recorded_observations(levels: list[str], seed: int, n: int, metadata: dict[str, str] | None = None) -> np.ndarray:
    """``n`` observations recorded from seeded episodes of each level flown by the scripted heuristic
    (evenly spread over the flights), so the timing pass sees real depth images and states; with a policy's
    ``metadata``, the observation it takes (its camera, the attitude values)."""
    per_level = []
    for level in levels:
        cfg = with_policy_observation(load_level(level), metadata or {})
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


NULL_MODEL = "null_model.onnx"  # timing/: a one-unit MLP, timed with each group for the runtime's fixed cost
NULL_MODEL_OPERATORS = 3  # its Gemm, Relu, Gemm


def null_model(folder: Path, obs_dim: int) -> Model:
    """A one-hidden-unit MLP (Gemm, Relu, Gemm; 4 KB of weights): its inference time is the runtime's fixed
    cost per call as the bridge sees it, which the roofline adds to each model's arithmetic."""
    path = folder / NULL_MODEL
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        write_atomic(path, build_mlp_policy(obs_dim=obs_dim, hidden=1, n_actions=2, action_output=False))
    return Model(path=str(path), group="null", precision="fp32")


def timing_pass(
    models: list[Model],
    obs: dict[str, np.ndarray],
    args: StudyArgs,
    profile: DeviceProfile | None,
    null: Model | None = None,
) -> TimingPass:
    """Device inference of every model over recorded observations (``obs``: by model path, the same flights seen
    through each model's observation), round-robin: each round runs ``timing_acts`` acts per model, in an order
    rotated every round. --sim-only: one bridge process per model (pinned by the profile), all alive at once;
    --host: the one device, re-loading each round.
    ``null``: a null model timed in the same rounds (TimingPass.null_model)."""
    timed = models + ([null] if null else [])
    processes: list[BridgeProcess] = []
    clients: dict[str, BridgeClient] = {}
    infer: dict[str, list[int]] = {m.path: [] for m in timed}
    rtt: dict[str, list[int]] = {m.path: [] for m in timed}
    sizes: dict[str, int | None] = {}
    shas: dict[str, str] = {}  # what the bridge loaded: a later study reuses the pass only for the same files
    try:
        if args.sim_only:
            for m in timed:
                proc = BridgeProcess(["--threads", str(profile.threads if profile else 1), "--actuator", "mock"])
                proc.args = (profile.launch_prefix() if profile else []) + proc.args
                processes.append(proc.start())
                client = BridgeClient(proc.endpoint, timeout_s=30.0)
                loaded = client.load_policy(m.path)
                sizes[m.path], shas[m.path] = loaded.size_bytes, loaded.sha256
                clients[m.path] = client
        else:
            host = args.host or ""
            host = f"[{host}]" if ":" in host and not host.startswith("[") else host
            shared = BridgeClient(f"tcp://{host}:{args.port}", timeout_s=30.0)
            clients = {m.path: shared for m in timed}
        for r in range(args.timing_rounds):
            order = timed[r % len(timed) :] + timed[: r % len(timed)]
            for m in order:
                client = clients[m.path]
                if not args.sim_only:
                    loaded = client.load_policy(m.path)
                    sizes[m.path], shas[m.path] = loaded.size_bytes, loaded.sha256
                seen = obs[m.path]
                for o in (
                    seen[: args.timing_acts]
                    if len(seen) >= args.timing_acts
                    else np.resize(seen, (args.timing_acts, seen.shape[1]))
                ):
                    res = client.act(o)
                    infer[m.path].append(res.infer_ns)
                    rtt[m.path].append(res.rtt_ns)
    finally:
        for c in {id(c): c for c in clients.values()}.values():
            c.close()
        for p in processes:
            p.close()

    def timing(m: Model) -> ModelTiming:
        return ModelTiming(
            precision=m.precision,
            model_bytes=sizes.get(m.path),
            sha256=shas.get(m.path),
            device_inference_us=Latency.from_dict(percentiles_us(infer[m.path])),
            round_trip_us=Latency.from_dict(percentiles_us(rtt[m.path])),
            acts=len(infer[m.path]),
        )

    return TimingPass(
        rounds=args.timing_rounds,
        acts_per_round=args.timing_acts,
        observations=len(next(iter(obs.values()))),
        models={m.path: timing(m) for m in models},
        null_model=timing(null) if null else None,
    )


# ---------------------------------------------------------------------------------- tables


def build_rows(results: StudyResults, groups: dict[str, list[Model]]) -> list[Row]:
    rows = []
    for cell in results.cells.values():
        base = cell.runs[0]  # the fp32
        comparisons = {c["policy"]: c for c in cell.comparisons}
        timing = results.timing.get(cell.group)
        base_t = _timing_of(timing, base["policy"])
        for run in cell.runs:
            model = next(m for m in groups[cell.group] if m.path == run["policy"])
            n = len(run["episodes"])
            successes = sum(e["outcome"] == "success" for e in run["episodes"])
            t = _timing_of(timing, run["policy"])
            comp = comparisons.get(run["policy"])
            mem = run["device_memory"]
            base_mem = base["device_memory"]
            low, high = wilson_interval(successes, n)
            rows.append(
                Row(
                    level=cell.level,
                    group=cell.group,
                    precision=model.precision,
                    model=run["policy"],
                    episodes=n,
                    successes=successes,
                    success_rate=successes / n if n else 0.0,
                    success_ci95=(low, high),
                    reported_success_rate=run["outcomes"]["success_rate"],
                    paired_vs_fp32=PairedDifference.from_dict(comp["success_difference"])
                    if comp and comp["success_difference"]
                    else None,
                    loop_inference_us=Percentiles(run["device_inference_us"]["p50"], run["device_inference_us"]["p99"]),
                    timing_inference_us=Percentiles(t.p50, t.p99) if t else None,
                    actuation_hz=run["actuation_hz"],
                    round_trip_us_p50=run["round_trip_us"]["p50"],
                    speedup_vs_fp32=base_t.p50 / t.p50 if t and base_t and t.p50 else None,
                    loop_speedup_vs_fp32=comp["inference_speedup"] if comp else (1.0 if run is base else None),
                    rss_bytes=mem["rss_bytes"],
                    peak_rss_bytes=mem["peak_rss_bytes"],
                    model_rss_bytes=mem.get("model_rss_bytes"),
                    model_bytes=run["model_bytes"],
                    peak_rss_ratio_vs_fp32=_ratio(base_mem["peak_rss_bytes"], mem["peak_rss_bytes"]),
                    model_rss_ratio_vs_fp32=_ratio(
                        base_mem.get("model_rss_bytes") or 0, mem.get("model_rss_bytes") or 0
                    ),
                    model_size_ratio_vs_fp32=_ratio(base["model_bytes"] or 0, run["model_bytes"] or 0),
                    deadline_misses=run["deadline_misses"],
                )
            )
    return rows


def _timing_of(timing: TimingPass | None, model: str) -> Latency | None:
    """A model's device inference in its group's timing pass (None: not run yet)."""
    t = timing.models.get(model) if timing else None
    return t.device_inference_us if t else None


def _ratio(a: float, b: float) -> float | None:
    return a / b if a and b else None


def build_roofline(
    results: StudyResults, groups: dict[str, list[Model]], profile: DeviceProfile | None
) -> list[RooflineEntry]:
    """Per model: cost, the check on this machine (sim-only) or on the device (--host), and the
    prediction for every board profile with roofline figures - shown only where the check agrees."""
    boards = {name: p for name, p in load_profiles().items() if p.has_roofline()}
    out = []
    for group, models in groups.items():
        for m in models:
            cost = roofline.model_cost(m.path)
            measured = _timing_of(results.timing.get(group), m.path)
            measured_s = measured.p50 / 1e6 if measured and measured.p50 else None
            if results.args.sim_only and results.machine:
                call_s = null_call_s(results.timing.get(group), results.machine)
                check = roofline.check_here(cost, results.machine, measured_s, call_s)
            elif not results.args.sim_only and profile is not None:
                check = roofline.check_device(cost, profile, measured_s)
            else:
                check = None
            agrees = bool(check and check.agrees)
            predicted = {}
            for name, board in boards.items():
                pred = roofline.predict_device(cost, board)
                predicted[name] = PiPrediction(
                    **asdict(pred), shown=agrees and pred.predicted_s is not None and not pred.missing
                )
            out.append(RooflineEntry(m.path, group, m.precision, cost, check, predicted))
    return out


def null_call_s(timing: TimingPass | None, machine: MachineFigures) -> float:
    """The runtime's fixed cost per call as the timing pass saw it: the null model's p50 less its own
    operators' (0 for a timing pass from before the null model)."""
    if timing is None or timing.null_model is None:
        return 0.0
    null_us = timing.null_model.device_inference_us.p50 - NULL_MODEL_OPERATORS * machine.operator_us
    return max(0.0, null_us) / 1e6


def build_targets(rows: list[Row]) -> list[Target]:
    """The issue's targets, judged on this run's measurements."""
    targets = []
    for r in rows:
        if r.precision == "int8" and r.paired_vs_fp32:
            d = r.paired_vs_fp32.diff
            targets.append(
                Target(
                    f"{policy_label(r.group)} int8 success within 2 points of fp32 on {r.level}",
                    f"{d * 100:+.1f} pts",
                    abs(d) <= 0.02 + 1e-12,
                )
            )
    big = max(
        {r.group for r in rows},
        key=lambda g: max((x.model_bytes or 0) for x in rows if x.group == g),
        default=None,
    )
    if big is not None:
        int8 = [r for r in rows if r.group == big and r.precision == "int8"]
        if int8:
            r = int8[0]
            s, z = r.speedup_vs_fp32, r.model_size_ratio_vs_fp32
            targets.append(
                Target(
                    f"{policy_label(big)} int8 >= 4x faster than fp32 (timing-pass p50)",
                    shown(s or None, ".2f", "x"),
                    bool(s and s >= 4.0),
                )
            )
            targets.append(
                Target(
                    f"{policy_label(big)} int8 >= 3.9x smaller than fp32 (model bytes)",
                    shown(z or None, ".2f", "x"),
                    bool(z and z >= 3.9),
                )
            )
            pk = r.peak_rss_ratio_vs_fp32
            targets.append(
                Target(
                    f"{policy_label(big)} int8 peak device RSS vs fp32 (reported, no target)",
                    shown(pk or None, ".2f", "x smaller"),
                    None,
                )
            )
    return targets


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
    if not study.recorded_anything():
        return  # nothing recorded: leave no study behind (and no claim on --out)
    with contextlib.suppress(Exception):
        study.save()
