"""hil.run's report.html: report.json and the run's figures as one self-contained page.

The page (template ``hil/templates/report.html.j2``, frame and macros from ``nav_env.report_page``) shows the
run's command, machine and versions, the side-by-side summary, success with its Wilson intervals, the paired
comparison against the first policy, reliability, the latency and memory plots and a gallery of the drawn
trajectories, failures and successes apart. It reads only what hil.run has already written (report.json and
the PNGs), so it can be rebuilt from a finished run's folder: ``write_run_html(OUT / "report.json", OUT.glob("*.png"))``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from nav_env.report_page import Figure, figures_by_name, read_report, write_page

PAGE = "report.html"
TEMPLATE = "report.html.j2"


def write_run_html(report: Mapping[str, Any] | Path, pngs: Iterable[Path], out_dir: Path | None = None) -> Path:
    """Write ``report.html`` beside report.json (or into ``out_dir``, required when ``report`` is a dict);
    ``pngs``: the run's figures (other files among them are ignored)."""
    data, out_dir = read_report(report, out_dir)
    figures = figures_by_name(pngs)
    return write_page(
        out_dir / PAGE,
        "hil",
        TEMPLATE,
        data,
        names=[Path(run["policy"]).name for run in data["runs"]],
        successes=[sum(e["outcome"] == "success" for e in run["episodes"]) for run in data["runs"]],
        latency=figures.get("latency_histogram.png"),
        memory=figures.get("memory_over_time.png"),
        gallery=gallery(data, figures),
        zones=sorted({z for run in data["runs"] for z in run["outcomes"].get("success_rate_by_zone") or {}}, key=int),
    )


def gallery(data: Mapping[str, Any], figures: Mapping[str, Figure]) -> dict[str, list[dict[str, Any]]]:
    """The drawn episodes (hil.report's trajectory_STEM_epN.png), failures and successes apart, each with
    where its row is in report.json (the caption's numbers are read from there by key)."""
    out: dict[str, list[dict[str, Any]]] = {"failures": [], "successes": []}
    for i, run in enumerate(data["runs"]):
        stem = Path(run["policy"]).stem
        for j, row in enumerate(run["episodes"]):
            fig = figures.get(f"trajectory_{stem}_ep{row['episode']}.png")
            if fig is not None:
                kind = "successes" if row["outcome"] == "success" else "failures"
                out[kind].append({"key": f"runs.{i}.episodes.{j}", "name": Path(run["policy"]).name, "figure": fig})
    return out
