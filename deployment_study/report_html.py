"""The deployment study's study.html: study.json and the study's figures as one self-contained page.

The page (template ``deployment_study/templates/study.html.j2``, frame and macros from ``nav_env.report_page``)
shows the study's command, machine and versions, the results per level, the seed's Table 4 beside ours, the
roofline table, the memory stage, the latency stage with its delay sweep, the targets, and the figures. It reads
study.json as written (the plain JSON of deployment_study.results.StudyResults, by key), never the typed records,
so it can be rebuilt from a finished study's folder: ``write_study_html(OUT / "study.json", OUT.glob("*.png"))``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from deployment_study.seed import label as policy_label
from deployment_study.seed import seed_group
from nav_env.report_page import figures_by_name, read_report, write_page

PAGE = "study.html"
TEMPLATE = "study.html.j2"
TABLE4_BOARD = "pi3b"  # the seed's Table 4 was measured on a Raspberry Pi 3b: its predictions stand beside it


def write_study_html(study: Mapping[str, Any] | Path, pngs: Iterable[Path], out_dir: Path | None = None) -> Path:
    """Write ``study.html`` beside study.json (or into ``out_dir``, required when ``study`` is a dict); ``pngs``:
    the study's figures (other files among them are ignored). The memory stage's figure, which the study
    writes after that stage, is found by the name study.json gives it."""
    data, out_dir = read_report(study, out_dir)
    pngs = list(pngs)
    memory_plot = (data.get("memory") or {}).get("plot")
    if memory_plot:
        pngs.append(out_dir / memory_plot)
    rows = data.get("rows") or []
    groups = {r["group"] for r in rows}
    return write_page(
        out_dir / PAGE,
        "deployment_study",
        TEMPLATE,
        data,
        figures=figures_by_name(pngs),
        labels={group: policy_label(group) for group in {*(data.get("seed") or {}).get("table", {}), *groups}},
        rows_by_level={
            level: [(i, r) for i, r in enumerate(rows) if r["level"] == level] for level in data["args"]["levels"]
        },
        table4=table4(data),
        board=TABLE4_BOARD,
        boards=sorted({b for e in data.get("roofline") or [] for b in e["predicted_on_pi"]}),
    )


def table4(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The rows of "beside the seed's Table 4": every policy group of the seed's table and of this study, with
    where its numbers are in study.json (None where one side has none): the seed's row, our fp32 and int8 rows
    on the first level, and their roofline entries where the Pi 3b prediction is shown."""
    rows = data.get("rows") or []
    level = data["args"]["levels"][0]
    seed = (data.get("seed") or {}).get("table", {})
    roofline = {e["model"]: k for k, e in enumerate(data.get("roofline") or [])}

    def row(group: str, precision: str) -> int | None:
        return next(
            (i for i, r in enumerate(rows) if (r["group"], r["level"], r["precision"]) == (group, level, precision)),
            None,
        )

    def predicted(index: int | None) -> int | None:
        if index is None or rows[index]["model"] not in roofline:
            return None
        k = roofline[rows[index]["model"]]
        shown = ((data["roofline"][k]["predicted_on_pi"].get(TABLE4_BOARD)) or {}).get("shown")
        return k if shown else None

    ours = list(dict.fromkeys(r["group"] for r in rows if r["level"] == level))
    beside = {seed_group(g) for g in ours}
    out = []
    # our groups, each beside its seed row; then the seed's rows no group of ours stands beside
    for group in [*ours, *(g for g in seed if g not in beside)]:
        fp32, int8 = row(group, "fp32"), row(group, "int8")
        key = seed_group(group)
        out.append(
            {
                "group": group,
                "seed": key if key in seed else None,
                "fp32": fp32,
                "int8": int8,
                "fp32_pi": predicted(fp32),
                "int8_pi": predicted(int8),
            }
        )
    return out
