"""The latency stage's section of study.md and its figure (latency_sweep.png)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from airq_cli import MISSING, shown
from deployment_study.latency_stage import Flight, LatencyResult, int8_against_fp32

if TYPE_CHECKING:
    from deployment_study.results import StudyResults


def _flight(f: Flight) -> str:
    return (
        f"{f.success_rate:.1%} ({f.success_ci95[0]:.1%}..{f.success_ci95[1]:.1%}) | {f.collision_rate:.1%} | "
        f"{shown(f.mean_time_to_goal_s, '.2f')} | {shown(f.mean_path_length_m, '.1f')}"
    )


def md_latency(data: StudyResults) -> str:
    lat = data.latency
    if lat is None:
        return ""
    out = [
        f"## At the {lat.board} board's speed (latency stage)",
        "",
        f"Each model flies the study's {lat.episodes} seeded episodes per level in lockstep and with every action landing "
        f"its **predicted** time on a {lat.board} late (the roofline prediction above, shown only where the check "
        f"agreed; a prediction, not a measurement), control period {lat.period_s:g} s. {lat.method}. Success with "
        "Wilson 95% interval; time to goal and path length over successful flights; the change is paired over the "
        "same episodes (95% interval, McNemar p).",
        "",
        f"| level | model | predicted {lat.board} ms (how) | lockstep: success | collision | time to goal s | path m | "
        f"at {lat.board} latency: success | collision | time to goal s | path m | change (pts) | lockstep = loop |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in lat.rows:
        d = r.paired
        change = f"{d['diff'] * 100:+.1f} ({d['low'] * 100:+.1f}..{d['high'] * 100:+.1f}, p {d['mcnemar_p']:.2g})"
        name = Path(r.model).stem + (" as Air Learning-sized" if r.stand_in else "")
        matches = MISSING if r.lockstep_matches_loop is None else f"{r.lockstep_matches_loop}/{r.lockstep.episodes}"
        out.append(
            f"| {r.level} | {name} | {r.predicted_ms:.3g} ({r.prediction}) | {_flight(r.lockstep)} | "
            f"{_flight(r.at_board)} | {change} | {matches} |"
        )
    pairs = int8_against_fp32(lat.rows)
    if pairs:
        out += [
            "",
            f"Does int8's speed turn into success? int8 against fp32 when each flies at its own predicted {lat.board} "
            "delay, paired over the same episodes (McNemar p):",
            "",
            "| level | policy | fp32 / int8 predicted ms | fp32 / int8 success | int8 - fp32 (pts) | fp32 / int8 time to "
            "goal s |",
            "|---|---|---|---|---|---|",
        ]
        for fp32, int8, d in pairs:
            name = fp32.group + (" (Air Learning-sized)" if fp32.stand_in else "")
            out.append(
                f"| {fp32.level} | {name} | {fp32.predicted_ms:.3g} / {int8.predicted_ms:.3g} | "
                f"{fp32.at_board.success_rate:.1%} / {int8.at_board.success_rate:.1%} | "
                f"{d['diff'] * 100:+.1f} ({d['low'] * 100:+.1f}..{d['high'] * 100:+.1f}, p {d['mcnemar_p']:.2g}) | "
                f"{shown(fp32.at_board.mean_time_to_goal_s, '.2f')} / {shown(int8.at_board.mean_time_to_goal_s, '.2f')} |"
            )
    if any(r.stand_in for r in lat.rows):
        out += [
            "",
            f"Air Learning-sized rows: {lat.rows[-1].stand_in if lat.rows else ''}; policies.widen makes "
            "the large model act as its source does on the area-downsampled image.",
        ]
    if lat.skipped:
        out += ["", "Not flown: " + "; ".join(lat.skipped) + "."]
    out += [
        "",
        f"Delay sweep (latency_sweep.png): success and time to goal against a fixed delay, fp32 and int8, "
        f"the predicted {lat.board} delays marked.",
        "",
    ]
    out.append(
        "| level | model | " + " | ".join(f"{f.delay_ms:g} ms" for f in lat.sweep[0].flights) + " |"
        if lat.sweep
        else ""
    )
    if lat.sweep:
        out.append("|---|---|" + "---|" * len(lat.sweep[0].flights))
        for c in lat.sweep:
            cells = [f"{f.success_rate:.1%}, {shown(f.mean_time_to_goal_s, '.2f')} s" for f in c.flights]
            out.append(f"| {c.level} | {Path(c.model).stem} | " + " | ".join(cells) + " |")
    out.append(f"\nLatency stage wall time: {lat.wall_s / 60:.1f} min.\n")
    return "\n".join(out)


def latency_sweep_figure(plt: Any, lat: LatencyResult) -> Any:
    """Success (top) and time to goal (bottom) against the delay, one column per level: the swept group's fp32
    (solid) and int8 (dashed), and each of its models flown at its predicted board delay as a marker on the
    curves (circle: the shipped model, star: the Air Learning-sized one), coloured by precision."""
    levels = list(dict.fromkeys(c.level for c in lat.sweep))
    swept = {c.group for c in lat.sweep}
    colours = {"fp32": "C0", "int8": "C1"}
    fig, axes = plt.subplots(
        2, max(1, len(levels)), figsize=(max(8.0, 5.2 * len(levels)), 7.4), squeeze=False, layout="constrained"
    )
    for col, level in enumerate(levels):
        top, bottom = axes[0][col], axes[1][col]
        for c in (c for c in lat.sweep if c.level == level):
            style = "-" if c.precision == "fp32" else "--"
            x = [f.delay_ms for f in c.flights]
            kw = dict(color=colours.get(c.precision, "k"), marker=".", label=f"{c.group} {c.precision}, fixed delays")
            top.plot(x, [100 * f.success_rate for f in c.flights], style, **kw)
            t = [f.mean_time_to_goal_s if f.mean_time_to_goal_s is not None else float("nan") for f in c.flights]
            bottom.plot(x, t, style, **kw)
        for r in (r for r in lat.rows if r.level == level and r.group in swept and r.precision in colours):
            f = r.at_board
            name = f"{r.precision} {'Air Learning-sized' if r.stand_in else 'shipped'}"
            mark: dict[str, Any] = dict(
                color=colours[r.precision],
                marker="*" if r.stand_in else "o",
                ms=13 if r.stand_in else 7,
                mec="k",
                ls="none",
                clip_on=False,
            )
            top.plot([r.predicted_ms], [100 * f.success_rate], label=f"{name} at {r.predicted_ms:.3g} ms", **mark)
            if f.mean_time_to_goal_s is not None:
                bottom.plot([r.predicted_ms], [f.mean_time_to_goal_s], **mark)
        top.set_title(f"level {level}")
        top.set_ylabel("success %")
        top.set_ylim(0, 100)
        bottom.set_ylabel("time to goal s (successful flights)")
        bottom.set_ylim(bottom=0)
        for ax in (top, bottom):
            ax.set_xlim(left=0)
            ax.set_xlabel("action delay ms")
            ax.grid(alpha=0.3)
        top.legend(fontsize=7, loc="lower left")
    fig.suptitle(
        f"Success and flight time against the action delay ({lat.episodes} seeded episodes per point, control period "
        f"{lat.period_s:g} s)\nmarkers: each model flown at its predicted {lat.board} inference time (a prediction); "
        "the Air Learning-sized Policy III is flown by Policy III's networks",
        fontsize=9,
    )
    return fig
