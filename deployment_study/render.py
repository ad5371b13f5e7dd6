"""The deployment study's rendering: study.md's sections and the figures, from the typed results.

Nothing here measures or computes a result: deployment_study.study, memory_stage and memfit_run do, and hand
their records (deployment_study.results, memory_stage.MemoryResult, memfit_run.MemfitRun) to these functions
(the memory-fit experiment's own files: deployment_study.render_memfit).
A value that was not measured shows as ``airq_cli.MISSING``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from airq_cli import MISSING, shown
from deployment_study.args import PRECISIONS
from deployment_study.memfit_run import MB, mb
from deployment_study.memory_stage import (
    THRASH_RATIO,
    CgroupPlan,
    MemoryResult,
    StageRow,
    StageSwap,
    classify,
    condition_label,
    verdict,
)
from deployment_study.render_latency import latency_sweep_figure, md_latency
from deployment_study.render_memfit import TABLE_COLUMNS, table_row
from deployment_study.results import StudyResults
from deployment_study.seed import TABLE4, seed_group
from deployment_study.seed import label as policy_label
from device_emulation.profiles import FIGURES, load_profiles
from firmware_bridge.device import format_versions
from firmware_bridge.int8_kernels import Int8Kernels
from nav_env.backends import get_backend
from nav_env.render import save_figure

# ---------------------------------------------------------------------------------- cells


def _us(v: float | None) -> str:
    return shown(v, ",.0f" if (v or 0) >= 100 else ".1f")


def _ms(s: float | None) -> str:
    return shown(None if s is None else s * 1e3, ".3f" if (s or 0) < 0.01 else ".2f")


def _x(v: float | None) -> str:
    return shown(v, ".2f", "x")


def _mib(b: int | None) -> str:
    return shown(b / 2**20 if b else None, ".1f")


# ---------------------------------------------------------------------------------- study.md


def md_header(data: StudyResults) -> str:
    a = data.args
    d = (data.device or {}).get("device") or {}
    lines = [
        "# Deployment study: Policies I-III at fp32, fp16, int8 and int8-dynamic in the loop",
        "",
        f"`{data.command}` - {data.date}" + ("" if data.complete else " - **partial: the study did not finish**"),
        "",
        f"Device: {d.get('cpu_model') or d.get('machine') or '?'} ({d.get('cores', '?')} cores), onnxruntime "
        f"{d.get('onnxruntime_version', '?')}; {a.episodes} seeded episodes per model and level (seeds "
        f"{a.seed}-{a.seed + a.episodes - 1}), levels {', '.join(a.levels)}, {a.backend} simulator"
        + ("" if (backend := get_backend(a.backend)).is_default else f" ({backend.help})")
        + "; every precision flies the same episodes."
        + (
            f" Wall time {data.wall_s / 60:.1f} min"
            + (f" over {len(data.sessions)} sessions (resumed)." if len(data.sessions) > 1 else ".")
            if data.wall_s
            else ""
        ),
        "",
    ]
    if d.get("int8_kernels"):
        lines[-1:-1] = [f"Device {Int8Kernels.from_dict(d['int8_kernels']).describe()}."]
    if data.host_versions:
        lines += [f"Host versions: {format_versions(data.host_versions)}."]
        earlier = [x for x in data.sessions if x.host_versions not in (None, data.host_versions)]
        lines += [
            f"An earlier session ({x.date}) ran with: {format_versions(x.host_versions or {})}." for x in earlier
        ] + [""]
    if a.sim_only:
        p = data.profile or {}
        lines += [
            f"**Honest labelling: sim-only, profile `{p.get('name')}`.** The bridge runs on this machine as a separate "
            f"process ({p.get('emulated')}). Every time below is this machine's, not a Raspberry Pi's; the only Pi "
            'figures are the roofline predictions, labelled "predicted on Pi (roofline)", from published bandwidth '
            "and throughput figures (device_emulation/profiles.toml).",
            "",
        ]
    else:
        lines += [
            f"Measured on the device at {a.host}:{a.port}: every time and memory figure is that device's.",
            "",
        ]
    return "\n".join(lines)


def md_results(data: StudyResults) -> str:
    rows = data.rows
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
    for level in data.args.levels:
        lr = [r for r in rows if r.level == level]
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
            t, lo, d = r.timing_inference_us, r.loop_inference_us, r.paired_vs_fp32
            pair = (
                MISSING
                if d is None
                else f"{d.diff * 100:+.1f} pts ({d.low * 100:+.1f}..{d.high * 100:+.1f}, p={d.mcnemar_p:.2f})"
            )
            ci = r.success_ci95
            out.append(
                f"| {policy_label(r.group)} | {r.precision} | {_us(t.p50 if t else None)} / {_us(t.p99 if t else None)} ({_us(lo.p50)} / {_us(lo.p99)}) | "
                f"{r.actuation_hz:,.0f} | {r.success_rate:.1%} ({ci[0]:.1%}-{ci[1]:.1%}), {r.successes}/{r.episodes} | {pair} | "
                f"{_x(r.speedup_vs_fp32)} | {_mib(r.rss_bytes)} / {_mib(r.peak_rss_bytes)} | {_mib(r.model_rss_bytes)} | "
                f"{(r.model_bytes or 0) / 2**20:.2f} | {_x(r.peak_rss_ratio_vs_fp32)} / {_x(r.model_rss_ratio_vs_fp32)} |"
            )
        out.append("")
    return "\n".join(out)


def md_seed(data: StudyResults) -> str:
    rows = data.rows
    roof = {e.model: e for e in data.roofline}
    level = data.args.levels[0]
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

    def pi3b_s(model: str) -> float | None:
        e = roof.get(model)
        p = e.predicted_on_pi.get("pi3b") if e else None
        return p.predicted_s if p and p.shown else None

    for group in dict.fromkeys(r.group for r in rows if r.level == level):
        key = seed_group(group)
        if key is None:
            continue
        quarl = TABLE4.table[key]
        f = next((r for r in rows if r.group == group and r.level == level and r.precision == "fp32"), None)
        i = next((r for r in rows if r.group == group and r.level == level and r.precision == "int8"), None)
        if f is None or i is None:
            continue
        pf, pi8 = pi3b_s(f.model), pi3b_s(i.model)
        predicted = f"{_ms(pf) if pf else 'n/a'} / {_ms(pi8) if pi8 else 'n/a'}" + (
            f" ({pf / pi8:.2f}x)" if pf and pi8 else ""
        )
        ft = f.timing_inference_us.p50 if f.timing_inference_us else None
        it = i.timing_inference_us.p50 if i.timing_inference_us else None
        out.append(
            f"| {policy_label(group)} | {quarl.layers} | {quarl.fp32_ms} | {quarl.fp32_success:.0%} | {quarl.int8_ms} | "
            f"{quarl.int8_success:.0%} | {quarl.speedup}x | {_ms(ft / 1e6 if ft else None)} | {f.success_rate:.1%} | "
            f"{_ms(it / 1e6 if it else None)} | {i.success_rate:.1%} | {_x(i.speedup_vs_fp32)} | {predicted} |"
        )
    return "\n".join(out) + "\n"


def md_roofline(data: StudyResults) -> str:
    entries = data.roofline
    if not entries:
        return ""
    boards = sorted({b for e in entries for b in e.predicted_on_pi})
    m = data.machine
    out = [
        "## Roofline",
        "",
        "time = fixed cost + max(weight bytes / bandwidth, ops / throughput) (ops = 2 x multiply-adds, one per "
        "weight; fp32 throughput for fp32 weights, int8 for int8; biases, activations and (de)quantisation "
        "arithmetic not counted). The fixed cost is the runtime's per call and per operator. The bandwidth is the "
        "cache's for weights that fit in the core's own cache (here its private L2, on a Pi its L2) and DRAM's for "
        "larger ones. Here, weights between the private and the shared cache's sizes may or may not still be in "
        "the shared cache at the next act (the client, the other bridges and other guests use it in between): both "
        "predictions are made and the nearer one is judged, the other shown beside it. A Pi prediction (a Pi 3B has "
        "no shared cache: beyond its L2, DRAM) is shown only where the prediction for the machine that ran the timing "
        "pass agrees with its measured p50 within 2x.",
        "",
    ]
    if m:
        bw = ", ".join(
            f"{int(k) / 1e6:.2f} MB: {v:.1f}" for k, v in sorted(m.bandwidth_gbs.items(), key=lambda kv: int(kv[0]))
        )
        tp = m.throughput_gops
        nulls = [t.null_model.device_inference_us.p50 for t in data.timing.values() if t.null_model]
        null = f"{min(nulls):.1f}-{max(nulls):.1f} us (the timing passes' null model, p50)" if nulls else MISSING
        shared = f"{m.shared_cache_bytes // 1024} KB" if m.shared_cache_bytes else "none listed"
        out += [
            f"This machine, measured in this run (one core): streaming-read bandwidth GB/s at working sets {bw}; "
            f"DRAM ({m.dram_bytes // 2**20} MB) {m.dram_bandwidth_gbs:.1f} GB/s; private cache "
            f"{m.private_cache_bytes // 1024} KB, shared cache {shared}. Matrix-product throughput (onnxruntime, one "
            f"thread): fp32 {tp['fp32']:.0f}, fp16 {tp['fp16']:.0f}, int8 {tp['int8']:.0f} Gop/s. "
            f"Fixed cost: per call {null}; per operator {m.operator_us:.2f} us, per quantized matrix product "
            f"{m.quantized_operator_us:.2f} us.",
            "",
        ]
    where = next((e.check.where for e in entries if e.check), None)
    if where:
        out += [f"Check against {where}: predicted us from its figures, measured = its timing-pass p50.", ""]
    head = (
        "| model | weight MB | Mop | operators | predicted us (fixed + bound, weights from) | measured p50 us | "
        "measured / predicted | agrees (2x) | "
        + " | ".join(f"predicted on Pi ({b}) (roofline) ms" for b in boards)
        + " |"
    )
    out += [head, "|" + "---|" * (8 + len(boards))]
    for e in entries:
        c = e.check
        preds = []
        for b in boards:
            p = e.predicted_on_pi[b]
            if p.shown:
                preds.append(f"{_ms(p.predicted_s)} ({p.bound_by}, weights from {p.weights_from or 'DRAM'})")
            elif p.missing:
                preds.append("no figure: " + ", ".join(p.missing))
            else:
                preds.append("not shown (check failed)" if c else "not shown (no check)")
        predicted_s, measured_s = (c.predicted_s, c.measured_s) if c else (None, None)
        how = f"{_us(c.fixed_s * 1e6)} + {c.bound_by}, {c.weights_from}" if c and c.bound_by else MISSING
        if c and c.other_predicted_s:
            how += f"; from {c.other_weights_from}: {_us(c.other_predicted_s * 1e6)}"
        ops = f"{e.cost.operators} ({e.cost.quantized_operators} quantized)" if e.cost.operators else MISSING
        out.append(
            f"| {Path(e.model).stem} | {e.cost.weight_bytes / 1e6:.2f} | {e.cost.ops / 1e6:.2f} | {ops} | "
            f"{_us(predicted_s * 1e6 if predicted_s else None)} ({how}) | "
            f"{_us(measured_s * 1e6 if measured_s else None)} | {_x(c.measured_over_predicted if c else None)} | "
            f"{'yes' if c and c.agrees else 'no'} | " + " | ".join(preds) + " |"
        )
    out.append("")
    out += ["Pi figures and their sources (device_emulation/profiles.toml):", ""]
    for name, board in load_profiles().items():
        if not board.has_roofline():
            continue
        sources = [getattr(board, source) for _, source in FIGURES]
        fixed = f"{board.fixed_us:g} us" if board.fixed_us else "not known (the prediction leaves it out)"
        out.append(
            f"- **{name}**: DRAM {board.memory_bandwidth_gbs} GB/s, fp32 {board.compute_gflops} Gop/s, int8 "
            f"{board.int8_gops if board.int8_gops else 'none'} Gop/s, cache {board.cache_kb} KB, fixed cost {fixed}. "
            "Sources: " + " / ".join(" ".join(source.split()) for source in sources if source)
        )
    return "\n".join(out) + "\n"


def md_targets(data: StudyResults) -> str:
    if not data.targets:
        return ""
    out = ["## Targets (measured in this run)", "", "| target | measured | met |", "|---|---|---|"]
    for t in data.targets:
        out.append(f"| {t.target} | {t.value} | {MISSING if t.met is None else ('yes' if t.met else '**no**')} |")
    return "\n".join(out) + "\n"


def md_files(data: StudyResults) -> str:
    return (
        "## Files\n\nstudy.json (everything above, per-episode outcomes included), latency.png (timing-pass device inference, "
        "each policy on its own linear axis, and the speed-up over fp32), memory_over_time.png (bridge memory over each "
        "run, like the seed's Figure 4), "
        "success.png (success with Wilson 95% intervals); cells/LEVEL/GROUP/ holds each closed loop's hil.run "
        "report and run log, timing/ the timing passes, machine.json this machine's roofline figures; with the memory "
        "stage, memory_fit_over_time.png (cgroup RAM, swap and bridge RSS per memory run) and memory/PART/ (deployment_study.memfit's "
        "memfit.json, memfit.md and plot per part).\n"
    )


# ---------------------------------------------------------------------------------- the memory stage's section


def md_memory(data: StudyResults) -> str:
    mem = data.memory
    if not mem:
        return ""
    prof = (data.profile or {}).get("name")
    title = (
        "## Does it fit in a Pi 3b's memory?"
        if prof == "pi3b" or mem.status == "device"
        else f"## Does it fit in {prof or 'a small device'}'s memory?"
    )
    plan = mem.plan
    if mem.status == "device" or not isinstance(plan, CgroupPlan):
        return _md_device(data, title)
    limits = ", ".join(f"{m} MB" + (f" + {s} MB swap" if s else " without swap") for m, s in plan.limits)
    out = [
        title,
        "",
        f"The seed's fp32 Policies II and III exceeded the Pi 3b's RAM and swapped. Our policies see a 32 x 32 image and fit any "
        f"Pi, so this stage rebuilds the seed's situation: `{Path(plan.source).name}` widened (`policies.widen`, first layer "
        f"composed with an area-resampling operator, no retraining) to a {plan.camera} depth image"
        + (" (Air Learning's)" if plan.camera == "144x256" else "")
        + ", and its "
        f"static int8, each flown in the closed loop (`deployment_study.memfit`) unconstrained and under RAM limits of {limits} (a memory "
        "cgroup around a fresh bridge process, one onnxruntime thread, pinned to one core).",
        "",
    ]
    if mem.status == "skipped":
        return "\n".join(out + [f"**skipped: {mem.reason}**", ""])
    if mem.status != "done" and not mem.rows:
        return "\n".join(out + ["Not finished yet.", ""])
    models, measured = mem.models, mem.measured
    if models:
        m32, m8 = models.fp32, models.int8
        built_in = {
            p: ((measured.build_s if measured else {}).get(p)) or getattr(models, p).build_s for p in ("fp32", "int8")
        }
        agree = m8.heldout_agreement
        out += [
            f"Models: `{Path(m32.path).name}` {m32.bytes / 1e6:,.1f} MB (sha256 {m32.sha256[:12]}, "
            + (f"built in {built_in['fp32']:.0f} s" if built_in["fp32"] else "from the cache")
            + f"); `{Path(m8.path).name}` "
            f"{m8.bytes / 1e6:,.1f} MB, calibrated on {str(m8.calibration).replace(' per level', ' episodes per level')} at {plan.camera}"
            + (
                f", held-out action agreement with its fp32 {agree:.2%} over {m8.heldout_samples} observations"
                if agree
                else ""
            )
            + (f", built in {built_in['int8']:.0f} s" if built_in["int8"] else ", from the cache")
            + ".",
            "",
        ]
    if measured and measured.wall_s:
        built = sum(v or 0 for v in measured.build_s.values())
        out += [
            f"Stage wall time: {measured.wall_s / 60:.1f} min ({measured.date})"
            + (f", of which {built:.0f} s building the models" if built else ", models from the cache")
            + (f"; code {measured.code}" if measured.code else "")
            + ".",
            "",
        ]
    out += [
        f"{plan.episodes} seeded episode(s) per run (seeds {plan.seed}-{plan.seed + plan.episodes - 1}, level "
        f"`{plan.level}`, lockstep loop); a limit at or below a model's weight bytes gets one episode cut at "
        f'{plan.thrash_acts} acts (each act pages the weights back in). "acts > 80 ms": share of acts that would miss a '
        "10 Hz control period's deadline. Major faults: whole run (during loading). "
        + _swap_line(mem.swap, plan.swap_mb),
        "",
        "| model | condition | " + " | ".join(TABLE_COLUMNS) + " | episodes | reading |",
        "|---" * (len(TABLE_COLUMNS) + 4) + "|",
    ]
    for r in mem.rows:
        if r.skipped or not r.loaded or not r.flown:
            eps = MISSING
        else:
            eps = (f"{r.steps} acts (cut)" if r.cut_at_acts else f"{r.success}/{r.episodes} succeeded") + (
                " (time budget)" if r.time_budget_hit else ""
            )
        out.append(table_row(r, r.name, condition_label(r), [eps, verdict(r)]))
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
        f"Plot: {mem.plot or 'memory_fit_over_time.png'} (cgroup RAM, swap and the bridge's RSS over each run). Per run: "
        "memory/PART/memfit.json (with the time series) and memfit.md.",
        "",
    ]
    return "\n".join(out)


def _swap_line(swap: StageSwap | None, needed_mb: int) -> str:
    if not swap:
        return ""
    if not needed_mb:
        return "Swap: none (no limit asks for it)."
    if swap.created_mb:
        return f"Swap: a {swap.created_mb:,} MB file in /tmp, made for the stage and removed after."
    if swap.active_before_mb:
        return f"Swap: the {swap.active_before_mb:,} MB already active on this machine."
    return ""


def reading(mem: MemoryResult) -> list[str]:
    """Sentences drawn from the measured rows (no outcome is assumed)."""
    models = mem.models
    if models is None:
        return []
    lines = []
    by: dict[str, list[StageRow]] = {}
    for r in mem.rows:
        by.setdefault(r.model, []).append(r)
    for prec, model in (("fp32", models.fp32), ("int8", models.int8)):
        rs = by.get(model.path) or []
        base = next((r for r in rs if r.condition == "unconstrained" and r.flown), None)
        parts = []
        if base:
            parts.append(
                f"unconstrained it peaks at {mb(base.peak_rss_bytes)} MB RSS ({mb(base.rss_bytes)} MB "
                f"at the end), inference p50 {shown(base.infer_p50_ms, ',.2f')} ms"
            )
        for r in rs:
            if r is base:
                continue
            parts.append(
                f"{condition_label(r)}: {verdict(r)}"
                + (f" (p50 {shown(r.infer_p50_ms, ',.2f')} ms)" if r.flown else "")
            )
        if parts:
            lines.append(f"- **{prec}** (`{Path(model.path).name}`): " + "; ".join(parts) + ".")
    f32 = by.get(models.fp32.path) or []
    i8 = by.get(models.int8.path) or []
    lost = [r for r in f32 if classify(r) in ("oom", "no-load", "failed", "thrashes")]
    kept = [r for r in i8 if classify(r) in ("fits", "swapped")]
    if f32 and i8:
        slows = [
            r.vs_unconstrained.infer_p50_ms for r in kept if r.vs_unconstrained and r.vs_unconstrained.infer_p50_ms
        ]
        lines.append(
            f"- Under the limits tried, fp32 fails to load or thrashes in {len(lost)} of "
            f"{sum(r.condition == 'constrained' for r in f32)} runs; int8 loads and runs within {THRASH_RATIO:g}x of its "
            f"unconstrained inference time in {len(kept)} of {sum(r.condition == 'constrained' for r in i8)}"
            + (
                f" (measured {min(slows):.2f}-{max(slows):.2f}x; this shared VM's noise is of that order)"
                if slows
                else ""
            )
            + "."
        )
        pairs = []
        for r in f32:
            if r.condition != "constrained":
                continue
            q = next(
                (
                    x
                    for x in i8
                    if x.condition == "constrained"
                    and x.memory_limit_mb == r.memory_limit_mb
                    and x.swap_limit_mb == r.swap_limit_mb
                ),
                None,
            )
            if q is None or not q.flown:
                continue
            if r.flown and r.infer_p50_ms and q.infer_p50_ms:
                pairs.append(
                    f"{condition_label(r)}: fp32 {shown(r.infer_p50_ms, ',.2f')} ms, int8 {shown(q.infer_p50_ms, ',.2f')} ms "
                    f"(**{r.infer_p50_ms / q.infer_p50_ms:,.1f}x**)"
                )
            else:
                pairs.append(f"{condition_label(r)}: fp32 does not run, int8 {shown(q.infer_p50_ms, ',.2f')} ms")
        b32u = next((r for r in f32 if classify(r) == "baseline"), None)
        b8u = next((r for r in i8 if classify(r) == "baseline"), None)
        if b32u and b8u and b32u.infer_p50_ms and b8u.infer_p50_ms:
            pairs.insert(
                0,
                f"unconstrained: fp32 {shown(b32u.infer_p50_ms, ',.2f')} ms, int8 {shown(b8u.infer_p50_ms, ',.2f')} ms "
                f"({b32u.infer_p50_ms / b8u.infer_p50_ms:.1f}x)",
            )
        if pairs:
            p3 = TABLE4.table["policy3"]
            lines.append(
                "- Inference p50, fp32 against int8 (this machine's times): "
                + "; ".join(pairs)
                + f". The seed's Pi 3b: fp32 Policy III {p3.fp32_ms:.1f} ms, "
                f"int8 {p3.int8_ms:.1f} ms ({p3.speedup:.1f}x)."
            )
    b32 = next((r for r in f32 if r.condition == "unconstrained" and r.flown), None)
    b8 = next((r for r in i8 if r.condition == "unconstrained" and r.flown), None)
    if b32 and b8 and b8.peak_rss_bytes and b8.rss_bytes and b32.peak_rss_bytes and b32.rss_bytes:
        lines.append(
            f"- Memory, int8 against fp32 (unconstrained): file {models.fp32.bytes / models.int8.bytes:.2f}x "
            f"smaller, peak RSS {b32.peak_rss_bytes / b8.peak_rss_bytes:.2f}x lower, RSS at the end "
            f"{b32.rss_bytes / b8.rss_bytes:.2f}x lower (the bridge's runtime and onnxruntime's load-time copies "
            "do not shrink with the weights)."
        )
    return lines


def _md_device(data: StudyResults, title: str) -> str:
    dev = (data.device or {}).get("device") or {}
    ram = dev.get("ram_bytes")
    out = [
        title,
        "",
        f"Against a real device no memory cgroup can be put around the bridge's process: the device's own RAM is the "
        f"experiment. Device RAM (its hello, /proc/meminfo MemTotal): **{mb(ram)} MB**. Per model, the bridge's RSS from "
        "the closed loops above (the one bridge serves all models in turn: the peak is the process's so far, the model's "
        "share is its RSS growth on loading). The Air Learning-sized models of the sim-only memory stage are not flown here "
        "(615 MB; the bridge's upload limit is 64 MB).",
        "",
    ]
    if not data.rows:
        return "\n".join(out + ["No cell finished yet.", ""])
    level = data.args.levels[0]
    out += [
        "| model | RSS MB | peak RSS MB | model share MB | file MB | share of device RAM (RSS) |",
        "|---|---|---|---|---|---|",
    ]
    for r in data.rows:
        if r.level != level:
            continue
        share = shown(r.rss_bytes / ram if ram and r.rss_bytes else None, ".1%")
        out.append(
            f"| {Path(r.model).stem} | {mb(r.rss_bytes)} | {mb(r.peak_rss_bytes)} | "
            f"{mb(r.model_rss_bytes)} | {(r.model_bytes or 0) / MB:,.2f} | {share} |"
        )
    return "\n".join(out + [""])


MARKDOWN_SECTIONS: list[Callable[[StudyResults], str]] = [
    md_header,
    md_results,
    md_seed,
    md_roofline,
    md_memory,
    md_latency,
    md_targets,
    md_files,
]


def render_markdown(data: StudyResults) -> str:
    return "\n".join(s for s in (section(data) for section in MARKDOWN_SECTIONS) if s)


# ---------------------------------------------------------------------------------- figures

PRECISION_COLORS = {"fp32": "tab:blue", "fp16": "tab:orange", "int8": "tab:green", "int8-dynamic": "tab:red"}


def write_plots(out: Path, data: StudyResults) -> list[Path]:
    """latency.png, success.png, memory_over_time.png and (with the latency stage) latency_sweep.png in ``out``."""
    # deferred: matplotlib: plots only
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = [
        save_figure(_latency_figure(plt, data), out / "latency.png"),
        save_figure(_success_figure(plt, data), out / "success.png"),
        save_figure(_memory_figure(plt, data), out / "memory_over_time.png"),
    ]
    if data.latency and data.latency.sweep:
        paths.append(save_figure(latency_sweep_figure(plt, data.latency), out / "latency_sweep.png"))
    plt.close("all")
    return paths


def _where(data: StudyResults) -> str:
    p = (data.profile or {}).get("name")
    return f"this machine (sim-only, profile {p})" if data.args.sim_only else f"the device at {data.args.host}"


def _groups(data: StudyResults) -> list[str]:
    return list(dict.fromkeys(r.group for r in data.rows))


def _latency_figure(plt: Any, data: StudyResults) -> Any:
    """The timing pass: one panel per policy on its own linear axis from zero (the policies differ by orders
    of magnitude, the precisions of one policy compare as lengths), bar = p50 with a p99 whisker; and the
    speed-up of each precision over its fp32 on one axis for all policies."""
    level0 = data.args.levels[0]  # the timing pass is shared by the levels: any level's rows carry it
    rows = [r for r in data.rows if r.level == level0 and r.timing_inference_us and r.timing_inference_us.p50]
    groups = _groups(data)
    fig, axes = plt.subplots(
        1, len(groups) + 1, figsize=(3.4 * (len(groups) + 1) + 0.6, 4.6), squeeze=False, layout="constrained"
    )
    for ax, group in zip(axes[0], groups, strict=False):
        rs = sorted((r for r in rows if r.group == group), key=lambda r: PRECISIONS.index(r.precision))
        p50 = np.array([r.timing_inference_us.p50 for r in rs if r.timing_inference_us], dtype=float)
        p99 = np.array([r.timing_inference_us.p99 or 0.0 for r in rs if r.timing_inference_us], dtype=float)
        p99 = np.maximum(p99, p50)
        if not len(p50):
            ax.set_axis_off()
            continue
        scale, unit = (1e-3, "ms") if p99.max() >= 10_000 else (1.0, "µs")
        x = np.arange(len(rs))
        ax.bar(x, p50 * scale, 0.7, color=[PRECISION_COLORS[r.precision] for r in rs])
        ax.errorbar(x, p50 * scale, yerr=[np.zeros(len(x)), (p99 - p50) * scale], fmt="none", ecolor="k", capsize=3)
        top = p99.max() * scale
        for xi, r, v, w in zip(x, rs, p50 * scale, p99 * scale, strict=False):
            speed = f"\n{r.speedup_vs_fp32:.2f}x" if r.precision != "fp32" and r.speedup_vs_fp32 else ""
            value = f"{v:,.0f}" if v >= 100 else f"{v:.1f}"
            ax.text(xi, w + top * 0.02, f"{value}{speed}", ha="center", va="bottom", fontsize=8)
        ax.set_ylim(0, top * 1.25)
        ax.set_xticks(x, [r.precision for r in rs], fontsize=8)
        ax.set_ylabel(f"device inference per act ({unit})")
        ax.set_title(policy_label(group))
        ax.grid(True, axis="y", alpha=0.3)
    ax = axes[0][-1]
    width = 0.8 / len(PRECISIONS)
    ymax = 1.0
    for k, prec in enumerate(PRECISIONS):
        xs: list[float] = []
        ys: list[float] = []
        for g, group in enumerate(groups):
            row = next((r for r in rows if r.group == group and r.precision == prec), None)
            if row and row.speedup_vs_fp32:
                xs.append(g + (k - (len(PRECISIONS) - 1) / 2) * width)
                ys.append(row.speedup_vs_fp32)
        if xs:
            ax.bar(xs, ys, width, color=PRECISION_COLORS[prec], label=prec)
            for bx, by in zip(xs, ys, strict=True):
                if prec != "fp32":  # 1.0 by definition
                    ax.text(bx, by, f"{by:.2g}", ha="center", va="bottom", fontsize=7)
            ymax = max(ymax, *ys)
    ax.axhline(1.0, color="k", linestyle=":", linewidth=1)
    ax.set_ylim(0, ymax * 1.15)
    ax.set_xticks(range(len(groups)), [policy_label(g) for g in groups])
    ax.set_ylabel("speed-up over fp32 (fp32 p50 / p50)")
    ax.set_title("Speed-up over fp32 (dotted: 1x)")
    ax.grid(True, axis="y", alpha=0.3)
    fig.legend(
        handles=ax.get_legend_handles_labels()[0],
        title="precision",
        loc="outside lower center",
        ncol=len(PRECISIONS),
        fontsize=8,
        title_fontsize=8,
        frameon=False,
    )
    fig.suptitle(
        f"Device inference per act, timing pass on {_where(data)}:\nbar = median (p50), whisker = p99; "
        "label = p50 and speed-up over fp32",
        fontsize=10,
    )
    return fig


def _success_figure(plt: Any, data: StudyResults) -> Any:
    """Success per level on 0-100 %: a dot per model (the rate), its Wilson 95% interval as the bar, the
    precisions side by side within each policy."""
    # deferred: matplotlib: plots only
    from matplotlib.lines import Line2D

    levels = data.args.levels
    groups = _groups(data)
    present = [p for p in PRECISIONS if any(r.precision == p for r in data.rows)]
    fig, axes = plt.subplots(
        1,
        len(levels),
        figsize=(max(5.0, 1.6 * len(groups) + 1.5) * len(levels), 4.6),
        squeeze=False,
        sharey=True,
        layout="constrained",
    )
    width = 0.8 / max(1, len(present))
    for ax, level in zip(axes[0], levels, strict=False):
        lr = [r for r in data.rows if r.level == level]
        for r in lr:
            k, g = present.index(r.precision), groups.index(r.group)
            x = g + (k - (len(present) - 1) / 2) * width
            lo, hi = r.success_ci95
            rate = r.success_rate * 100
            ax.errorbar(
                [x],
                [rate],
                yerr=[[max(0.0, rate - lo * 100)], [max(0.0, hi * 100 - rate)]],
                fmt="o",
                color=PRECISION_COLORS[r.precision],
                capsize=4,
                markersize=6,
                clip_on=False,
            )
            ax.text(x + width * 0.1, rate, f"{r.successes}/{r.episodes}", ha="left", va="center", fontsize=7)
        episodes = sorted({r.episodes for r in lr})
        ax.set_ylim(0, 104)
        ax.set_yticks(range(0, 101, 10))
        ax.set_xticks(range(len(groups)), [policy_label(g) for g in groups])
        ax.set_xlim(-0.6, len(groups) - 0.4)
        ax.grid(True, axis="y", alpha=0.3)
        ax.set_title(f"level {level}: " + "/".join(map(str, episodes)) + " seeded episodes per model")
    axes[0][0].set_ylabel("success rate (%)")
    handles = [
        Line2D([], [], color=PRECISION_COLORS[p], marker="o", linestyle="-", label=p, markersize=6) for p in present
    ]
    fig.legend(
        handles=handles,
        title="precision (dot: success rate, bar: Wilson 95% interval, label: successes/episodes)",
        loc="outside lower center",
        ncol=len(present),
        fontsize=8,
        title_fontsize=8,
        frameon=False,
    )
    fig.suptitle(
        "Closed-loop success by policy and precision (every precision flies the same seeded episodes)", fontsize=10
    )
    return fig


def _memory_figure(plt: Any, data: StudyResults) -> Any:
    """The bridge's memory over each closed-loop run of the first level, one panel per policy, linear from
    zero: RSS solid with markers, peak RSS dashed and wider underneath (they coincide where RSS only grew)."""
    # deferred: matplotlib: plots only
    from matplotlib.lines import Line2D

    level0 = data.args.levels[0]
    groups = _groups(data)
    precision_of = {r.model: r.precision for r in data.rows}
    # 7 inches at least: one policy's panel alone is narrower than the legend
    fig, axes = plt.subplots(
        1, max(1, len(groups)), figsize=(max(7.0, 4.8 * len(groups)), 4.4), squeeze=False, layout="constrained"
    )
    present: list[str] = []
    for ax, group in zip(axes[0], groups, strict=False):
        cell = data.cells.get(f"{level0}/{group}")
        top = 0.0
        for run in cell.runs if cell else []:
            prec = precision_of.get(run["policy"], "fp32")
            s = np.asarray(run["device_memory"]["samples"], dtype=float)
            if not len(s):
                continue
            present.append(prec)
            color = PRECISION_COLORS[prec]
            ax.plot(s[:, 0], s[:, 2] / 2**20, color=color, linestyle="--", linewidth=4, alpha=0.35, zorder=2)
            ax.plot(s[:, 0], s[:, 1] / 2**20, color=color, linewidth=1.5, marker="o", markersize=3, zorder=3)
            top = max(top, float(s[:, 1:3].max()) / 2**20)
        ax.set_ylim(0, top * 1.12 if top else 1)
        ax.set_xlim(left=0)
        ax.set_title(policy_label(group))
        ax.set_xlabel("seconds into the model's run")
        ax.set_ylabel("bridge process memory (MiB)")
        ax.grid(True, alpha=0.3)
    handles = [Line2D([], [], color=PRECISION_COLORS[p], linewidth=6, label=p) for p in PRECISIONS if p in present] + [
        Line2D([], [], color="0.3", linewidth=1.5, marker="o", markersize=3, label="RSS (resident now)"),
        Line2D([], [], color="0.3", linestyle="--", linewidth=4, alpha=0.35, label="peak RSS so far"),
    ]
    fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), fontsize=8, frameon=False)
    process = "one bridge process per model" if data.args.sim_only else "one bridge serves every model in turn"
    fig.suptitle(f"Bridge memory during the closed loop, level {level0}\n({process}; MiB = 2^20 bytes)", fontsize=10)
    return fig
