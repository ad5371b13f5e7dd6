"""``python -m quarl report``'s report.html: report.json and the report's figures as one self-contained page.

The page (template ``quarl/templates/report.html.j2``, frame and macros from ``nav_env.report_page``) shows
Table 2 with the seed's numbers beside ours, the mean error per algorithm, QAT against PTQ, the weight ranges,
the reading and the figures of each cell. It reads report.json as written (quarl.report.report_dict, by key),
never the typed records, so it can be rebuilt from a report's folder:
``write_report_html(OUT / "report.json", OUT.glob("*.png"))``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from nav_env.report_page import Figure, figures_by_name, read_report, write_page
from quarl.config import env_slug
from quarl.published import SEED_SOURCE
from quarl.report_records import PRECISION_TITLES, PRECISIONS  # the columns of Table 2, as report.json names them

PAGE = "report.html"
TEMPLATE = "report.html.j2"
# quarl.report's per-cell PNGs, NAME_<env slug>_<algo>.png, and their captions
CELL_FIGURES = {
    "reward_vs_bits": "Mean return against bits, PTQ and QAT (bars: 95% t over seeds), fp32 dashed in its band.",
    "sqnr": "Each layer's weight signal-to-quantization-noise ratio against bits, rounding to nearest and down.",
    "weights": "The figure seed's fp32 weights per layer (log counts), with the 4-bit grid of the seed's quantizer.",
}


def write_report_html(report: Mapping[str, Any] | Path, pngs: Iterable[Path], out_dir: Path | None = None) -> Path:
    """Write ``report.html`` beside report.json (or into ``out_dir``, required when ``report`` is a dict);
    ``pngs``: the report's figures (other files among them are ignored)."""
    data, out_dir = read_report(report, out_dir)
    figures = figures_by_name(pngs)
    return write_page(
        out_dir / PAGE,
        "quarl",
        TEMPLATE,
        data,
        precisions=PRECISIONS,
        precision_titles=PRECISION_TITLES,
        seed_source=SEED_SOURCE,
        cell_figures=[cell_figures(c, figures) for c in data["cells"]],
        weight_widths=figures.get("weight_widths.png"),
        reading=[line.removeprefix("- ") for line in data.get("reading") or []],
    )


def cell_figures(cell: Mapping[str, Any], figures: Mapping[str, Figure]) -> list[tuple[Figure, str]]:
    """A cell's figures that were written (none with --no-figures), in the report's order, with their captions."""
    slug = f"{env_slug(cell['env_id'])}_{cell['algo']}"
    names = [(f"{name}_{slug}.png", caption) for name, caption in CELL_FIGURES.items()]
    return [(figures[name], caption) for name, caption in names if name in figures]
