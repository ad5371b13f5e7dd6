"""The deployment study's memory stage: does an Air Learning-sized Policy III fit a Pi 3b's RAM?

The seed (QuaRL) reports that its fp32 Policies II and III exceeded the Pi 3b's RAM and swapped. Our
policies see a 32 x 32 image, so they fit any Pi; this stage rebuilds the seed's situation and measures it:

1. models (cached, rebuilt only when the source changes): ``policies.widen`` composes the source
   policy's first layer with an area-resampling operator, giving a working policy on Air Learning's
   144 x 256 depth image (615 MB fp32 for Policy III), and ``quantize ptq`` makes its static int8;
   both under ``--memory-cache`` (default .cache/study-memory/SOURCE_SHA256[:16]/), checked by the
   sha256s in their metadata before reuse;
2. ``deployment_study.memfit`` flies each model unconstrained (the baseline) and under each RAM limit (memory
   cgroup, with or without swap: the profile's size with swap, without swap, and a tighter limit),
   a fresh bridge process per run. A limit at or below a model's weight bytes cannot hold the
   weights every inference reads: that run is short (one episode of ``--memory-thrash-acts`` acts),
   since each act then pages the weights back in and takes seconds;
3. results into ``study.data["memory"]``, per part under OUT/memory/PART/ (deployment_study.memfit's memfit.json,
   memfit.md, memory_over_time.png; a finished part is not run again), the combined plot
   OUT/memory_fit_over_time.png, and the markdown section.

Without root or a memory cgroup controller the stage records "skipped: <reason>" and the study goes on.
With ``--host`` no cgroup can be put around the Pi's process: the device's own RAM is the experiment,
so the section reports the device's total RAM (its hello) and each model's RSS from the closed loops.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from airq_cli import write_json
from deployment_study.memfit import TABLE_COLUMNS, table_row
from deployment_study.seed import TABLE4
from hil.run import UserError

ROOT = Path(__file__).resolve().parents[1]
MB = 1024 * 1024
DEFAULT_SOURCE = ROOT / "models" / "policy3_fp32.onnx"
DEFAULT_CACHE = ROOT / ".cache" / "study-memory"
TIGHT_MB = 512  # the default tight limit: below Policy III's 604 MB of first-layer weights at 144 x 256
THRASH_RATIO = 3.0  # inference p50 this many times the unconstrained one: "thrashes"
SAMPLE_KEYS = ("cgroup_samples", "bridge_memory")  # time series: kept in the parts' memfit.json, not in study.json


# ---------------------------------------------------------------------------------- arguments


def resolve_plan(args, profile) -> dict[str, Any] | None:
    """What the memory stage will do for these arguments (raises UserError on bad input):
    None (off), {"mode": "device"} (--host: report the device's RAM) or {"mode": "cgroup", ...}."""
    from deployment_study.memfit import MemfitError, parse_limit
    from nav_env.config import ConfigError, parse_camera

    on = args.memory_study
    profile_mb = profile.memory_mb if profile is not None else 0
    if on is None:
        on = bool(args.host) or bool(args.sim_only and (profile_mb or args.memory_limits))
    if not on:
        return None
    if args.host:
        return {"mode": "device"}
    for name in ("memory_swap_mb",):
        if getattr(args, name) < 0:
            raise UserError(f"--{name.replace('_', '-')} must be >= 0, got {getattr(args, name)}")
    for name in ("memory_episodes", "memory_thrash_acts", "memory_calibration_episodes"):
        if getattr(args, name) < 1:
            raise UserError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
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
    limits = []
    for spec in specs:
        try:
            mem, swap = parse_limit(str(spec), args.memory_swap_mb)
        except MemfitError as e:
            raise UserError(str(e).replace("--memory-mb", "--memory-limits")) from None
        if not 64 <= mem < total_mb:
            raise UserError(f"--memory-limits: RAM must be from 64 to below this machine's {total_mb} MB, got {mem}")
        if swap < 0:
            raise UserError(f"--memory-limits: swap must be >= 0 MB, got {spec}")
        limits.append([mem, swap])
    if len({tuple(x) for x in limits}) != len(limits):
        raise UserError(f"--memory-limits lists a limit twice: {specs}")
    return {
        "mode": "cgroup",
        "source": str(args.memory_source),
        "camera": f"{camera[0]}x{camera[1]}",
        "limits": limits,
        "swap_mb": max(s for _, s in limits),
        "episodes": args.memory_episodes,
        "thrash_acts": args.memory_thrash_acts,
        "calibration_episodes": args.memory_calibration_episodes,
        "heldout_episodes": HELDOUT_EPISODES,
        "cache": str(args.memory_cache),
        "seed": args.seed,
        "level": "default",
    }


HELDOUT_EPISODES = 10  # quantize's held-out agreement check of the int8 (stored in its metadata)


def _total_ram_mb() -> int:
    import os

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
    from deployment_study.memfit import MemfitError, read_onnx_metadata

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


def _build(target: Path, args: list[str], what: str) -> dict[str, Any]:
    """Run a build step (``python -m ...``) as its own process writing ``target`` through a temp file
    (its progress goes to our stderr); the build's wall time."""
    tmp = target.with_name(target.stem + ".partial.onnx")
    cmd = [sys.executable, "-m", *args, "-o", str(tmp)]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, stdout=sys.stderr, stderr=sys.stderr)
    if proc.returncode != 0:
        raise RuntimeError(f"memory stage: {what} failed (exit {proc.returncode}): {' '.join(cmd[2:])}")
    tmp.replace(target)
    return {"reused": False, "build_s": time.monotonic() - t0}


def build_models(plan: dict, say) -> dict[str, Any]:
    """The widened fp32 and its static int8, reused from the cache when their sha256s match."""
    from deployment_study.memfit import read_onnx_metadata

    source = Path(plan["source"])
    source_sha = sha256_file(source)
    fp32, int8 = large_model_paths(source, plan["camera"], Path(plan["cache"]), source_sha)
    fp32.parent.mkdir(parents=True, exist_ok=True)
    ok32, ok8, sha32 = cached_ok(fp32, int8, source_sha, plan["camera"], plan["calibration_episodes"])
    info: dict[str, Any] = {"source": str(source), "source_sha256": source_sha, "camera": plan["camera"]}
    if ok32:
        info["fp32"] = {"reused": True, "build_s": None}
        say(f"memory stage: reusing {fp32} (built from {source.name}, sha256 {source_sha[:12]})")
    else:
        say(f"memory stage: widening {source.name} to a {plan['camera']} camera -> {fp32}")
        info["fp32"] = _build(fp32, ["policies.widen", str(source), "--camera", plan["camera"]], "policies.widen")
        sha32 = sha256_file(fp32)
        ok8 = False
    if ok8:
        info["int8"] = {"reused": True, "build_s": None}
        say(f"memory stage: reusing {int8} (static int8 of {fp32.name}, sha256 {sha32[:12]})")
    else:
        say(
            f"memory stage: static int8 of {fp32.name}, calibrated on {plan['calibration_episodes']} episodes at {plan['camera']}"
        )
        info["int8"] = _build(
            int8,
            [
                "quantize",
                "ptq",
                str(fp32),
                "--to",
                "int8",
                *INT8_RECIPE_ARGS,
                "--calibration-episodes",
                str(plan["calibration_episodes"]),
                "--heldout-episodes",
                str(plan["heldout_episodes"]),
            ],
            "quantize ptq",
        )
    m8 = read_onnx_metadata(int8)
    info["fp32"] |= {"path": str(fp32), "sha256": sha32, "bytes": fp32.stat().st_size}
    agreement = m8.get("airq.quant.heldout_agreement")
    info["int8"] |= {
        "path": str(int8),
        "bytes": int8.stat().st_size,
        "source_sha256": m8.get("airq.quant.source_sha256"),
        "calibration": m8.get("airq.quant.calibration_episodes"),
        "method": m8.get("airq.quant.method"),
        "heldout_agreement": float(agreement) if agreement else None,
        "heldout_samples": m8.get("airq.quant.heldout_samples"),
    }
    return info


# ---------------------------------------------------------------------------------- runs


def plan_parts(models: list[tuple[str, int]], limits: list[list[int]], episodes: int, thrash_acts: int) -> list[dict]:
    """deployment_study.memfit runs, per model: the baseline and every limit above its weight bytes (full episodes),
    then the limits at or below its weight bytes (every inference must page weights back in): one
    short episode of ``thrash_acts`` acts."""
    parts = []
    for path, size in models:
        stem = Path(path).stem
        fits = [lim for lim in limits if lim[0] * MB > size]
        below = [lim for lim in limits if lim[0] * MB <= size]
        if fits:
            parts.append(
                {"name": stem, "model": path, "limits": fits, "baseline": True, "episodes": episodes, "max_steps": None}
            )
        if below:  # with no limit above the weights, the baseline flies the same short episode
            parts.append(
                {
                    "name": f"{stem}_below_weights",
                    "model": path,
                    "limits": below,
                    "baseline": not fits,
                    "episodes": 1,
                    "max_steps": thrash_acts,
                }
            )
    return parts


def _part_done(path: Path, part: dict, seed: int) -> list[dict] | None:
    try:
        result = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    c = result.get("config") or {}
    same = (
        c.get("models") == [part["model"]]
        and [list(x) for x in result.get("limits") or []] == part["limits"]
        and c.get("episodes") == part["episodes"]
        and c.get("max_steps") == part["max_steps"]
        and c.get("baseline") == part["baseline"]
        and c.get("seed") == seed
    )
    return result["rows"] if same else None


def run_stage(study) -> None:
    """The memory stage of deployment_study.study.Study (study.memory_plan says what to do)."""
    plan = study.memory_plan
    if plan is None:
        study.data["memory"] = None
        return
    if plan["mode"] == "device":
        study.data["memory"] = {"status": "device", "plan": plan}
        return
    from deployment_study.memfit import MemfitError, _add_ratios, plot_memory, run_memory_fit
    from device_emulation.memlimit import MemLimitError, SwapFile, active_swap_bytes, memory_cgroup_support

    support = memory_cgroup_support()
    mem: dict[str, Any] = {"status": "running", "plan": plan, "cgroup": support.reason if support.available else None}
    study.data["memory"] = mem
    if not support.available:
        mem.update(status="skipped", reason=support.reason)
        study.say(f"memory stage skipped: {support.reason}")
        return
    t0 = time.monotonic()
    mem["models"] = build_models(plan, study.say)
    models = [(mem["models"][p]["path"], mem["models"][p]["bytes"]) for p in ("fp32", "int8")]
    parts = plan_parts(models, plan["limits"], plan["episodes"], plan["thrash_acts"])
    root = study.out / "memory"
    todo, ran = [], False
    for part in parts:
        done = _part_done(root / part["name"] / "memfit.json", part, plan["seed"])
        part["rows"] = done
        if done is None:
            todo.append(part)
    swap = None
    swap_info = {"active_before_mb": active_swap_bytes() // MB, "created_mb": 0}
    try:
        if todo and plan["swap_mb"] > 0 and not swap_info["active_before_mb"]:
            try:
                swap = SwapFile(plan["swap_mb"]).open()
                swap_info["created_mb"] = plan["swap_mb"] if swap.created else 0
            except MemLimitError as e:
                mem.update(status="skipped", reason=f"cannot create a {plan['swap_mb']} MB swap file: {e}")
                study.say(f"memory stage skipped: {mem['reason']}")
                return
        for k, part in enumerate(parts, 1):
            if part["rows"] is not None:
                study.say(f"memory stage [{k}/{len(parts)}] {part['name']}: already done")
                continue
            lims = ", ".join(f"{m} MB + {s} MB swap" for m, s in part["limits"])
            study.say(
                f"memory stage [{k}/{len(parts)}] {part['name']}: "
                + ("unconstrained" + (", " if lims else "") if part["baseline"] else "")
                + lims
                + (
                    f"; {part['episodes']} episodes"
                    if part["max_steps"] is None
                    else f"; {part['max_steps']} acts (limit at or below the weights)"
                )
            )
            study.measured_anything = ran = True
            try:
                part["rows"] = run_memory_fit(
                    [part["model"]],
                    memory_mb=[f"{m}:{s}" for m, s in part["limits"]],
                    swap_mb=plan["swap_mb"],
                    episodes=part["episodes"],
                    seed=plan["seed"],
                    out_dir=root / part["name"],
                    level=plan["level"],
                    baseline=part["baseline"],
                    max_steps=part["max_steps"],
                    time_budget_s=TIME_BUDGET_S,
                    load_timeout_s=LOAD_TIMEOUT_S,
                    make_swap=False,
                )
            except MemfitError as e:
                raise UserError(f"memory stage: {e}") from None
            mem["rows"] = _collect(parts, _add_ratios)
            study.save()
    finally:
        if swap is not None:
            swap.close()
    written = plot_memory([r for part in parts for r in part["rows"]], study.out / "memory_fit_over_time.png")
    mem.update(
        status="done",
        rows=_collect(parts, _add_ratios),
        swap=swap_info | {"active_during_mb": None if swap is None else plan["swap_mb"]},
        plot=written.name if written else None,
        parts={p["name"]: str(root / p["name"]) for p in parts},
    )
    # the stage's own wall time, from the session that ran its parts (a re-render keeps it)
    stage_file = root / "stage.json"
    if ran:
        measured = {
            "wall_s": time.monotonic() - t0,
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "code": _code_version(),
            "build_s": {p: mem["models"][p]["build_s"] for p in ("fp32", "int8")},
        }
        write_json(stage_file, measured)
    else:
        try:
            measured = json.loads(stage_file.read_text())
        except (OSError, ValueError):  # a study from before stage.json: what its own session recorded
            old = (getattr(study, "previous", None) or {}).get("memory") or {}
            measured = old.get("measured") or (
                {
                    "wall_s": None,
                    "date": None,
                    "build_s": {p: (old["models"].get(p) or {}).get("build_s") for p in ("fp32", "int8")},
                }
                if old.get("models")
                else None
            )
    mem["measured"] = measured
    study.say("memory stage done: " + "; ".join(f"{r['name']} {_condition(r)}: {verdict(r)}" for r in mem["rows"]))


def _code_version() -> str | None:
    """The commit that measured, "+modified" when the bridge or deployment_study.memfit/memlimit differ from it (the
    bridge's loading decides the peak RSS)."""
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
                "deployment_study/memfit.py",
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


TIME_BUDGET_S = 180.0  # per run: no new episode after this long (a slow bridge)
LOAD_TIMEOUT_S = 600.0


def _collect(parts: list[dict], add_ratios) -> list[dict]:
    rows = [dict(r, cut_at_acts=part["max_steps"]) for part in parts if part["rows"] for r in part["rows"]]
    add_ratios(rows)  # the short runs below the weights against the same model's baseline
    for r in rows:
        for k in SAMPLE_KEYS:
            r.pop(k, None)
    return rows


# ---------------------------------------------------------------------------------- reading


def _condition(r: dict) -> str:
    if r.get("condition") == "unconstrained":
        return "unconstrained"
    return f"{r['memory_limit_mb']} MB RAM" + (
        f" + {r['swap_limit_mb']} MB swap" if r.get("swap_limit_mb") else ", no swap"
    )


def classify(r: dict) -> str:
    """skipped, oom, no-load, failed, baseline, thrashes, swapped or fits: from the row's measurements only."""
    if r.get("skipped"):
        return "skipped"
    if not r.get("loaded"):
        return "oom" if r.get("oom_kills") else "no-load"
    if not r.get("flown"):
        return "failed"
    if r.get("condition") == "unconstrained":
        return "baseline"
    slow = (r.get("vs_unconstrained") or {}).get("infer_p50_ms")
    if slow is not None and slow >= THRASH_RATIO:
        return "thrashes"
    return "swapped" if (r.get("swap_max_bytes") or 0) >= MB else "fits"


def verdict(r: dict) -> str:
    kind, v = classify(r), r.get("vs_unconstrained") or {}
    return {
        "skipped": lambda: f"skipped: {r.get('skipped')}",
        "oom": lambda: "does not fit: OOM-killed while loading",
        "no-load": lambda: f"did not load: {str(r.get('error', '?'))[:80]}",
        "failed": lambda: f"loaded, then failed: {str(r.get('error', '?'))[:80]}",
        "baseline": lambda: "baseline",
        "thrashes": lambda: f"thrashes: inference {v['infer_p50_ms']:,.0f}x slower than unconstrained",
        "swapped": lambda: (
            f"fits after swapping out {(r.get('swap_max_bytes') or 0) / MB:,.0f} MB"
            + (f" (loading {v['load_s']:.1f}x slower)" if (v.get("load_s") or 0) >= 1.5 else "")
            + (f", inference {v['infer_p50_ms']:.2f}x unconstrained" if v.get("infer_p50_ms") else "")
        ),
        "fits": lambda: (
            "fits" + (f": inference {v['infer_p50_ms']:.2f}x unconstrained" if v.get("infer_p50_ms") else "")
        ),
    }[kind]()


def _f(v, fmt="{:,.2f}") -> str:
    return "-" if v is None else fmt.format(v)


def _mb(v) -> str:
    return "-" if v is None else f"{v / MB:,.0f}"


def md_memory(data: dict) -> str:
    mem = data.get("memory")
    if not mem:
        return ""
    prof = (data.get("profile") or {}).get("name")
    title = (
        "## Does it fit in a Pi 3b's memory?"
        if prof == "pi3b" or mem.get("status") == "device"
        else f"## Does it fit in {prof or 'a small device'}'s memory?"
    )
    if mem["status"] == "device":
        return _md_device(data, title)
    plan = mem["plan"]
    limits = ", ".join(f"{m} MB" + (f" + {s} MB swap" if s else " without swap") for m, s in plan["limits"])
    out = [
        title,
        "",
        f"The seed's fp32 Policies II and III exceeded the Pi 3b's RAM and swapped. Our policies see a 32 x 32 image and fit any "
        f"Pi, so this stage rebuilds the seed's situation: `{Path(plan['source']).name}` widened (`policies.widen`, first layer "
        f"composed with an area-resampling operator, no retraining) to a {plan['camera']} depth image"
        + (" (Air Learning's)" if plan["camera"] == "144x256" else "")
        + ", and its "
        f"static int8, each flown in the closed loop (`deployment_study.memfit`) unconstrained and under RAM limits of {limits} (a memory "
        "cgroup around a fresh bridge process, one onnxruntime thread, pinned to one core).",
        "",
    ]
    if mem["status"] == "skipped":
        return "\n".join(out + [f"**skipped: {mem['reason']}**", ""])
    if mem["status"] != "done" and not mem.get("rows"):
        return "\n".join(out + ["Not finished yet.", ""])
    models = mem.get("models") or {}
    m32, m8 = models.get("fp32") or {}, models.get("int8") or {}
    measured = mem.get("measured")
    built_in = {
        p: ((measured or {}).get("build_s") or {}).get(p) or (models.get(p) or {}).get("build_s")
        for p in ("fp32", "int8")
    }
    if m32:
        agree = m8.get("heldout_agreement")
        out += [
            f"Models: `{Path(m32['path']).name}` {m32['bytes'] / 1e6:,.1f} MB (sha256 {m32['sha256'][:12]}, "
            + (f"built in {built_in['fp32']:.0f} s" if built_in["fp32"] else "from the cache")
            + f"); `{Path(m8['path']).name}` "
            f"{m8['bytes'] / 1e6:,.1f} MB, calibrated on {str(m8.get('calibration')).replace(' per level', ' episodes per level')} at {plan['camera']}"
            + (
                f", held-out action agreement with its fp32 {agree:.2%} over {m8.get('heldout_samples')} observations"
                if agree
                else ""
            )
            + (f", built in {built_in['int8']:.0f} s" if built_in["int8"] else ", from the cache")
            + ".",
            "",
        ]
    if measured and measured.get("wall_s"):
        built = sum(v or 0 for v in measured["build_s"].values())
        out += [
            f"Stage wall time: {measured['wall_s'] / 60:.1f} min ({measured['date']})"
            + (f", of which {built:.0f} s building the models" if built else ", models from the cache")
            + (f"; code {measured['code']}" if measured.get("code") else "")
            + ".",
            "",
        ]
    out += [
        f"{plan['episodes']} seeded episode(s) per run (seeds {plan['seed']}-{plan['seed'] + plan['episodes'] - 1}, level "
        f"`{plan['level']}`, lockstep loop); a limit at or below a model's weight bytes gets one episode cut at "
        f'{plan["thrash_acts"]} acts (each act pages the weights back in). "acts > 80 ms": share of acts that would miss a '
        "10 Hz control period's deadline. Major faults: whole run (during loading). "
        + _swap_line(mem.get("swap"), plan["swap_mb"]),
        "",
        "| model | condition | " + " | ".join(TABLE_COLUMNS) + " | episodes | reading |",
        "|---" * (len(TABLE_COLUMNS) + 4) + "|",
    ]
    for r in mem.get("rows") or []:
        if r.get("skipped") or not r.get("loaded") or not r.get("flown"):
            eps = "-"
        else:
            eps = (
                f"{r['steps']} acts (cut)" if r.get("cut_at_acts") else f"{r['success']}/{r['episodes']} succeeded"
            ) + (" (time budget)" if r.get("time_budget_hit") else "")
        out.append(table_row(r, r["name"], _condition(r), [eps, verdict(r)]))
    out += [
        "",
        *reading(mem),
        "",
        "**What is emulated, what is not.** Emulated: the RAM size (the cgroup caps the bridge's resident memory, anonymous "
        "and page cache, as a Pi's RAM does; above it the kernel reclaims and swaps inside the cgroup). Not emulated: a Pi's "
        "CPU, caches and memory bandwidth (every time here is this machine's), and its swap device: swap here is a file on "
        "this VM's fast virtual disk, far faster than a Pi's SD card, so **every slowdown here is a lower bound**. Shared "
        "libraries (Python, numpy, onnxruntime) that the host process had already read are charged to the host's cgroup, "
        "not the bridge's, so each limit is about 40 MB generous"
        + ("; the OS's own share of a Pi's 1 GB is left out by using 900 MB" if prof == "pi3b" else "")
        + ". The host side (simulator) is not limited.",
        "",
        f"Plot: {mem.get('plot') or 'memory_fit_over_time.png'} (cgroup RAM, swap and the bridge's RSS over each run). Per run: "
        "memory/PART/memfit.json (with the time series) and memfit.md.",
        "",
    ]
    return "\n".join(out)


def _swap_line(swap: dict | None, needed_mb: int) -> str:
    if not swap:
        return ""
    if not needed_mb:
        return "Swap: none (no limit asks for it)."
    if swap.get("created_mb"):
        return f"Swap: a {swap['created_mb']:,} MB file in /tmp, made for the stage and removed after."
    if swap.get("active_before_mb"):
        return f"Swap: the {swap['active_before_mb']:,} MB already active on this machine."
    return ""


def reading(mem: dict) -> list[str]:
    """Sentences drawn from the measured rows (no outcome is assumed)."""
    rows = mem.get("rows") or []
    models = mem.get("models") or {}
    lines = []
    by = {}
    for r in rows:
        by.setdefault(r["model"], []).append(r)
    for prec in ("fp32", "int8"):
        path = (models.get(prec) or {}).get("path")
        rs = by.get(path) or []
        base = next((r for r in rs if r.get("condition") == "unconstrained" and r.get("flown")), None)
        parts = []
        if base:
            parts.append(
                f"unconstrained it peaks at {_mb(base.get('peak_rss_bytes'))} MB RSS ({_mb(base.get('rss_bytes'))} MB "
                f"at the end), inference p50 {_f(base.get('infer_p50_ms'))} ms"
            )
        for r in rs:
            if r is base:
                continue
            parts.append(
                f"{_condition(r)}: {verdict(r)}" + (f" (p50 {_f(r.get('infer_p50_ms'))} ms)" if r.get("flown") else "")
            )
        if parts:
            lines.append(f"- **{prec}** (`{Path(path).name}`): " + "; ".join(parts) + ".")
    f32 = by.get((models.get("fp32") or {}).get("path")) or []
    i8 = by.get((models.get("int8") or {}).get("path")) or []
    lost = [r for r in f32 if classify(r) in ("oom", "no-load", "failed", "thrashes")]
    kept = [r for r in i8 if classify(r) in ("fits", "swapped")]
    if f32 and i8:
        slows = [
            r["vs_unconstrained"]["infer_p50_ms"] for r in kept if (r.get("vs_unconstrained") or {}).get("infer_p50_ms")
        ]
        lines.append(
            f"- Under the limits tried, fp32 fails to load or thrashes in {len(lost)} of "
            f"{sum(r.get('condition') == 'constrained' for r in f32)} runs; int8 loads and runs within {THRASH_RATIO:g}x of its "
            f"unconstrained inference time in {len(kept)} of {sum(r.get('condition') == 'constrained' for r in i8)}"
            + (
                f" (measured {min(slows):.2f}-{max(slows):.2f}x; this shared VM's noise is of that order)"
                if slows
                else ""
            )
            + "."
        )
        pairs = []
        for r in f32:
            if r.get("condition") != "constrained":
                continue
            q = next(
                (
                    x
                    for x in i8
                    if x.get("condition") == "constrained"
                    and x.get("memory_limit_mb") == r.get("memory_limit_mb")
                    and x.get("swap_limit_mb") == r.get("swap_limit_mb")
                ),
                None,
            )
            if q is None or not q.get("flown"):
                continue
            if r.get("flown") and r.get("infer_p50_ms") and q.get("infer_p50_ms"):
                pairs.append(
                    f"{_condition(r)}: fp32 {_f(r['infer_p50_ms'])} ms, int8 {_f(q['infer_p50_ms'])} ms "
                    f"(**{r['infer_p50_ms'] / q['infer_p50_ms']:,.1f}x**)"
                )
            else:
                pairs.append(f"{_condition(r)}: fp32 does not run, int8 {_f(q.get('infer_p50_ms'))} ms")
        b32u = next((r for r in f32 if classify(r) == "baseline"), None)
        b8u = next((r for r in i8 if classify(r) == "baseline"), None)
        if b32u and b8u:
            pairs.insert(
                0,
                f"unconstrained: fp32 {_f(b32u['infer_p50_ms'])} ms, int8 {_f(b8u['infer_p50_ms'])} ms "
                f"({b32u['infer_p50_ms'] / b8u['infer_p50_ms']:.1f}x)",
            )
        if pairs:
            p3 = TABLE4.table["policy3"]
            lines.append(
                "- Inference p50, fp32 against int8 (this machine's times): "
                + "; ".join(pairs)
                + f". The seed's Pi 3b: fp32 Policy III {p3.fp32_ms:.1f} ms, "
                f"int8 {p3.int8_ms:.1f} ms ({p3.speedup:.1f}x)."
            )
    b32 = next((r for r in f32 if r.get("condition") == "unconstrained" and r.get("flown")), None)
    b8 = next((r for r in i8 if r.get("condition") == "unconstrained" and r.get("flown")), None)
    if b32 and b8 and b8.get("peak_rss_bytes") and b8.get("rss_bytes"):
        lines.append(
            f"- Memory, int8 against fp32 (unconstrained): file {models['fp32']['bytes'] / models['int8']['bytes']:.2f}x "
            f"smaller, peak RSS {b32['peak_rss_bytes'] / b8['peak_rss_bytes']:.2f}x lower, RSS at the end "
            f"{b32['rss_bytes'] / b8['rss_bytes']:.2f}x lower (the bridge's runtime and onnxruntime's load-time copies "
            "do not shrink with the weights)."
        )
    return lines


def _md_device(data: dict, title: str) -> str:
    dev = (data.get("device") or {}).get("device") or {}
    ram = dev.get("ram_bytes")
    rows = data.get("rows") or []
    out = [
        title,
        "",
        f"Against a real device no memory cgroup can be put around the bridge's process: the device's own RAM is the "
        f"experiment. Device RAM (its hello, /proc/meminfo MemTotal): **{_mb(ram)} MB**. Per model, the bridge's RSS from "
        "the closed loops above (the one bridge serves all models in turn: the peak is the process's so far, the model's "
        "share is its RSS growth on loading). The Air Learning-sized models of the sim-only memory stage are not flown here "
        "(615 MB; the bridge's upload limit is 64 MB).",
        "",
    ]
    if not rows:
        return "\n".join(out + ["No cell finished yet.", ""])
    level = data["args"]["levels"][0]
    out += [
        "| model | RSS MB | peak RSS MB | model share MB | file MB | share of device RAM (RSS) |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r["level"] != level:
            continue
        share = f"{r['rss_bytes'] / ram:.1%}" if ram and r.get("rss_bytes") else "-"
        out.append(
            f"| {Path(r['model']).stem} | {_mb(r.get('rss_bytes'))} | {_mb(r.get('peak_rss_bytes'))} | "
            f"{_mb(r.get('model_rss_bytes'))} | {(r.get('model_bytes') or 0) / MB:,.2f} | {share} |"
        )
    return "\n".join(out + [""])
