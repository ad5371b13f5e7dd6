"""The deployment study's memory stage: does an Air Learning-sized Policy III fit a Pi 3b's RAM?

The seed (QuaRL) reports that its fp32 Policies II and III exceeded the Pi 3b's RAM and swapped. Our
policies see a 32 x 32 image, so they fit any Pi; this stage rebuilds the seed's situation and measures it:

1. models (cached, rebuilt only when the source changes): ``policies.widen`` composes the source
   policy's first layer with an area-resampling operator, giving a working policy on Air Learning's
   144 x 256 depth image (615 MB fp32 for Policy III), and ``quantize ptq`` makes its static int8;
   both under ``--memory-cache`` (default .cache/study-memory/SOURCE_SHA256[:16]/), checked by the
   sha256s in their metadata before reuse;
2. the memory-fit experiment (``deployment_study.memfit_run``) flies each model unconstrained (the
   baseline) and under each RAM limit (memory cgroup, with or without swap: the profile's size with swap,
   without swap, and a tighter limit), a fresh bridge process per run. A limit at or below a model's weight bytes cannot hold the
   weights every inference reads: that run is short (one episode of ``--memory-thrash-acts`` acts),
   since each act then pages the weights back in and takes seconds;
3. results: a :class:`MemoryResult` the study stores as study.json's "memory", and per part the
   experiment's memfit.json under OUT/memory/PART/ (a finished part is not run again). This module
   renders nothing: the study writes each part's memfit.md and figure and the combined figure
   OUT/memory_fit_over_time.png (deployment_study.render_memfit), and study.md's section
   (deployment_study.render).

:func:`run_stage` takes a :class:`StageInput` (the plan, the study's folder, where to report) and returns a
:class:`StageOutput`; it calls ``StageInput.progress`` after each part with the results so far and the part's
own MemfitResult, so the study can save and render them (an interrupted stage keeps its finished parts).

Without root or a memory cgroup controller the stage records "skipped: <reason>" and the study goes on.
With ``--host`` no cgroup can be put around the Pi's process: the device's own RAM is the experiment,
so the section reports the device's total RAM (its hello) and each model's RSS from the closed loops.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airq_cli import UserError, known_fields, write_json
from deployment_study.args import ROOT, StudyArgs
from deployment_study.memfit_run import (
    MemfitError,
    MemfitResult,
    MemfitRow,
    MemfitRun,
    Ratios,
    add_ratios,
    parse_limit,
    read_onnx_metadata,
    run_memory_fit,
)
from device_emulation.memlimit import MemLimitError, SwapFile, active_swap_bytes, memory_cgroup_support
from nav_env.config import ConfigError, parse_camera

if TYPE_CHECKING:
    from device_emulation.profiles import DeviceProfile

MB = 1024 * 1024
TIGHT_MB = 512  # the default tight limit: below Policy III's 604 MB of first-layer weights at 144 x 256
THRASH_RATIO = 3.0  # inference p50 this many times the unconstrained one: "thrashes"
HELDOUT_EPISODES = 10  # quantize's held-out agreement check of the int8 (stored in its metadata)
TIME_BUDGET_S = 180.0  # per run: no new episode after this long (a slow bridge)
LOAD_TIMEOUT_S = 600.0


# ---------------------------------------------------------------------------------- the stage's records


@dataclass(frozen=True, kw_only=True)
class DevicePlan:
    """--host: no cgroup can be put around the device's process; its own RAM is reported."""

    mode: str = "device"


@dataclass(frozen=True, kw_only=True)
class CgroupPlan:
    """Sim-only: the large models flown in memory cgroups at these limits."""

    mode: str = "cgroup"
    source: str  # the fp32 policy widened to the large camera
    camera: str  # HxW
    limits: list[tuple[int, int]]  # (RAM MB, swap MB) of each constrained run
    swap_mb: int  # the most swap a limit asks for
    episodes: int  # per run (a limit at or below the weights: one episode of thrash_acts acts)
    thrash_acts: int
    calibration_episodes: int  # of the large model's int8
    heldout_episodes: int
    cache: str  # where the large models are kept between studies
    seed: int
    level: str


MemoryPlan = DevicePlan | CgroupPlan


@dataclass
class BuiltModel:
    """A large model of the stage: built, or reused from the cache."""

    path: str
    bytes: int
    reused: bool
    build_s: float | None  # None: reused


@dataclass
class WideFp32(BuiltModel):
    sha256: str  # the file's


@dataclass
class WideInt8(BuiltModel):
    source_sha256: str | None  # the fp32 it was quantized from (its metadata)
    calibration: str | None  # "20 per level"
    method: str | None
    heldout_agreement: float | None  # action agreement with the fp32 on held-out observations
    heldout_samples: str | None


@dataclass
class LargeModels:
    source: str
    source_sha256: str
    camera: str
    fp32: WideFp32
    int8: WideInt8

    def build_s(self) -> dict[str, float | None]:
        return {"fp32": self.fp32.build_s, "int8": self.int8.build_s}


@dataclass
class StageSwap:
    active_before_mb: int  # swap active on this machine when the stage started
    created_mb: int = 0  # a swap file made for the stage (removed after)
    active_during_mb: int | None = None


@dataclass(frozen=True)
class StageMeasured:
    """The stage's own wall time, from the session that ran its parts (OUT/memory/stage.json; a re-render keeps it)."""

    wall_s: float | None
    date: str | None
    build_s: dict[str, float | None]  # "fp32" / "int8": seconds building the model, None: from the cache
    code: str | None = None  # the commit that measured, "+modified" when the measuring code differed from it

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StageMeasured:
        return cls(**{"build_s": {}, "wall_s": None, "date": None} | known_fields(cls, data))


@dataclass
class StageRow(MemfitRow):
    """A memfit row as the study keeps it: without the time series (they stay in memory/PART/memfit.json)."""

    cut_at_acts: int | None = None  # a limit at or below the weights: the run's one episode was cut here


@dataclass(kw_only=True)
class MemoryResult:
    """study.json's "memory": what the stage did and found."""

    status: str  # "device" (--host: reported from the closed loops), "running", "skipped", "done"
    plan: MemoryPlan
    cgroup: str | None = None  # the memory cgroup controller used
    reason: str | None = None  # skipped: why
    models: LargeModels | None = None
    rows: list[StageRow] = field(default_factory=list)
    swap: StageSwap | None = None
    plot: str | None = None  # memory_fit_over_time.png, in the study's folder
    parts: dict[str, str] = field(default_factory=dict)  # part name -> its folder (memfit.json, memfit.md, plot)
    measured: StageMeasured | None = None


@dataclass(frozen=True)
class Part:
    """One memory-fit run (deployment_study.memfit_run) of the stage: a model at some limits."""

    name: str  # its folder under OUT/memory/
    model: str
    limits: list[tuple[int, int]]
    baseline: bool  # also unconstrained
    episodes: int
    max_steps: int | None  # cut each episode here (limits at or below the weights)


@dataclass(frozen=True)
class StageInput:
    """What the stage needs from the study."""

    plan: MemoryPlan | None  # None: the stage is off
    out: Path  # the study's folder: memory/PART/ goes there
    say: Callable[[str], None]  # progress lines
    previous: StageMeasured | None = None  # what an earlier session of the study recorded (for a re-render)
    # after each part: the results so far and the part's own memfit result (its folder: config.out_dir)
    progress: Callable[[MemoryResult, MemfitResult], None] = lambda memory, part: None


@dataclass(frozen=True)
class StageOutput:
    memory: MemoryResult | None  # None: the stage is off
    measured: bool  # this session ran at least one part (a session that only re-renders measured nothing)
    runs: list[MemfitRun] = field(default_factory=list)  # every part's runs, time series included (the study's figure)


# ---------------------------------------------------------------------------------- arguments


def resolve_plan(args: StudyArgs, profile: DeviceProfile | None) -> MemoryPlan | None:
    """What the memory stage will do for these arguments (raises UserError on bad input):
    None (off), a DevicePlan (--host: report the device's RAM) or a CgroupPlan."""
    on = args.memory_study
    profile_mb = profile.memory_mb if profile is not None else 0
    if on is None:
        on = bool(args.host) or bool(args.sim_only and (profile_mb or args.memory_limits))
    if not on:
        return None
    if args.host:
        return DevicePlan()
    if args.memory_swap_mb < 0:
        raise UserError(f"--memory-swap-mb must be >= 0, got {args.memory_swap_mb}")
    for flag, value in (
        ("--memory-episodes", args.memory_episodes),
        ("--memory-thrash-acts", args.memory_thrash_acts),
        ("--memory-calibration-episodes", args.memory_calibration_episodes),
    ):
        if value < 1:
            raise UserError(f"{flag} must be >= 1, got {value}")
    if not Path(args.memory_source).is_file():
        raise UserError(f"--memory-source: model file not found: {args.memory_source}")
    try:
        camera = parse_camera(args.memory_camera)
    except ConfigError as e:
        raise UserError(f"--memory-camera: {e}") from None
    specs = args.memory_limits
    if not specs:
        if not profile_mb:
            raise UserError("--memory-study needs --memory-limits or a --profile with a memory size (e.g. pi3b)")
        specs = [str(profile_mb), f"{profile_mb}:0"] + ([str(TIGHT_MB)] if TIGHT_MB < profile_mb else [])
    total_mb = _total_ram_mb()
    limits: list[tuple[int, int]] = []
    for spec in specs:
        try:
            mem, swap = parse_limit(str(spec), args.memory_swap_mb)
        except MemfitError as e:
            raise UserError(str(e).replace("--memory-mb", "--memory-limits")) from None
        if not 64 <= mem < total_mb:
            raise UserError(f"--memory-limits: RAM must be from 64 to below this machine's {total_mb} MB, got {mem}")
        if swap < 0:
            raise UserError(f"--memory-limits: swap must be >= 0 MB, got {spec}")
        limits.append((mem, swap))
    if len(set(limits)) != len(limits):
        raise UserError(f"--memory-limits lists a limit twice: {specs}")
    return CgroupPlan(
        source=str(args.memory_source),
        camera=f"{camera[0]}x{camera[1]}",
        limits=limits,
        swap_mb=max(s for _, s in limits),
        episodes=args.memory_episodes,
        thrash_acts=args.memory_thrash_acts,
        calibration_episodes=args.memory_calibration_episodes,
        heldout_episodes=HELDOUT_EPISODES,
        cache=str(args.memory_cache),
        seed=args.seed,
        level="default",
    )


def _total_ram_mb() -> int:
    return (os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")) // MB


# ---------------------------------------------------------------------------------- models


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(8 * MB), b""):
            h.update(block)
    return h.hexdigest()


def _group(source: Path) -> str:
    stem = source.stem
    return stem[: -len("_fp32")] if stem.endswith("_fp32") else stem


def large_model_paths(source: Path, camera: str, cache: Path, source_sha: str) -> tuple[Path, Path]:
    d = cache / source_sha[:16]
    name = f"{_group(source)}_{camera}"
    return d / f"{name}_fp32.onnx", d / f"{name}_int8.onnx"


# The shipped Policy III's int8 recipe (u8s7, per-tensor: scripts/int8_schemes.sh), and the metadata that
# says a cached file was made with it (a file of an older recipe, e.g. full-range u8s8, is rebuilt).
INT8_RECIPE_ARGS = ("--scheme", "u8s7", "--no-per-channel", "--no-float-split-sum")
INT8_RECIPE_METADATA = {"airq.quant.scheme": "u8s7", "airq.quant.per_channel": "false"}


def cached_ok(
    fp32: Path, int8: Path, source_sha: str, camera: str, calibration_episodes: int
) -> tuple[bool, bool, str | None]:
    """(fp32 reusable, int8 reusable, fp32 sha256): each is reusable when its metadata names its source
    by the sha256 it was built from (and, for the int8, the calibration asked for and the recipe)."""

    def meta(p: Path) -> dict[str, str] | None:
        try:
            return read_onnx_metadata(p) if p.is_file() else None
        except MemfitError:
            return None

    m32 = meta(fp32)
    ok32 = bool(m32 and m32.get("airq.widen.source_sha256") == source_sha and m32.get("airq.widen.camera") == camera)
    if not ok32:
        return False, False, None
    sha32 = sha256_file(fp32)
    m8 = meta(int8)
    ok8 = bool(
        m8
        and m8.get("airq.quant.source_sha256") == sha32
        and (m8.get("airq.quant.calibration_episodes") or "").split(" ")[0] == str(calibration_episodes)
        and all(m8.get(k) == v for k, v in INT8_RECIPE_METADATA.items())
    )
    return True, ok8, sha32


def _build(target: Path, args: list[str], what: str) -> float:
    """Run a build step (``python -m ...``) as its own process writing ``target`` through a temp file
    (its progress goes to our stderr); the build's wall time."""
    tmp = target.with_name(target.stem + ".partial.onnx")
    cmd = [sys.executable, "-m", *args, "-o", str(tmp)]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, stdout=sys.stderr, stderr=sys.stderr)
    if proc.returncode != 0:
        raise RuntimeError(f"memory stage: {what} failed (exit {proc.returncode}): {' '.join(cmd[2:])}")
    tmp.replace(target)
    return time.monotonic() - t0


def build_models(plan: CgroupPlan, say: Callable[[str], None]) -> LargeModels:
    """The widened fp32 and its static int8, reused from the cache when their sha256s match."""
    source = Path(plan.source)
    source_sha = sha256_file(source)
    fp32, int8 = large_model_paths(source, plan.camera, Path(plan.cache), source_sha)
    fp32.parent.mkdir(parents=True, exist_ok=True)
    ok32, ok8, sha32 = cached_ok(fp32, int8, source_sha, plan.camera, plan.calibration_episodes)
    build32: float | None = None
    build8: float | None = None
    if ok32 and sha32 is not None:
        say(f"memory stage: reusing {fp32} (built from {source.name}, sha256 {source_sha[:12]})")
    else:
        say(f"memory stage: widening {source.name} to a {plan.camera} camera -> {fp32}")
        build32 = _build(fp32, ["policies.widen", str(source), "--camera", plan.camera], "policies.widen")
        sha32 = sha256_file(fp32)
        ok8 = False
    if ok8:
        say(f"memory stage: reusing {int8} (static int8 of {fp32.name}, sha256 {sha32[:12]})")
    else:
        say(
            f"memory stage: static int8 of {fp32.name}, calibrated on {plan.calibration_episodes} episodes at {plan.camera}"
        )
        build8 = _build(
            int8,
            [
                "quantize",
                "ptq",
                str(fp32),
                "--to",
                "int8",
                *INT8_RECIPE_ARGS,
                "--calibration-episodes",
                str(plan.calibration_episodes),
                "--heldout-episodes",
                str(plan.heldout_episodes),
            ],
            "quantize ptq",
        )
    m8 = read_onnx_metadata(int8)
    agreement = m8.get("airq.quant.heldout_agreement")
    return LargeModels(
        source=str(source),
        source_sha256=source_sha,
        camera=plan.camera,
        fp32=WideFp32(path=str(fp32), bytes=fp32.stat().st_size, reused=build32 is None, build_s=build32, sha256=sha32),
        int8=WideInt8(
            path=str(int8),
            bytes=int8.stat().st_size,
            reused=build8 is None,
            build_s=build8,
            source_sha256=m8.get("airq.quant.source_sha256"),
            calibration=m8.get("airq.quant.calibration_episodes"),
            method=m8.get("airq.quant.method"),
            heldout_agreement=float(agreement) if agreement else None,
            heldout_samples=m8.get("airq.quant.heldout_samples"),
        ),
    )


# ---------------------------------------------------------------------------------- runs


def plan_parts(
    models: list[tuple[str, int]], limits: list[tuple[int, int]], episodes: int, thrash_acts: int
) -> list[Part]:
    """Memory-fit runs, per model: the baseline and every limit above its weight bytes (full episodes),
    then the limits at or below its weight bytes (every inference must page weights back in): one
    short episode of ``thrash_acts`` acts."""
    parts = []
    for path, size in models:
        stem = Path(path).stem
        fits = [(m, s) for m, s in limits if m * MB > size]
        below = [(m, s) for m, s in limits if m * MB <= size]
        if fits:
            parts.append(Part(stem, path, fits, baseline=True, episodes=episodes, max_steps=None))
        if below:  # with no limit above the weights, the baseline flies the same short episode
            parts.append(
                Part(f"{stem}_below_weights", path, below, baseline=not fits, episodes=1, max_steps=thrash_acts)
            )
    return parts


def _part_done(path: Path, part: Part, seed: int) -> MemfitResult | None:
    """The result of a part a session before this one finished with the same settings, else None."""
    try:
        result = MemfitResult.from_dict(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    c = result.config
    same = (
        c.models == [Path(part.model)]
        and result.limits == part.limits
        and c.episodes == part.episodes
        and c.max_steps == part.max_steps
        and c.baseline == part.baseline
        and c.seed == seed
    )
    return result if same else None


def run_stage(inp: StageInput) -> StageOutput:
    """The memory stage of the deployment study (``inp.plan`` says what to do)."""
    plan = inp.plan
    if plan is None:
        return StageOutput(None, measured=False)
    if isinstance(plan, DevicePlan):
        return StageOutput(MemoryResult(status="device", plan=plan), measured=False)

    support = memory_cgroup_support()
    mem = MemoryResult(status="running", plan=plan, cgroup=support.reason if support.available else None)
    if not support.available:
        mem.status, mem.reason = "skipped", support.reason
        inp.say(f"memory stage skipped: {support.reason}")
        return StageOutput(mem, measured=False)
    t0 = time.monotonic()
    mem.models = models = build_models(plan, inp.say)
    parts = plan_parts(
        [(models.fp32.path, models.fp32.bytes), (models.int8.path, models.int8.bytes)],
        plan.limits,
        plan.episodes,
        plan.thrash_acts,
    )
    root = inp.out / "memory"
    done = {part.name: _part_done(root / part.name / "memfit.json", part, plan.seed) for part in parts}
    todo = [part for part in parts if done[part.name] is None]
    ran = False
    swap = None
    swap_info = StageSwap(active_before_mb=active_swap_bytes() // MB)
    try:
        if todo and plan.swap_mb > 0 and not swap_info.active_before_mb:
            try:
                swap = SwapFile(plan.swap_mb).open()
                swap_info.created_mb = plan.swap_mb if swap.created else 0
            except MemLimitError as e:
                mem.status, mem.reason = "skipped", f"cannot create a {plan.swap_mb} MB swap file: {e}"
                inp.say(f"memory stage skipped: {mem.reason}")
                return StageOutput(mem, measured=False)
        for k, part in enumerate(parts, 1):
            if done[part.name] is not None:
                inp.say(f"memory stage [{k}/{len(parts)}] {part.name}: already done")
                continue
            lims = ", ".join(f"{m} MB + {s} MB swap" for m, s in part.limits)
            inp.say(
                f"memory stage [{k}/{len(parts)}] {part.name}: "
                + ("unconstrained" + (", " if lims else "") if part.baseline else "")
                + lims
                + (
                    f"; {part.episodes} episodes"
                    if part.max_steps is None
                    else f"; {part.max_steps} acts (limit at or below the weights)"
                )
            )
            ran = True
            try:
                done[part.name] = result = run_memory_fit(
                    [part.model],
                    memory_mb=[f"{m}:{s}" for m, s in part.limits],
                    swap_mb=plan.swap_mb,
                    episodes=part.episodes,
                    seed=plan.seed,
                    out_dir=root / part.name,
                    level=plan.level,
                    baseline=part.baseline,
                    max_steps=part.max_steps,
                    time_budget_s=TIME_BUDGET_S,
                    load_timeout_s=LOAD_TIMEOUT_S,
                    make_swap=False,
                )
            except MemfitError as e:
                raise UserError(f"memory stage: {e}") from None
            mem.rows = _collect(parts, done)
            inp.progress(mem, result)
    finally:
        if swap is not None:
            swap.close()
    swap_info.active_during_mb = None if swap is None else plan.swap_mb
    mem.status = "done"
    mem.rows = _collect(parts, done)
    mem.swap = swap_info
    mem.parts = {p.name: str(root / p.name) for p in parts}
    # the stage's own wall time, from the session that ran its parts (a re-render keeps it)
    stage_file = root / "stage.json"
    if ran:
        mem.measured = StageMeasured(
            wall_s=time.monotonic() - t0,
            date=time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            code=_code_version(),
            build_s=models.build_s(),
        )
        write_json(stage_file, mem.measured)
    else:
        try:
            mem.measured = StageMeasured.from_dict(json.loads(stage_file.read_text()))
        except (OSError, ValueError, TypeError):  # a study from before stage.json: what its own session recorded
            mem.measured = inp.previous
    inp.say("memory stage done: " + "; ".join(f"{r.name} {condition_label(r)}: {verdict(r)}" for r in mem.rows))
    runs = [r for result in done.values() if result is not None for r in result.rows]
    return StageOutput(mem, measured=ran, runs=runs)


def previous_measured(memory: Mapping[str, Any] | None) -> StageMeasured | None:
    """What the memory stage of an earlier session's study.json recorded of its own measuring: its
    "measured", or (a study from before that field) the build times of its models."""
    if not memory:
        return None
    if memory.get("measured"):
        return StageMeasured.from_dict(memory["measured"])
    models = memory.get("models")
    if not models:
        return None
    return StageMeasured(
        wall_s=None, date=None, build_s={p: (models.get(p) or {}).get("build_s") for p in ("fp32", "int8")}
    )


def _code_version() -> str | None:
    """The commit that measured, "+modified" when the bridge or deployment_study.memfit_run/memlimit differ from it
    (the bridge's loading decides the peak RSS)."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10
        )
        dirty = subprocess.run(
            [
                "git",
                "status",
                "--porcelain",
                "--",
                "firmware_bridge",
                "deployment_study/memfit_run.py",
                "device_emulation/memlimit.py",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + (" +modified" if dirty.stdout.strip() else "")


def _collect(parts: list[Part], done: Mapping[str, MemfitResult | None]) -> list[StageRow]:
    """The finished parts' rows without their time series; the short runs below the weights compared
    with the same model's baseline (another part's)."""
    rows = []
    for part in parts:
        result = done[part.name]
        rows += [StageRow(**r.summary_fields(), cut_at_acts=part.max_steps) for r in (result.rows if result else [])]
    add_ratios(rows)
    return rows


# ---------------------------------------------------------------------------------- reading


def condition_label(r: MemfitRow) -> str:
    if r.condition == "unconstrained":
        return "unconstrained"
    return f"{r.memory_limit_mb} MB RAM" + (f" + {r.swap_limit_mb} MB swap" if r.swap_limit_mb else ", no swap")


def classify(r: MemfitRow) -> str:
    """skipped, oom, no-load, failed, baseline, thrashes, swapped or fits: from the row's measurements only."""
    if r.skipped:
        return "skipped"
    if not r.loaded:
        return "oom" if r.oom_kills else "no-load"
    if not r.flown:
        return "failed"
    if r.condition == "unconstrained":
        return "baseline"
    slow = (r.vs_unconstrained or Ratios()).infer_p50_ms
    if slow is not None and slow >= THRASH_RATIO:
        return "thrashes"
    return "swapped" if (r.swap_max_bytes or 0) >= MB else "fits"


def verdict(r: MemfitRow) -> str:
    kind, v = classify(r), r.vs_unconstrained or Ratios()
    if kind == "skipped":
        return f"skipped: {r.skipped}"
    if kind == "oom":
        return "does not fit: OOM-killed while loading"
    if kind == "no-load":
        return f"did not load: {str(r.error or '?')[:80]}"
    if kind == "failed":
        return f"loaded, then failed: {str(r.error or '?')[:80]}"
    if kind == "baseline":
        return "baseline"
    if kind == "thrashes":
        return f"thrashes: inference {v.infer_p50_ms:,.0f}x slower than unconstrained"
    inference = f"inference {v.infer_p50_ms:.2f}x unconstrained" if v.infer_p50_ms else ""
    if kind == "swapped":
        return (
            f"fits after swapping out {(r.swap_max_bytes or 0) / MB:,.0f} MB"
            + (f" (loading {v.load_s:.1f}x slower)" if (v.load_s or 0) >= 1.5 else "")
            + (f", {inference}" if inference else "")
        )
    return "fits" + (f": {inference}" if inference else "")
