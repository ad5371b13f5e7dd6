"""The memory-fit experiment: does a policy fit a Pi-sized RAM? The seed's swap effect, measured.
``python -m deployment_study.memfit`` is its command; deployment_study.memory_stage runs it for the study.

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
ratios. :func:`run_memory_fit` returns them as a :class:`MemfitResult` and keeps it as OUT/memfit.json (what
a study reads back to resume); its markdown and figure are deployment_study.render_memfit's.

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

import mmap
import os
import platform
import shutil
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from airq_cli import UserError, known_fields, shown, write_json
from device_emulation.memlimit import (
    CgroupSampler,
    MemLimitError,
    MemoryCgroup,
    SwapFile,
    active_swap_bytes,
    memory_cgroup_support,
)
from firmware_bridge.client import BridgeClient, BridgeError
from firmware_bridge.device import cpu_model
from firmware_bridge.launcher import BridgeProcess, BridgeStartError
from hil.loop import ControlLink, default_deadline_s, run_closed_loop
from nav_env.backends import make_env
from nav_env.config import ConfigError, camera_overrides, load_level, observation_overrides_from_metadata
from nav_env.stats import wilson_interval

if TYPE_CHECKING:
    from nav_env.config import NavConfig

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

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MemfitConfig:
        """The config as memfit.json records it (paths as text, the camera as a list)."""
        values = known_fields(cls, data)
        values["models"] = [Path(m) for m in values.get("models") or []]
        if "out_dir" in values:
            values["out_dir"] = Path(values["out_dir"])
        if values.get("camera") is not None:
            values["camera"] = (int(values["camera"][0]), int(values["camera"][1]))
        return cls(**values)


# ---------------------------------------------------------------------------------------------- results
@dataclass
class Ratios:
    """A constrained run against the same model's unconstrained one: constrained / unconstrained
    (None where either side lacks the figure)."""

    infer_p50_ms: float | None = None
    infer_p99_ms: float | None = None
    rtt_p50_ms: float | None = None
    load_s: float | None = None
    loop_hz: float | None = None
    peak_rss: float | None = None  # peak RSS bytes


@dataclass(frozen=True)
class BridgeSample:
    """The bridge's own memory figures at one status reply while flying."""

    t_s: float  # seconds since the policy was loaded
    rss_bytes: int
    peak_rss_bytes: int


@dataclass
class MemfitRow:
    """One model under one condition (unconstrained, or one RAM limit): did it load, how fast did it fly,
    how much memory and swap did it take. A run that could not be made here has ``skipped`` set to the
    reason; one that did not load has ``loaded`` False; one that failed while flying ``flown`` False."""

    model: str  # the ONNX file
    name: str  # its file name
    condition: str  # "unconstrained" or "constrained"
    memory_limit_mb: int | None = None  # constrained: the cgroup's RAM limit
    swap_limit_mb: int | None = None  # constrained: the swap it may use
    skipped: str | None = None
    model_bytes: int | None = None
    camera: str | None = None  # HxW the model flies at
    obs_dim: int | None = None
    cgroup: dict[str, Any] | None = None  # device_emulation.memlimit's description of the run's cgroup
    loaded: bool = False
    load_s: float | None = None  # bridge start to its first answer
    exit_code: int | None = None  # the bridge's
    error: str | None = None
    bridge_pid: int | None = None
    policy_load_s: float | None = None  # the bridge's own load time (its hello)
    policy_rss_delta_bytes: int | None = None  # RSS growth on loading the policy (its hello)
    rss_after_load_bytes: int | None = None
    peak_rss_after_load_bytes: int | None = None
    time_budget_hit: bool = False  # episodes stopped early: the run's time budget was spent
    fly_s: float | None = None
    flown: bool = False
    episodes: int | None = None
    steps: int | None = None
    success: int | None = None  # episodes that succeeded
    success_rate: float | None = None
    success_ci95: list[float] | None = None  # Wilson
    outcomes: list[str] | None = None
    infer_p50_ms: float | None = None  # device inference
    infer_p99_ms: float | None = None
    infer_max_ms: float | None = None
    rtt_p50_ms: float | None = None  # round trip of an act
    rtt_p99_ms: float | None = None
    loop_hz: float | None = None  # acts per second of flying
    acts_over_control_deadline: float | None = None  # share of acts slower than CONTROL_DEADLINE_MS
    deadline_misses: int | None = None
    rss_bytes: int | None = None  # the bridge's at the end
    peak_rss_bytes: int | None = None
    rss_min_flying_bytes: int | None = None
    rss_max_flying_bytes: int | None = None
    # the cgroup's figures over the run (with a cgroup)
    cgroup_peak_bytes: int | None = None
    cgroup_usage_max_bytes: int | None = None
    swap_max_bytes: int | None = None
    major_faults: int | None = None  # the whole run
    major_faults_load: int | None = None  # until the policy was loaded
    oom_kills: int | None = None
    limit_hits: int | None = None
    source_sha256: str | None = None  # what the model was made from (its metadata)
    vs_unconstrained: Ratios | None = None  # constrained runs: against the same model unconstrained

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MemfitRow:
        return cls(**cls._values(data))

    @classmethod
    def _values(cls, data: Mapping[str, Any]) -> dict[str, Any]:
        values = known_fields(cls, data)
        if values.get("vs_unconstrained") is not None:
            values["vs_unconstrained"] = Ratios(**known_fields(Ratios, values["vs_unconstrained"]))
        return values

    def summary_fields(self) -> dict[str, Any]:
        """This row's MemfitRow fields (without the time series of a MemfitRun)."""
        return {f.name: getattr(self, f.name) for f in fields(MemfitRow)}


@dataclass
class MemfitRun(MemfitRow):
    """A row with the run's time series, as memfit.json keeps it."""

    cgroup_samples: list[dict[str, Any]] | None = None  # device_emulation.memlimit.CgroupSampler's samples
    bridge_memory: list[BridgeSample] | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MemfitRun:
        values = cls._values(data)
        if values.get("bridge_memory") is not None:
            values["bridge_memory"] = [BridgeSample(**known_fields(BridgeSample, x)) for x in values["bridge_memory"]]
        return cls(**values)


@dataclass(frozen=True)
class HostInfo:
    """The machine a memfit run measured on."""

    cpu: str | None
    cores: int | None
    ram_mb: int
    kernel: str
    python: str
    load_avg: tuple[float, float, float]


@dataclass(frozen=True)
class CgroupInfo:
    available: bool
    version: str | None  # "v1", "v2"; None: no memory cgroup here
    detail: str  # what is used, or why none


@dataclass
class SwapInfo:
    requested_mb: int  # the most swap a limit asks for
    active_before_bytes: int  # swap active when the run started
    created_mb: int = 0  # a swap file made for the run (removed after)
    active_during_bytes: int | None = None


@dataclass
class MemfitResult:
    """memfit.json: how the runs were made, and one row per model and condition."""

    command: str | None  # the command line that ran it (None: called as a library)
    date_utc: str
    wall_s: float
    machine: HostInfo
    cgroup: CgroupInfo
    swap: SwapInfo
    config: MemfitConfig
    emulated: str
    not_emulated: str
    limits: list[tuple[int, int]]  # (RAM MB, swap MB) of each constrained run
    rows: list[MemfitRun]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MemfitResult:
        values = known_fields(cls, data)
        values["machine"] = HostInfo(**known_fields(HostInfo, values["machine"]))
        values["cgroup"] = CgroupInfo(**known_fields(CgroupInfo, values["cgroup"]))
        values["swap"] = SwapInfo(**known_fields(SwapInfo, values["swap"]))
        values["config"] = MemfitConfig.from_dict(values["config"])
        values["limits"] = [(int(m), int(sw)) for m, sw in values["limits"]]
        values["rows"] = [MemfitRun.from_dict(r) for r in values["rows"]]
        return cls(**values)


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
    meta = read_onnx_metadata(path)
    overrides = camera_overrides(camera) if camera else observation_overrides_from_metadata(meta)
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
    c: MemfitConfig,
    path: Path,
    cfg: NavConfig,
    condition: str,
    cgroup: MemoryCgroup | None,
    memory_mb: int | None = None,
    swap_mb: int | None = None,
) -> MemfitRun:
    """Start the bridge for ``path`` (in ``cgroup`` if given), fly the episodes, return the row."""
    row = MemfitRun(
        model=str(path),
        name=path.name,
        condition=condition,
        memory_limit_mb=memory_mb if condition == "constrained" else None,
        swap_limit_mb=swap_mb if condition == "constrained" else None,
        model_bytes=path.stat().st_size,
        camera=f"{cfg.camera.height}x{cfg.camera.width}",
        obs_dim=cfg.obs_dim,
        cgroup=cgroup.describe() if cgroup else None,
    )
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
    exit_seen = False
    try:
        try:
            bridge.start()
        except BridgeStartError as e:
            row.loaded = False
            row.load_s = time.monotonic() - t0
            row.exit_code = bridge.process.returncode if bridge.process else None
            exit_seen = True
            row.error = str(e).splitlines()[0][:300]
            return row
        row.load_s = time.monotonic() - t0
        if sampler:
            sampler.sample("loaded")
        client = BridgeClient(bridge.endpoint, timeout_s=c.request_timeout_s, retries=1)
        policy = client.hello().policy
        row.loaded = True
        row.bridge_pid = bridge.pid
        row.policy_load_s = ((policy and policy.load_time_ns) or 0) / 1e9
        row.policy_rss_delta_bytes = None if policy is None else policy.rss_delta_bytes
        status0 = client.status()
        row.rss_after_load_bytes, row.peak_rss_after_load_bytes = status0.rss_bytes, status0.peak_rss_bytes
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
            row.time_budget_hit = False
        except _Budget:
            rec = holder["rec"]
            rec.status_end = client.status()
            row.time_budget_hit = True
        except BridgeError as e:
            row.flown = False
            row.error = f"{type(e).__name__}: {str(e)[:300]}"
            row.exit_code = bridge.process.poll() if bridge.process else None
            exit_seen = True
            return row
        row.fly_s = time.monotonic() - t_fly
        infer_ms = [n / 1e6 for n in rec.infer_ns]
        rtt_ms = [n / 1e6 for n in rec.rtt_ns]
        steps = sum(e.steps for e in rec.episodes)
        k = sum(e.success for e in rec.episodes)
        rss = [m[1] for m in rec.memory]
        row.flown = True
        row.episodes = len(rec.episodes)
        row.steps = steps
        row.success = k
        row.success_rate = k / len(rec.episodes)
        row.success_ci95 = list(wilson_interval(k, len(rec.episodes)))
        row.outcomes = [e.outcome for e in rec.episodes]
        row.infer_p50_ms, row.infer_p99_ms = _pct(infer_ms, 50), _pct(infer_ms, 99)
        row.infer_max_ms = max(infer_ms) if infer_ms else None
        row.rtt_p50_ms, row.rtt_p99_ms = _pct(rtt_ms, 50), _pct(rtt_ms, 99)
        row.loop_hz = steps / rec.loop_s if rec.loop_s else None
        row.acts_over_control_deadline = float(np.mean(np.array(rtt_ms) > CONTROL_DEADLINE_MS)) if rtt_ms else None
        row.deadline_misses = rec.deadline_misses
        row.rss_bytes = None if rec.status_end is None else rec.status_end.rss_bytes
        row.peak_rss_bytes = None if rec.status_end is None else rec.status_end.peak_rss_bytes
        row.rss_min_flying_bytes = min(rss) if rss else None
        row.rss_max_flying_bytes = max(rss) if rss else None
        row.bridge_memory = [BridgeSample(t, r, p) for t, r, p in rec.memory]
        return row
    finally:
        if client is not None:
            client.close()
        exit_code = bridge.stop()
        if not exit_seen:  # the bridge's own exit as it failed is the one to keep
            row.exit_code = exit_code
        bridge.close()
        if sampler:
            samples = sampler.stop()
            sampler.sample("end")
            row.cgroup_samples = samples
            _add_cgroup_summary(row, samples)


def _add_cgroup_summary(row: MemfitRow, samples: list[dict[str, Any]]) -> None:
    def col(k: str) -> list[int]:
        return [s[k] for s in samples if s.get(k) is not None]

    faults = col("pgmajfault")
    loaded = next((s for s in samples if s.get("label") == "loaded"), None)
    row.cgroup_peak_bytes = max(col("peak_bytes") or [0]) or None
    row.cgroup_usage_max_bytes = max(col("usage_bytes") or [0]) or None
    row.swap_max_bytes = max(col("swap_bytes") or [0])
    row.major_faults = (faults[-1] - faults[0]) if len(faults) > 1 else 0
    row.major_faults_load = (
        (loaded["pgmajfault"] - faults[0]) if loaded and faults and loaded.get("pgmajfault") is not None else None
    )
    row.oom_kills = max(col("oom_kill") or [0])
    row.limit_hits = max(col("limit_hits") or [0])


# ---------------------------------------------------------------------------------------------- the experiment
def run_memory_fit(
    models: list[Path | str],
    memory_mb: int | str | tuple[int, int] | Sequence[int | str | tuple[int, int]] = PI3B_MEMORY_MB,
    swap_mb: int = 2048,
    episodes: int = 10,
    camera: tuple[int, int] | None = None,
    seed: int = 0,
    out_dir: Path | str = "out/memfit/run",
    *,
    command: str | None = None,
    **options: Any,
) -> MemfitResult:
    """Run every model unconstrained and under ``memory_mb`` MB RAM + ``swap_mb`` MB swap; return the result,
    one row per (model, condition), and keep it as OUT/memfit.json (deployment_study.render_memfit writes its
    markdown and figure). ``command``: the command line memfit.json records (the command passes what was
    typed; None from a library).

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

    support = memory_cgroup_support()
    started = time.time()
    t0 = time.monotonic()
    rows: list[MemfitRun] = []
    pairs = limits(c)
    swap_needed = max((sw for _, sw in pairs), default=0)
    swap_info = SwapInfo(requested_mb=swap_needed, active_before_bytes=active_swap_bytes())
    skip_reason = None if support.available else support.reason
    swap = None
    try:
        if skip_reason is None and swap_needed > 0 and c.make_swap and not swap_info.active_before_bytes:
            try:
                swap = SwapFile(swap_needed).open()
                swap_info.created_mb = swap_needed if swap.created else 0
            except MemLimitError as e:
                skip_reason = f"cannot create swap: {e}"
        elif skip_reason is None and swap_needed > 0 and not swap_info.active_before_bytes:
            skip_reason = "no swap active and make_swap is off"
        swap_info.active_during_bytes = active_swap_bytes()
        if skip_reason:
            print(f"deployment_study.memfit: constrained runs skipped: {skip_reason}", file=sys.stderr)
        for path in c.models:
            cfg, meta = cfgs[path]
            conditions: list[tuple[str, int, int | None]] = [("unconstrained", 0, None)] if c.baseline else []
            conditions += [("constrained", m, sw) for m, sw in pairs]
            for condition, limit, swap_limit in conditions:
                label = condition + (f" {limit} MB + {swap_limit} MB swap" if limit else "")
                print(f"deployment_study.memfit: {path.name} {label} ...", file=sys.stderr, flush=True)
                if condition == "constrained" and skip_reason:
                    rows.append(MemfitRun(str(path), path.name, condition, limit, swap_limit, skipped=skip_reason))
                    continue
                if skip_reason:  # baseline without a cgroup: bridge figures only
                    rows.append(_fly_one(c, path, cfg, condition, None))
                    continue
                try:
                    with MemoryCgroup(f"memfit-{condition}", limit, swap_limit, support) as cg:
                        rows.append(_fly_one(c, path, cfg, condition, cg, limit, swap_limit))
                except MemLimitError as e:
                    print(f"deployment_study.memfit: {path.name} {label} skipped: {e}", file=sys.stderr)
                    rows.append(MemfitRun(str(path), path.name, condition, limit, swap_limit, skipped=str(e)))
                    continue
                rows[-1].source_sha256 = meta.get("airq.widen.source_sha256") or meta.get("airq.quant.source_sha256")
                print(f"deployment_study.memfit:   {_one_line(rows[-1])}", file=sys.stderr, flush=True)
    finally:
        if swap is not None:
            swap.close()
    add_ratios(rows)
    result = MemfitResult(
        command=command,
        date_utc=time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(started)),
        wall_s=time.monotonic() - t0,
        machine=_machine(),
        cgroup=CgroupInfo(available=support.available, version=support.version, detail=support.reason),
        swap=swap_info,
        config=c,
        emulated=(
            "RAM: the bridge's cgroup caps its resident memory (anonymous + page cache) at memory_mb, as a Pi's RAM "
            "does; above it the kernel reclaims and swaps inside the cgroup"
        ),
        not_emulated=(
            "a Pi's CPU, caches and memory bandwidth; its swap device: swap here is a file on this machine's "
            "disk, much faster than a Pi's SD card, so slowdowns are lower bounds; the host side is not limited"
        ),
        limits=pairs,
        rows=rows,
    )
    write_json(Path(c.out_dir) / "memfit.json", result)
    return result


def _machine() -> HostInfo:
    return HostInfo(
        cpu=cpu_model(),
        cores=os.cpu_count(),
        ram_mb=(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")) // MB,
        kernel=platform.release(),
        python=platform.python_version(),
        load_avg=os.getloadavg(),
    )


def add_ratios(rows: Sequence[MemfitRow]) -> None:
    """Set ``vs_unconstrained`` of every flown constrained row: its figures over the same model's flown
    unconstrained row among ``rows`` (rows of several memfit runs may be passed together)."""
    base = {r.model: r for r in rows if r.condition == "unconstrained" and r.flown}
    for r in rows:
        b = base.get(r.model)
        if r.condition != "constrained" or not r.flown or b is None:
            continue
        r.vs_unconstrained = Ratios(
            infer_p50_ms=_over(r.infer_p50_ms, b.infer_p50_ms),
            infer_p99_ms=_over(r.infer_p99_ms, b.infer_p99_ms),
            rtt_p50_ms=_over(r.rtt_p50_ms, b.rtt_p50_ms),
            load_s=_over(r.load_s, b.load_s),
            loop_hz=_over(r.loop_hz, b.loop_hz),
            peak_rss=_over(r.peak_rss_bytes, b.peak_rss_bytes),
        )


def _over(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def mb(nbytes: float | None) -> str:
    """Bytes as whole MB (MiB) for a table, airq_cli.MISSING when not measured."""
    return shown(None if nbytes is None else nbytes / MB, ",.0f")


def _one_line(r: MemfitRow) -> str:
    if r.skipped:
        return f"skipped: {r.skipped}"
    if not r.loaded:
        return f"did not load ({(r.error or '')[:120]}), OOM kills {r.oom_kills}"
    if not r.flown:
        return f"loaded in {shown(r.load_s, '.1f')} s, then failed: {(r.error or '')[:120]}"
    return (
        f"load {shown(r.load_s, '.1f')} s, inference p50 {shown(r.infer_p50_ms, '.2f')} ms "
        f"p99 {shown(r.infer_p99_ms, '.2f')} ms, {shown(r.loop_hz, '.1f')} Hz, peak RSS {mb(r.peak_rss_bytes)} MB, "
        f"swap {mb(r.swap_max_bytes)} MB, major faults {r.major_faults}, success {r.success}/{r.episodes}"
    )
