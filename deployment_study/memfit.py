"""Does a policy fit a Pi-sized RAM? The seed's swap effect, measured (issue #9).

    python -m deployment_study.memfit --model out/memfit/policy3_airlearning_fp32.onnx \\
        --model out/memfit/policy3_airlearning_int8.onnx --memory-mb 900 --swap-mb 2048 --episodes 10 --out out/memfit/run

For each model the bridge (``python -m firmware_bridge.serve --policy FILE``: loaded from a local file,
one onnxruntime thread, pinned to one core) is started twice, each time as a fresh process in a fresh
memory cgroup (device_emulation.memlimit): once unconstrained (the baseline, measured the same way) and once with
its RAM capped at ``--memory-mb`` (the seed's Raspberry Pi 3b has about 900 MB usable) and
``--swap-mb`` of swap (a swap file is created for the run if none is active, and removed after).
Each run flies the same seeded episodes in the closed loop (hil.loop.run_closed_loop over ZeroMQ) at
the model's own camera size (from its metadata: 144 x 256 for a policies.widen model).

Recorded per model and condition: did it load (or was it OOM-killed), time to load, device inference
p50/p99, round trip p50/p99, closed-loop rate, the bridge's RSS and peak RSS (its own status), the
cgroup's RAM usage, peak, swap and major page faults over time, success; constrained / unconstrained
ratios. Results: OUT/memfit.json, OUT/memfit.md, OUT/memory_over_time.png (written atomically).

The loop is lockstep by default (no act deadline to speak of: the simulator waits for every action),
so a swapping model's slowness shows up as latency and a lower loop rate instead of as hover steps;
the share of acts slower than a 10 Hz control period's deadline (80 ms) is reported beside. With
``--rate-hz`` the loop is paced and late acts fly hover, as in hil.run.

What is emulated: a RAM limit (the cgroup caps resident memory as the Pi's 1 GB does; the kernel
reclaims and swaps inside it). What is not: a Pi's CPU, caches, memory bandwidth and its swap
device - swap here is a file on this machine's disk, much faster than a Pi's SD card, so the slowdown
measured here is a lower bound. Needs root and a memory cgroup controller; without them the
constrained runs are skipped with the reason (the baseline still runs).
"""

from __future__ import annotations

import argparse
import mmap
import os
import platform
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from airq_cli import EXIT_USAGE, ArgumentParser, UserError, defaults_from, output_dir, run

USAGE_EXIT = EXIT_USAGE  # the name this module used
MB = 1024 * 1024
PI3B_MEMORY_MB = 900  # the seed's Raspberry Pi 3b: 1 GB, about 900 MB usable
CONTROL_DEADLINE_MS = 80.0  # 80% of the 100 ms control period (hil.loop.DEADLINE_FRACTION)


class MemfitError(UserError, ValueError):
    """Bad input: one line, exit 2."""


@dataclass
class MemfitConfig:
    models: list[Path]
    # one constrained run per limit: RAM MB, or (RAM MB, swap MB) / "RAM:SWAP" to set that run's swap
    memory_mb: list[int | tuple[int, int] | str] = field(default_factory=lambda: [PI3B_MEMORY_MB])
    swap_mb: int = (
        2048  # swap a constrained bridge may use unless its limit says (a swap file is made if none is active)
    )
    episodes: int = 10
    seed: int = 0
    level: str = "default"
    camera: tuple[int, int] | None = None  # None: each model's own (its airq.env_config)
    out_dir: Path = Path("out/memfit/run")
    cpu: int | None = 0  # core the bridge is pinned to (taskset); None: not pinned
    threads: int = 1  # onnxruntime intra-op threads
    rate_hz: float | None = None  # None: lockstep loop (every action applied, however slow)
    time_budget_s: float | None = 900.0  # per run: no new episode starts after this long flying (a thrashing bridge)
    load_timeout_s: float = 900.0  # the bridge must load and answer within this
    request_timeout_s: float = 120.0  # per status/reset request (a swapping bridge is slow to answer)
    max_steps: int | None = None  # cap episode length (default: the level's 500)
    baseline: bool = True  # also run each model unconstrained
    make_swap: bool = True  # create a swap file when none is active
    sample_period_s: float = 0.25
    extra: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------- input
def read_onnx_metadata(path: Path) -> dict[str, str]:
    """metadata_props of an ONNX file without parsing its (possibly 600 MB) graph: walks the top-level
    protobuf fields of ModelProto and decodes only field 14 (StringStringEntryProto key=1, value=2)."""

    def varint(buf, i: int) -> tuple[int, int]:
        shift = value = 0
        while True:
            if i >= len(buf):
                raise MemfitError(f"{path}: truncated, not an ONNX model")
            b = buf[i]
            i += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value, i
            shift += 7
            if shift > 63:
                raise MemfitError(f"{path}: not an ONNX model (bad varint)")

    meta: dict[str, str] = {}
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            raise MemfitError(f"{path}: empty file, not an ONNX model")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            i = 0
            while i < size:
                key, i = varint(buf, i)
                fnum, wire = key >> 3, key & 7
                if wire == 0:
                    _, i = varint(buf, i)
                elif wire == 2:
                    n, i = varint(buf, i)
                    if i + n > size:
                        raise MemfitError(f"{path}: truncated, not an ONNX model")
                    if fnum == 14:
                        entry, j, kv = bytes(buf[i : i + n]), 0, {}
                        while j < len(entry):
                            k2, j = varint(entry, j)
                            m, j = varint(entry, j)
                            kv[k2 >> 3] = entry[j : j + m].decode("utf-8", "replace")
                            j += m
                        meta[kv.get(1, "")] = kv.get(2, "")
                    i += n
                elif wire == 1:
                    i += 8
                elif wire == 5:
                    i += 4
                else:
                    raise MemfitError(f"{path}: not an ONNX model (wire type {wire})")
    return meta


def model_config(path: Path, level: str, camera: tuple[int, int] | None, max_steps: int | None):
    """The env config a model flies in: its level, its own camera size (or ``camera``)."""
    from nav_env.config import ConfigError, camera_overrides, camera_overrides_from_metadata, load_level

    meta = read_onnx_metadata(path)
    overrides = camera_overrides(camera) if camera else camera_overrides_from_metadata(meta)
    if max_steps:
        overrides["task.max_steps"] = max_steps
    try:
        cfg = load_level(level, overrides or None)
    except ConfigError as e:
        raise MemfitError(str(e)) from None
    obs_dim = meta.get("airq.obs_dim")
    if obs_dim is not None and obs_dim.isdigit() and int(obs_dim) != cfg.obs_dim:
        raise MemfitError(
            f"{path}: takes {obs_dim} observation values, its {cfg.camera.height}x{cfg.camera.width} camera gives {cfg.obs_dim}"
        )
    return cfg, meta


def parse_limit(spec: int | tuple[int, int] | list[int] | str, default_swap_mb: int) -> tuple[int, int]:
    """900 -> (900, default swap); "900:0" or (900, 0) -> RAM 900 MB with 0 MB swap."""
    if isinstance(spec, str):
        mem, sep, swap = spec.partition(":")
        try:
            return int(mem), int(swap) if sep else default_swap_mb
        except ValueError:
            raise MemfitError(f"--memory-mb must be MB or MB:SWAP_MB (e.g. 900 or 900:0), got {spec!r}") from None
    if isinstance(spec, (tuple, list)) and len(spec) == 2:
        return int(spec[0]), int(spec[1])
    if isinstance(spec, int) and not isinstance(spec, bool):
        return spec, default_swap_mb
    raise MemfitError(f"a memory limit must be MB or (MB, swap MB), got {spec!r}")


def limits(c: MemfitConfig) -> list[tuple[int, int]]:
    return [parse_limit(m, c.swap_mb) for m in c.memory_mb]


def check_config(c: MemfitConfig) -> None:
    if not c.models:
        raise MemfitError("give at least one --model")
    for p in c.models:
        if not Path(p).is_file():
            raise MemfitError(f"model file not found: {p}")
    total_mb = (os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")) // MB if hasattr(os, "sysconf") else 1 << 30
    if c.swap_mb < 0:
        raise MemfitError(f"--swap-mb must be >= 0, got {c.swap_mb}")
    if not c.memory_mb:
        raise MemfitError("give at least one --memory-mb")
    for m, swap in limits(c):
        if not 64 <= m < total_mb:
            raise MemfitError(f"--memory-mb must be from 64 to below this machine's {total_mb} MB, got {m}")
        if swap < 0:
            raise MemfitError(f"swap of a limit must be >= 0 MB, got {swap}")
    if c.time_budget_s is not None and c.time_budget_s <= 0:
        raise MemfitError(f"--time-budget-s must be positive, got {c.time_budget_s}")
    if c.episodes < 1:
        raise MemfitError(f"--episodes must be >= 1, got {c.episodes}")
    if c.threads < 1:
        raise MemfitError(f"--threads must be >= 1, got {c.threads}")
    if c.cpu is not None and not 0 <= c.cpu < (os.cpu_count() or 1):
        raise MemfitError(f"--cpu must be a core from 0 to {(os.cpu_count() or 1) - 1}, got {c.cpu}")
    if c.rate_hz is not None and c.rate_hz <= 0:
        raise MemfitError(f"--rate-hz must be positive, got {c.rate_hz}")
    if c.max_steps is not None and c.max_steps < 1:
        raise MemfitError(f"--max-steps must be >= 1, got {c.max_steps}")
    if c.load_timeout_s <= 0 or c.request_timeout_s <= 0:
        raise MemfitError("timeouts must be positive")


# ---------------------------------------------------------------------------------------------- one run
def _pct(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


class _Budget(Exception):
    pass


def _fly_one(
    c: MemfitConfig, path: Path, cfg, condition: str, cgroup, memory_mb: int | None = None, swap_mb: int | None = None
) -> dict[str, Any]:
    """Start the bridge for ``path`` (in ``cgroup`` if given), fly the episodes, return the row."""
    from device_emulation.memlimit import CgroupSampler
    from firmware_bridge.launcher import BridgeProcess, BridgeStartError
    from hil.client import BridgeClient, BridgeError
    from hil.loop import ControlLink, default_deadline_s, run_closed_loop
    from nav_env.backends import make_env
    from nav_env.stats import wilson_interval

    row: dict[str, Any] = {
        "model": str(path),
        "name": path.name,
        "condition": condition,
        "memory_limit_mb": memory_mb if condition == "constrained" else None,
        "swap_limit_mb": swap_mb if condition == "constrained" else None,
        "model_bytes": path.stat().st_size,
        "camera": f"{cfg.camera.height}x{cfg.camera.width}",
        "obs_dim": cfg.obs_dim,
        "cgroup": cgroup.describe() if cgroup else None,
    }
    sampler = CgroupSampler(cgroup, c.sample_period_s).start() if cgroup else None
    bridge = BridgeProcess(
        ["--policy", str(path), "--threads", str(c.threads), "--actuator", "mock", "--log-level", "warning"],
        startup_timeout_s=c.load_timeout_s,
    )
    prefix = cgroup.launch_prefix() if cgroup else []
    if c.cpu is not None and shutil.which("taskset"):
        prefix += ["taskset", "-c", str(c.cpu)]
    bridge.args = prefix + bridge.args
    t0 = time.monotonic()
    client = None
    try:
        try:
            bridge.start()
        except BridgeStartError as e:
            row.update(
                loaded=False,
                load_s=time.monotonic() - t0,
                exit_code=bridge.process.returncode if bridge.process else None,
                error=str(e).splitlines()[0][:300],
            )
            return row
        row["load_s"] = time.monotonic() - t0
        if sampler:
            sampler.sample("loaded")
        client = BridgeClient(bridge.endpoint, timeout_s=c.request_timeout_s, retries=1)
        hello = client.hello()
        policy = hello.get("policy") or {}
        row.update(
            loaded=True,
            bridge_pid=bridge.pid,
            policy_load_s=(policy.get("load_time_ns") or 0) / 1e9,
            policy_rss_delta_bytes=policy.get("rss_delta_bytes"),
        )
        status0 = client.status()
        row["rss_after_load_bytes"], row["peak_rss_after_load_bytes"] = (
            status0.get("rss_bytes"),
            status0.get("peak_rss_bytes"),
        )
        env = make_env(cfg)
        deadline_s = 3600.0 if c.rate_hz is None else default_deadline_s(cfg, c.rate_hz)
        link = ControlLink(client, deadline_s, max_outage_s=max(60.0, c.request_timeout_s * 2))
        t_fly = time.monotonic()
        holder: dict[str, Any] = {}

        def on_episode(ep, rec) -> None:
            holder["rec"] = rec
            if (
                c.time_budget_s is not None
                and time.monotonic() - t_fly > c.time_budget_s
                and len(rec.episodes) < c.episodes
            ):
                raise _Budget

        try:
            rec = run_closed_loop(
                client,
                cfg,
                c.episodes,
                c.seed,
                rate_hz=c.rate_hz,
                keep_trajectories=0,
                env=env,
                link=link,
                on_episode=on_episode,
            )
            row["time_budget_hit"] = False
        except _Budget:
            rec = holder["rec"]
            rec.status_end = client.status()
            row["time_budget_hit"] = True
        except BridgeError as e:
            row.update(
                flown=False,
                error=f"{type(e).__name__}: {str(e)[:300]}",
                exit_code=bridge.process.poll() if bridge.process else None,
            )
            return row
        row["fly_s"] = time.monotonic() - t_fly
        infer_ms = [n / 1e6 for n in rec.infer_ns]
        rtt_ms = [n / 1e6 for n in rec.rtt_ns]
        steps = sum(e.steps for e in rec.episodes)
        k = sum(e.success for e in rec.episodes)
        rss = [m[1] for m in rec.memory]
        row.update(
            flown=True,
            episodes=len(rec.episodes),
            steps=steps,
            success=k,
            success_rate=k / len(rec.episodes),
            success_ci95=list(wilson_interval(k, len(rec.episodes))),
            outcomes=[e.outcome for e in rec.episodes],
            infer_p50_ms=_pct(infer_ms, 50),
            infer_p99_ms=_pct(infer_ms, 99),
            infer_max_ms=max(infer_ms) if infer_ms else None,
            rtt_p50_ms=_pct(rtt_ms, 50),
            rtt_p99_ms=_pct(rtt_ms, 99),
            loop_hz=steps / rec.loop_s if rec.loop_s else None,
            acts_over_control_deadline=float(np.mean(np.array(rtt_ms) > CONTROL_DEADLINE_MS)) if rtt_ms else None,
            deadline_misses=rec.deadline_misses,
            rss_bytes=rec.status_end.get("rss_bytes"),
            peak_rss_bytes=rec.status_end.get("peak_rss_bytes"),
            rss_min_flying_bytes=min(rss) if rss else None,
            rss_max_flying_bytes=max(rss) if rss else None,
            bridge_memory=[{"t_s": t, "rss_bytes": r, "peak_rss_bytes": p} for t, r, p in rec.memory],
        )
        return row
    finally:
        if client is not None:
            client.close()
        exit_code = bridge.stop()
        row.setdefault("exit_code", exit_code)
        bridge.close()
        if sampler:
            samples = sampler.stop()
            sampler.sample("end")
            row["cgroup_samples"] = samples
            row.update(_cgroup_summary(samples))


def _cgroup_summary(samples: list[dict]) -> dict[str, Any]:
    def col(k: str) -> list[int]:
        return [s[k] for s in samples if s.get(k) is not None]

    faults = col("pgmajfault")
    loaded = next((s for s in samples if s.get("label") == "loaded"), None)
    return {
        "cgroup_peak_bytes": max(col("peak_bytes") or [0]) or None,
        "cgroup_usage_max_bytes": max(col("usage_bytes") or [0]) or None,
        "swap_max_bytes": max(col("swap_bytes") or [0]),
        "major_faults": (faults[-1] - faults[0]) if len(faults) > 1 else 0,
        "major_faults_load": (loaded["pgmajfault"] - faults[0])
        if loaded and faults and loaded.get("pgmajfault") is not None
        else None,
        "oom_kills": max(col("oom_kill") or [0]),
        "limit_hits": max(col("limit_hits") or [0]),
    }


# ---------------------------------------------------------------------------------------------- the experiment
def run_memory_fit(
    models: list[Path | str],
    memory_mb: int | list[int] = PI3B_MEMORY_MB,
    swap_mb: int = 2048,
    episodes: int = 10,
    camera: tuple[int, int] | None = None,
    seed: int = 0,
    out_dir: Path | str = "out/memfit/run",
    **options: Any,
) -> list[dict[str, Any]]:
    """Run every model unconstrained and under ``memory_mb`` MB RAM + ``swap_mb`` MB swap; write
    OUT/memfit.json, memfit.md, memory_over_time.png; return one row per (model, condition).

    Rows of a condition that cannot run here (not root, no memory cgroup) have ``skipped`` set to
    the reason; every other row has ``loaded`` and, once flown, the latency/memory/success figures.
    ``memory_mb``: one limit (900, "900:0" or (900, 0): RAM MB with its own swap MB) or a list of them,
    one constrained run each.
    ``options``: the other MemfitConfig fields (level, cpu, threads, rate_hz, load_timeout_s, ...).
    Raises MemfitError on bad input."""
    c = MemfitConfig(
        models=[Path(m) for m in models],
        memory_mb=[memory_mb] if isinstance(memory_mb, (int, str, tuple)) else list(memory_mb),
        swap_mb=swap_mb,
        episodes=episodes,
        camera=camera,
        seed=seed,
        out_dir=Path(out_dir),
        **options,
    )
    check_config(c)
    cfgs = {p: model_config(p, c.level, c.camera, c.max_steps) for p in c.models}
    from device_emulation.memlimit import (
        MemLimitError,
        MemoryCgroup,
        SwapFile,
        active_swap_bytes,
        memory_cgroup_support,
    )

    support = memory_cgroup_support()
    started = time.time()
    t0 = time.monotonic()
    rows: list[dict[str, Any]] = []
    pairs = limits(c)
    swap_needed = max((sw for _, sw in pairs), default=0)
    swap_info: dict[str, Any] = {
        "requested_mb": swap_needed,
        "active_before_bytes": active_swap_bytes(),
        "created_mb": 0,
    }
    skip_reason = None if support.available else support.reason
    swap = None
    try:
        if skip_reason is None and swap_needed > 0 and c.make_swap and not swap_info["active_before_bytes"]:
            try:
                swap = SwapFile(swap_needed).open()
                swap_info["created_mb"] = swap_needed if swap.created else 0
            except MemLimitError as e:
                skip_reason = f"cannot create swap: {e}"
        elif skip_reason is None and swap_needed > 0 and not swap_info["active_before_bytes"]:
            skip_reason = "no swap active and make_swap is off"
        swap_info["active_during_bytes"] = active_swap_bytes()
        if skip_reason:
            print(f"deployment_study.memfit: constrained runs skipped: {skip_reason}", file=sys.stderr)
        for path in c.models:
            cfg, meta = cfgs[path]
            conditions = ([("unconstrained", 0, None)] if c.baseline else []) + [
                ("constrained", m, sw) for m, sw in pairs
            ]
            for condition, limit, swap_limit in conditions:
                label = condition + (f" {limit} MB + {swap_limit} MB swap" if limit else "")
                print(f"deployment_study.memfit: {path.name} {label} ...", file=sys.stderr, flush=True)
                if condition == "constrained" and skip_reason:
                    rows.append(
                        {
                            "model": str(path),
                            "name": path.name,
                            "condition": condition,
                            "memory_limit_mb": limit,
                            "swap_limit_mb": swap_limit,
                            "skipped": skip_reason,
                        }
                    )
                    continue
                if skip_reason:  # baseline without a cgroup: bridge figures only
                    rows.append(_fly_one(c, path, cfg, condition, None))
                    continue
                try:
                    with MemoryCgroup(f"memfit-{condition}", limit, swap_limit, support) as cg:
                        rows.append(_fly_one(c, path, cfg, condition, cg, limit, swap_limit))
                except MemLimitError as e:
                    print(f"deployment_study.memfit: {path.name} {label} skipped: {e}", file=sys.stderr)
                    rows.append(
                        {
                            "model": str(path),
                            "name": path.name,
                            "condition": condition,
                            "memory_limit_mb": limit,
                            "swap_limit_mb": swap_limit,
                            "skipped": str(e),
                        }
                    )
                    continue
                rows[-1]["source_sha256"] = meta.get("airq.widen.source_sha256") or meta.get("airq.quant.source_sha256")
                print(f"deployment_study.memfit:   {_one_line(rows[-1])}", file=sys.stderr, flush=True)
    finally:
        if swap is not None:
            swap.close()
    _add_ratios(rows)
    wall = time.monotonic() - t0
    result = {
        "command": " ".join(["python -m deployment_study.memfit", *sys.argv[1:]])
        if Path(sys.argv[0]).stem in ("memfit", "__main__")
        else None,
        "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(started)),
        "wall_s": wall,
        "machine": _machine(),
        "cgroup": {"available": support.available, "version": support.version, "detail": support.reason},
        "swap": swap_info,
        "config": {
            k: (str(v) if isinstance(v, Path) else [str(x) for x in v] if k == "models" else v)
            for k, v in c.__dict__.items()
        },
        "emulated": (
            "RAM: the bridge's cgroup caps its resident memory (anonymous + page cache) at memory_mb, as a Pi's RAM "
            "does; above it the kernel reclaims and swaps inside the cgroup"
        ),
        "not_emulated": (
            "a Pi's CPU, caches and memory bandwidth; its swap device: swap here is a file on this machine's "
            "disk, much faster than a Pi's SD card, so slowdowns are lower bounds; the host side is not limited"
        ),
        "limits": pairs,
        "rows": rows,
    }
    out = Path(c.out_dir)
    from airq_cli import write_atomic, write_json

    write_json(out / "memfit.json", result)
    write_atomic(out / "memfit.md", format_markdown(result).encode())
    plot_memory(rows, out / "memory_over_time.png")
    return rows


def _machine() -> dict[str, Any]:
    from firmware_bridge.device import cpu_model

    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "ram_mb": (os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")) // MB,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "load_avg": os.getloadavg(),
    }


def _add_ratios(rows: list[dict]) -> None:
    base = {r["model"]: r for r in rows if r.get("condition") == "unconstrained" and r.get("flown")}
    for r in rows:
        b = base.get(r["model"])
        if r.get("condition") != "constrained" or not r.get("flown") or b is None:
            continue
        ratio = {}
        for k in ("infer_p50_ms", "infer_p99_ms", "rtt_p50_ms", "load_s"):
            if r.get(k) and b.get(k):
                ratio[k] = r[k] / b[k]
        if r.get("loop_hz") and b.get("loop_hz"):
            ratio["loop_hz"] = r["loop_hz"] / b["loop_hz"]
        if r.get("peak_rss_bytes") and b.get("peak_rss_bytes"):
            ratio["peak_rss"] = r["peak_rss_bytes"] / b["peak_rss_bytes"]
        r["vs_unconstrained"] = ratio


TABLE_COLUMNS = (
    "loads?",
    "load s",
    "inference p50 / p99 ms",
    "loop Hz",
    "acts > 80 ms",
    "peak RSS MB",
    "RSS end MB",
    "cgroup peak MB",
    "swap max MB",
    "major faults (load)",
)


def table_row(r: dict, name: str, condition: str, tail: list[str]) -> str:
    """One markdown row of a memory-fit table: name, condition, the TABLE_COLUMNS cells, then ``tail``."""
    if r.get("skipped"):
        cells = [f"skipped: {r['skipped']}"] + [""] * (len(TABLE_COLUMNS) - 1)
    elif not r.get("loaded") or not r.get("flown"):
        cells = [
            f"**no** (exit {r.get('exit_code')}, OOM kills {r.get('oom_kills')})" if not r.get("loaded") else "yes",
            _f(r.get("load_s"), "{:.1f}"),
            "-",
            "-",
            "-",
            "-",
            "-",
            _mb(r.get("cgroup_peak_bytes")),
            _mb(r.get("swap_max_bytes")),
            str(r.get("major_faults")),
        ]
    else:
        cells = [
            "yes",
            f"{r['load_s']:.1f}",
            f"{_f(r.get('infer_p50_ms'))} / {_f(r.get('infer_p99_ms'))}",
            _f(r.get("loop_hz"), "{:,.1f}"),
            _f(r.get("acts_over_control_deadline"), "{:.1%}"),
            _mb(r.get("peak_rss_bytes")),
            _mb(r.get("rss_bytes")),
            _mb(r.get("cgroup_peak_bytes")),
            _mb(r.get("swap_max_bytes")),
            f"{r.get('major_faults')} ({r.get('major_faults_load')})",
        ]
    return "| " + " | ".join([name, condition, *cells, *tail]) + " |"


def _mb(v) -> str:
    return f"{v / MB:,.0f}" if v else ("0" if v == 0 else "-")


def _f(v, fmt="{:,.2f}") -> str:
    return fmt.format(v) if v is not None else "-"


def _one_line(r: dict) -> str:
    if r.get("skipped"):
        return f"skipped: {r['skipped']}"
    if not r.get("loaded"):
        return f"did not load ({r.get('error', '')[:120]}), OOM kills {r.get('oom_kills')}"
    if not r.get("flown"):
        return f"loaded in {r['load_s']:.1f} s, then failed: {r.get('error', '')[:120]}"
    return (
        f"load {r['load_s']:.1f} s, inference p50 {r['infer_p50_ms']:.2f} ms p99 {r['infer_p99_ms']:.2f} ms, "
        f"{r['loop_hz']:.1f} Hz, peak RSS {_mb(r['peak_rss_bytes'])} MB, swap {_mb(r.get('swap_max_bytes'))} MB, "
        f"major faults {r.get('major_faults')}, success {r['success']}/{r['episodes']}"
    )


def format_markdown(result: dict) -> str:
    c = result["config"]
    lines = [
        "# Memory fit: " + ", ".join(f"{m} MB RAM + {sw} MB swap" for m, sw in result["limits"]) + " vs unconstrained",
        "",
        f"{result['date_utc']} UTC, {result['machine']['cpu']} ({result['machine']['cores']} cores, {result['machine']['ram_mb']:,} MB), "
        f"kernel {result['machine']['kernel']}, {result['cgroup']['detail']}; run wall time {result['wall_s']:.0f} s; "
        f"{c['episodes']} episodes (seeds {c['seed']}-{c['seed'] + c['episodes'] - 1}), level {c['level']}, bridge on "
        f"{'core ' + str(c['cpu']) if c['cpu'] is not None else 'any core'}, {c['threads']} onnxruntime thread(s), "
        f"{'lockstep loop' if c['rate_hz'] is None else str(c['rate_hz']) + ' Hz paced loop'}.",
        "",
        "| model | condition | " + " | ".join(TABLE_COLUMNS) + " | success |",
        "|---" * (len(TABLE_COLUMNS) + 3) + "|",
    ]
    for r in result["rows"]:
        cond = r["condition"] + (
            f" ({r['memory_limit_mb']} MB, swap {r.get('swap_limit_mb')} MB)" if r.get("memory_limit_mb") else ""
        )
        if r.get("loaded") and not r.get("flown"):
            last = f"failed: {r.get('error', '')[:60]}"
        else:
            last = f"{r.get('success')}/{r.get('episodes')}" + (" (time budget)" if r.get("time_budget_hit") else "")
        lines.append(table_row(r, r["name"], cond, [last]))
    ratios = [r for r in result["rows"] if r.get("vs_unconstrained")]
    if ratios:
        lines += [
            "",
            "Constrained / unconstrained:",
            "",
            "| model | inference p50 | inference p99 | loop Hz | load time | peak RSS |",
            "|---|---|---|---|---|---|",
        ]
        for r in ratios:
            v = r["vs_unconstrained"]
            lines.append(
                f"| {r['name']} at {r['memory_limit_mb']} MB + {r['swap_limit_mb']} MB swap | {_f(v.get('infer_p50_ms'), '{:.2f}x')} | {_f(v.get('infer_p99_ms'), '{:.2f}x')} | "
                f"{_f(v.get('loop_hz'), '{:.2f}x')} | {_f(v.get('load_s'), '{:.2f}x')} | {_f(v.get('peak_rss'), '{:.2f}x')} |"
            )
    lines += [
        "",
        f"Emulated: {result['emulated']}.",
        f"Not emulated: {result['not_emulated']}.",
        f"Swap: {result['swap']}.",
        "",
    ]
    return "\n".join(lines)


def plot_memory(rows: list[dict], path: Path) -> Path | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from airq_cli import write_atomic
    from nav_env.render import figure_png

    runs = [r for r in rows if r.get("cgroup_samples") or r.get("bridge_memory")]
    if not runs:
        return None
    fig, axes = plt.subplots(len(runs), 1, figsize=(9, 2.4 * len(runs)), squeeze=False, sharex=False)
    for ax, r in zip(axes[:, 0], runs):
        s = r.get("cgroup_samples") or []
        t = [x["t_s"] for x in s]
        if s:
            ax.plot(t, [(x.get("usage_bytes") or 0) / MB for x in s], label="cgroup RAM (usage)")
            ax.plot(t, [(x.get("swap_bytes") or 0) / MB for x in s], label="swap")
        bm = r.get("bridge_memory") or []
        loaded_t = next((x["t_s"] for x in s if x.get("label") == "loaded"), r.get("load_s") or 0.0)
        if bm:
            ax.plot(
                [loaded_t + x["t_s"] for x in bm],
                [x["rss_bytes"] / MB for x in bm],
                "k.",
                ms=3,
                label="bridge RSS (status)",
            )
        if r.get("memory_limit_mb"):
            ax.axhline(r["memory_limit_mb"], color="r", ls="--", lw=1, label=f"limit {r['memory_limit_mb']} MB")
        if s:
            ax.axvline(loaded_t, color="gray", ls=":", lw=1)
        status = "did not load" if not r.get("loaded") else f"p50 {_f(r.get('infer_p50_ms'))} ms"
        cond = (
            f"{r['memory_limit_mb']} MB RAM + {r['swap_limit_mb']} MB swap"
            if r.get("memory_limit_mb")
            else r["condition"]
        )
        ax.set_title(f"{r['name']} - {cond} ({status})", fontsize=9)
        ax.set_ylabel("MB")
        ax.legend(fontsize=7, loc="upper right")
    axes[-1, 0].set_xlabel("seconds since the bridge was started (dotted: policy loaded)")
    fig.tight_layout()
    return write_atomic(path, figure_png(fig))


# ---------------------------------------------------------------------------------------------- CLI
def _camera(text: str) -> tuple[int, int]:
    from nav_env.config import ConfigError, parse_camera

    try:
        return parse_camera(text)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="python -m deployment_study.memfit", description=__doc__.split("\n")[0])
    p.add_argument("--model", action="append", required=True, metavar="FILE", help="ONNX policy; repeat to compare")
    p.add_argument(
        "--memory-mb",
        action="append",
        metavar="MB[:SWAP_MB]",
        help="RAM limit of a constrained run (default 900: a Pi 3b), optionally with its own swap (900:0 = none); "
        "repeat for several runs",
    )
    p.add_argument(
        "--swap-mb",
        type=int,
        help="swap a constrained bridge may use unless its --memory-mb says (0: none, so OOM at the limit)",
    )
    p.add_argument("--episodes", type=int)
    p.add_argument("--seed", type=int)
    p.add_argument("--level")
    p.add_argument("--camera", type=_camera, help="HEIGHTxWIDTH (default: each model's own, from its metadata)")
    p.add_argument("--cpu", type=int, help="core to pin the bridge to (-1: not pinned)")
    p.add_argument("--threads", type=int)
    p.add_argument("--rate-hz", type=float, help="pace the loop (late acts fly hover); default lockstep")
    p.add_argument("--max-steps", type=int, help="episode length cap (default: the level's)")
    p.add_argument("--load-timeout-s", type=float)
    p.add_argument(
        "--time-budget-s",
        type=float,
        help="per run: start no new episode after this long flying (a thrashing bridge takes seconds per act)",
    )
    p.add_argument("--no-baseline", action="store_true", help="skip the unconstrained runs")
    p.add_argument("--out", type=output_dir, help="folder for memfit.json, memfit.md and the figure")
    defaults_from(p, MemfitConfig, names={"out": "out_dir"})  # each default written once, in MemfitConfig
    a = p.parse_args(argv)
    run_memory_fit(
        a.model,
        a.memory_mb or [PI3B_MEMORY_MB],
        a.swap_mb,
        a.episodes,
        a.camera,
        a.seed,
        a.out,
        level=a.level,
        cpu=None if a.cpu == -1 else a.cpu,
        threads=a.threads,
        rate_hz=a.rate_hz,
        max_steps=a.max_steps,
        load_timeout_s=a.load_timeout_s,
        baseline=not a.no_baseline,
        time_budget_s=a.time_budget_s,
    )
    out = Path(a.out)
    print((out / "memfit.md").read_text())
    print(f"results: {out / 'memfit.json'}, {out / 'memfit.md'}, {out / 'memory_over_time.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
