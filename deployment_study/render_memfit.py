"""deployment_study.memfit_run's results, rendered: memfit.md, the figure of each run's memory, and the
table rows the study's memory section shares.

Nothing here measures: it reads the MemfitResult (or its rows) that run_memory_fit returned, or that
memfit.json holds. A value that was not measured shows as ``airq_cli.MISSING``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from airq_cli import shown, write_atomic
from deployment_study.memfit_run import MB, MemfitResult, MemfitRow, MemfitRun, mb
from nav_env.render import save_figure


def write_report(result: MemfitResult) -> list[Path]:
    """memfit.md and memory_over_time.png beside the run's memfit.json (its ``config.out_dir``): the files written."""
    out = Path(result.config.out_dir)
    write_atomic(out / "memfit.md", format_markdown(result).encode())
    figure = plot_memory(result.rows, out / "memory_over_time.png")
    return [out / "memfit.md"] + ([figure] if figure else [])


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


def table_row(r: MemfitRow, name: str, condition: str, tail: list[str]) -> str:
    """One markdown row of a memory-fit table: name, condition, the TABLE_COLUMNS cells, then ``tail``."""
    if r.skipped:
        cells = [f"skipped: {r.skipped}"] + [""] * (len(TABLE_COLUMNS) - 1)
    elif not r.loaded or not r.flown:
        cells = [
            f"**no** (exit {r.exit_code}, OOM kills {r.oom_kills})" if not r.loaded else "yes",
            shown(r.load_s, ".1f"),
            *[shown(None)] * 5,
            mb(r.cgroup_peak_bytes),
            mb(r.swap_max_bytes),
            str(r.major_faults),
        ]
    else:
        cells = [
            "yes",
            shown(r.load_s, ".1f"),
            f"{shown(r.infer_p50_ms, ',.2f')} / {shown(r.infer_p99_ms, ',.2f')}",
            shown(r.loop_hz, ",.1f"),
            shown(r.acts_over_control_deadline, ".1%"),
            mb(r.peak_rss_bytes),
            mb(r.rss_bytes),
            mb(r.cgroup_peak_bytes),
            mb(r.swap_max_bytes),
            f"{r.major_faults} ({r.major_faults_load})",
        ]
    return "| " + " | ".join([name, condition, *cells, *tail]) + " |"


def format_markdown(result: MemfitResult) -> str:
    c, m = result.config, result.machine
    lines = [
        "# Memory fit: " + ", ".join(f"{mem} MB RAM + {sw} MB swap" for mem, sw in result.limits) + " vs unconstrained",
        "",
        f"{result.date_utc} UTC, {m.cpu} ({m.cores} cores, {m.ram_mb:,} MB), "
        f"kernel {m.kernel}, {result.cgroup.detail}; run wall time {result.wall_s:.0f} s; "
        f"{c.episodes} episodes (seeds {c.seed}-{c.seed + c.episodes - 1}), level {c.level}, bridge on "
        f"{'core ' + str(c.cpu) if c.cpu is not None else 'any core'}, {c.threads} onnxruntime thread(s), "
        f"{'lockstep loop' if c.rate_hz is None else str(c.rate_hz) + ' Hz paced loop'}.",
        "",
        "| model | condition | " + " | ".join(TABLE_COLUMNS) + " | success |",
        "|---" * (len(TABLE_COLUMNS) + 3) + "|",
    ]
    for r in result.rows:
        cond = r.condition + (f" ({r.memory_limit_mb} MB, swap {r.swap_limit_mb} MB)" if r.memory_limit_mb else "")
        if r.loaded and not r.flown:
            last = f"failed: {(r.error or '')[:60]}"
        else:
            last = f"{r.success}/{r.episodes}" + (" (time budget)" if r.time_budget_hit else "")
        lines.append(table_row(r, r.name, cond, [last]))
    ratios = [(r, r.vs_unconstrained) for r in result.rows if r.vs_unconstrained]
    if ratios:
        lines += [
            "",
            "Constrained / unconstrained:",
            "",
            "| model | inference p50 | inference p99 | loop Hz | load time | peak RSS |",
            "|---|---|---|---|---|---|",
        ]
        for r, v in ratios:
            lines.append(
                f"| {r.name} at {r.memory_limit_mb} MB + {r.swap_limit_mb} MB swap | "
                + " | ".join(
                    shown(x, ".2f", "x") for x in (v.infer_p50_ms, v.infer_p99_ms, v.loop_hz, v.load_s, v.peak_rss)
                )
                + " |"
            )
    sw = result.swap
    lines += [
        "",
        f"Emulated: {result.emulated}.",
        f"Not emulated: {result.not_emulated}.",
        f"Swap: {sw.requested_mb:,} MB asked for by the limits; {mb(sw.active_before_bytes)} MB active before the run, "
        f"{mb(sw.active_during_bytes)} MB during it"
        + (f" (a {sw.created_mb:,} MB file made for the run, removed after)" if sw.created_mb else "")
        + ".",
        "",
    ]
    return "\n".join(lines)


def plot_memory(rows: Sequence[MemfitRun], path: Path) -> Path | None:
    """deployment_study.memfit's figure, one panel per run: the cgroup's RAM and swap, the bridge's own RSS
    and peak RSS, the RAM limit; linear from zero, the legend above the panels."""
    # deferred: matplotlib: plots only
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    runs = [r for r in rows if r.cgroup_samples or r.bridge_memory]
    if not runs:
        return None
    fig, axes = plt.subplots(
        len(runs), 1, figsize=(9, 2.3 * len(runs) + 1.6), squeeze=False, sharex=False, layout="constrained"
    )
    for ax, r in zip(axes[:, 0], runs, strict=False):
        s = r.cgroup_samples or []
        t = [x["t_s"] for x in s]
        top = float(r.memory_limit_mb or 0)
        if s:
            usage = [(x.get("usage_bytes") or 0) / MB for x in s]
            swap = [(x.get("swap_bytes") or 0) / MB for x in s]
            ax.plot(t, usage, color="tab:blue", linewidth=1.8)
            ax.plot(t, swap, color="tab:orange", linewidth=1.8, clip_on=False, zorder=3)  # 0 shows on the axis
            top = max(top, *usage, *swap)
        bm = r.bridge_memory or []
        loaded_t = next((x["t_s"] for x in s if x.get("label") == "loaded"), r.load_s or 0.0)
        if bm:
            bt = [loaded_t + x.t_s for x in bm]
            ax.plot(bt, [x.peak_rss_bytes / MB for x in bm], color="k", linestyle="--", linewidth=4, alpha=0.25)
            ax.plot(bt, [x.rss_bytes / MB for x in bm], "k.", markersize=5)
            top = max(top, *(x.peak_rss_bytes / MB for x in bm))
        if r.memory_limit_mb:
            ax.axhline(r.memory_limit_mb, color="r", linestyle="--", linewidth=1)
        if s:
            ax.axvline(loaded_t, color="gray", linestyle=":", linewidth=1)
        ax.set_ylim(0, top * 1.12 if top else 1)
        ax.set_xlim(left=0)
        status = "did not load" if not r.loaded else f"inference p50 {shown(r.infer_p50_ms, ',.2f')} ms"
        cond = (
            f"{r.memory_limit_mb} MB RAM + {r.swap_limit_mb} MB swap"
            if r.memory_limit_mb
            else "unconstrained (no limit)"
        )
        ax.set_title(f"{r.name}: {cond} ({status})", fontsize=9)
        ax.set_ylabel("MB (2^20 bytes)")
        ax.grid(True, alpha=0.3)
    axes[-1, 0].set_xlabel("seconds since the bridge was started (dotted line: policy loaded)")
    handles = [
        Line2D([], [], color="tab:blue", linewidth=1.8, label="cgroup RAM in use"),
        Line2D([], [], color="tab:orange", linewidth=1.8, label="cgroup swap in use"),
        Line2D([], [], color="k", marker=".", linestyle="none", markersize=5, label="bridge RSS (its status)"),
        Line2D([], [], color="k", linestyle="--", linewidth=4, alpha=0.25, label="bridge peak RSS so far"),
        Line2D([], [], color="r", linestyle="--", linewidth=1, label="RAM limit"),
    ]
    fig.legend(handles=handles, loc="outside lower center", ncol=5, fontsize=8, frameon=False)
    fig.suptitle(
        "Memory of each run (MB = 2^20 bytes). cgroup RAM: the pages charged to the bridge's cgroup;\n"
        "shared libraries the host process had already read are charged to the host's, so it can sit below the RSS.",
        fontsize=9,
    )
    return save_figure(fig, path)
