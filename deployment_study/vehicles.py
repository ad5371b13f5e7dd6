"""python -m deployment_study.vehicles STUDY STUDY [--out DIR]: two deployment studies side by side, one of the
point mass (``make study``) and one of the rigid-body quadrotor (``make study-quadrotor``), in one page.

Each STUDY is a finished study's folder (its study.json). The page (vehicles.html, every number read by key from
vehicles.json, written beside it with the figure vehicles.png) shows, per vehicle and beside the seed's Table 4, the
fp32 and int8 success of each policy in lockstep on every level with int8's paired difference, and int8 against
fp32 when each flies at its predicted Pi 3B time (the latency stage's pairs; the Air Learning-sized Policy III among
them): where success is lost between the vehicles, and where int8 stands on each.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from airq_cli import ArgumentParser, UserError, output_dir, run, write_json
from deployment_study.args import PRECISIONS, group_and_precision
from deployment_study.latency_stage import LatencyRow, int8_against_fp32
from deployment_study.seed import label, seed_group
from nav_env.report_page import figures_by_name, write_page
from nav_env.stats import paired_difference

PROG = "deployment_study.vehicles"
PAGE, DATA, FIGURE, TEMPLATE = "vehicles.html", "vehicles.json", "vehicles.png", "vehicles.html.j2"
LADDER_FIGURE = "ladder.png"
VEHICLES = {"embedded": "point mass", "mujoco": "rigid-body quadrotor"}
# the ladder's rungs, from the simplest vehicle to the real autopilots (deployment_study.autopilot_table's vehicles)
LADDER = {"embedded": "point mass", "mujoco": "MuJoCo quadrotor", "ardupilot": "ArduCopter SITL", "px4": "PX4 SITL"}


def read_study(folder: Path) -> dict[str, Any]:
    """A finished study's study.json; UserError (one line) for a missing, unreadable or unfinished one."""
    path = folder / "study.json"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"{folder}: no study.json (run python -m deployment_study --out {folder} first)") from None
    except (OSError, ValueError) as e:
        raise UserError(f"{path}: cannot be read as JSON: {e}") from None
    if not isinstance(data, dict) or "rows" not in data or "args" not in data:
        raise UserError(f"{path}: not a deployment study's study.json")
    if not data.get("complete"):
        raise UserError(f"{path}: the study did not finish (resume it with the same command)")
    return data


def lockstep(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per policy group and level: fp32 and int8 success in the closed loop and int8's paired difference."""
    rows = data["rows"]
    out = []
    for level in data["args"]["levels"]:
        for group in dict.fromkeys(r["group"] for r in rows if r["level"] == level):
            by = {r["precision"]: r for r in rows if (r["group"], r["level"]) == (group, level)}
            if "fp32" not in by or "int8" not in by:
                continue
            out.append(
                {
                    "level": level,
                    "policy": label(group),
                    "seed": seed_group(group),
                    "fp32_success": by["fp32"]["success_rate"],
                    "int8_success": by["int8"]["success_rate"],
                    "int8_minus_fp32": by["int8"]["paired_vs_fp32"],
                    "episodes": by["fp32"]["episodes"],
                }
            )
    return out


def at_board(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The latency stage's fp32 and int8 of each group and level, each at its predicted board time, paired."""
    rows = [LatencyRow.from_dict(r) for r in (data.get("latency") or {}).get("rows") or []]
    return [
        {
            "level": fp32.level,
            "policy": label(fp32.group) + (", Air Learning-sized" if fp32.stand_in else ""),
            "fp32_ms": fp32.predicted_ms,
            "int8_ms": int8.predicted_ms,
            "fp32_success": fp32.at_board.success_rate,
            "int8_success": int8.at_board.success_rate,
            "int8_minus_fp32": diff,
            "fp32_time_to_goal_s": fp32.at_board.mean_time_to_goal_s,
            "int8_time_to_goal_s": int8.at_board.mean_time_to_goal_s,
        }
        for fp32, int8, diff in int8_against_fp32(rows)
    ]


def compare(studies: Mapping[Path, Mapping[str, Any]]) -> dict[str, Any]:
    """vehicles.json: each study's vehicle, where and how it ran, its lockstep and at-board rows, and the seed."""
    vehicles = []
    for folder, data in studies.items():
        backend = data["args"].get("backend", "embedded")
        device = (data.get("device") or {}).get("device") or {}
        vehicles.append(
            {
                "vehicle": VEHICLES.get(backend, backend),
                "backend": backend,
                "study": str(folder),
                "command": data["command"],
                "date": data["date"],
                "cpu": device.get("cpu_model"),
                "wall_s": data.get("wall_s"),
                "board": (data.get("latency") or {}).get("board"),
                "lockstep": lockstep(data),
                "at_board": at_board(data),
            }
        )
    backends = [v["backend"] for v in vehicles]
    if len(set(backends)) != len(backends):
        raise UserError(f"two studies of the same vehicle ({', '.join(backends)}): give one per vehicle")
    seed = next(iter(studies.values())).get("seed") or {}
    return {"vehicles": vehicles, "seed": seed}


def read_autopilot_table(folder: Path) -> dict[str, Any]:
    """A finished ``deployment_study.autopilot_table``'s autopilot_table.json; UserError (one line) otherwise."""
    path = folder / "autopilot_table.json"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"{folder}: no autopilot_table.json (run python -m deployment_study.autopilot_table "
                        f"--out {folder} first)") from None  # fmt: skip
    except (OSError, ValueError) as e:
        raise UserError(f"{path}: cannot be read as JSON: {e}") from None
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
        raise UserError(f"{path}: not an autopilot table's autopilot_table.json")
    return data


def ladder(tables: Mapping[Path, Mapping[str, Any]]) -> dict[str, Any]:
    """Per policy and precision, success on every rung of the ladder the tables flew (the same seeds on each):
    the first table that flew a rung gives it (the simulators' rows repeat in every table, equal)."""
    cells: dict[tuple[str, str], dict[str, Any]] = {}
    for table in tables.values():
        for r in table["rows"]:
            group, precision = group_and_precision(r["policy"]) or (Path(r["policy"]).stem, "-")
            cell = cells.setdefault((group, precision), {"policy": label(group), "group": group,
                                                         "precision": precision, "rungs": {}})  # fmt: skip
            if r["vehicle"] in cell["rungs"]:
                continue
            against = (r.get("against") or {}).get("mujoco")
            cell["rungs"][r["vehicle"]] = {
                "successes": r["successes"], "episodes": r["episodes"], "success_rate": r["success_rate"],
                "low": r["wilson_low"], "high": r["wilson_high"], "minus_mujoco": against,
                "firmware": (r.get("autopilot") or {}).get("firmware"),
                "outcomes": r.get("outcomes"),
            }  # fmt: skip
    # int8 against fp32 on each rung, paired over the same seeds (where a table flew both)
    for (group, precision), cell in cells.items():
        fp32 = cells.get((group, "fp32"))
        if precision == "fp32" or fp32 is None:
            continue
        for vehicle, c in cell["rungs"].items():
            base = fp32["rungs"].get(vehicle)
            if c.get("outcomes") and base and base.get("outcomes") and set(c["outcomes"]) == set(base["outcomes"]):
                seeds = sorted(c["outcomes"], key=int)
                c["minus_fp32"] = paired_difference([base["outcomes"][k] == "success" for k in seeds],
                                                    [c["outcomes"][k] == "success" for k in seeds])  # fmt: skip
    rungs = [v for v in LADDER if any(v in c["rungs"] for c in cells.values())]
    order = sorted(cells.values(), key=lambda c: (PRECISIONS.index(c["precision"]) if c["precision"] in PRECISIONS
                                                  else 9, c["group"]))  # fmt: skip
    return {
        "rungs": [{"vehicle": v, "name": LADDER[v]} for v in rungs],
        "rows": order,
        "tables": [
            {
                "folder": str(folder),
                "command": t.get("command"),
                "device": t.get("device"),
                "episodes": t.get("args", {}).get("episodes"),
                "level": t.get("args", {}).get("level"),
            }
            for folder, t in tables.items()
        ],  # fmt: skip
    }


def ladder_figure(data: Mapping[str, Any], path: Path) -> Path:
    """ladder.png: success on each rung (Wilson 95% bars), per policy, a panel per precision."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rungs = [r["vehicle"] for r in data["rungs"]]
    precisions = list(dict.fromkeys(r["precision"] for r in data["rows"]))
    colors = {"embedded": "#7f7f7f", "mujoco": "#1f77b4", "ardupilot": "#d62728", "px4": "#2ca02c"}
    fig, axes = plt.subplots(1, len(precisions), figsize=(5.6 * len(precisions), 4.2), squeeze=False, sharey=True)
    width = 0.8 / len(rungs)
    for ax, precision in zip(axes[0], precisions, strict=True):
        rows = [r for r in data["rows"] if r["precision"] == precision]
        for j, vehicle in enumerate(rungs):
            xs: list[float] = []
            ys: list[float] = []
            err: list[list[float]] = [[], []]
            for i, r in enumerate(rows):
                c = r["rungs"].get(vehicle)
                if c is None:
                    continue
                xs.append(i - 0.4 + width * (j + 0.5))
                ys.append(100 * c["success_rate"])
                err[0].append(100 * (c["success_rate"] - c["low"]))
                err[1].append(100 * (c["high"] - c["success_rate"]))
            if xs:
                ax.bar(xs, ys, width, yerr=err, capsize=2, color=colors.get(vehicle), error_kw={"elinewidth": 0.8})
        ax.set_xticks(range(len(rows)), [r["policy"] for r in rows], fontsize=8)
        ax.set_title(f"{precision}", fontsize=10)
        ax.set_ylim(0, 105)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel("success % (Wilson 95% interval)")
    from matplotlib.patches import Patch  # one handle per rung, whether or not the first panel flew it

    handles = [Patch(color=colors.get(v), label=LADDER[v]) for v in rungs]
    fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.93), ncol=len(rungs), fontsize=8)
    level = data["tables"][0].get("level") if data["tables"] else "-"
    fig.suptitle(f"The same policies and seeds up the ladder (level {level})", fontsize=10, y=0.99)
    fig.tight_layout(rect=(0, 0, 1, 0.86))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def figure(data: Mapping[str, Any], path: Path) -> Path:
    """vehicles.png: success at the predicted board times, fp32 against int8, per vehicle (a panel each) and level."""
    # deferred: matplotlib, ~0.5 s to import, only for the figure
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    vehicles = data["vehicles"]
    slots = max(6, *(len(v["at_board"]) for v in vehicles))  # the same bar width in every panel
    fig, axes = plt.subplots(1, len(vehicles), figsize=(6.2 * len(vehicles), 4.2), squeeze=False, sharey=True)
    for ax, v in zip(axes[0], vehicles, strict=True):
        rows = v["at_board"]
        names = [f"{r['policy']}\n{r['level']}" for r in rows]
        x = range(len(rows))
        ax.bar([i - 0.2 for i in x], [100 * r["fp32_success"] for r in rows], 0.4, label="fp32", color="#1f77b4")
        ax.bar([i + 0.2 for i in x], [100 * r["int8_success"] for r in rows], 0.4, label="int8", color="#ff7f0e")
        for i, r in enumerate(rows):
            ax.text(i, 2, f"{r['fp32_ms']:.3g} /\n{r['int8_ms']:.3g} ms", ha="center", fontsize=7, color="white")
        ax.set_xticks(list(x), names, fontsize=7, rotation=30, ha="right")
        ax.set_title(f"{v['vehicle']} ({v['backend']})")
        ax.set_ylim(0, 100)
        ax.set_xlim(-0.6, slots - 0.4)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel("success % at the predicted Pi 3B time")
    handles, names = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, names, loc="upper right", ncol=2, fontsize=8)  # outside the panels: no bar is covered
    fig.suptitle("fp32 and int8, each acting at its predicted Pi 3B time (the bar's label), per vehicle", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write(studies: list[Path], out: Path, autopilot_tables: list[Path] | None = None) -> Path:
    """vehicles.json, vehicles.png (and ladder.png with ``autopilot_tables``) and vehicles.html in ``out``; the
    page's path."""
    if len({folder.resolve() for folder in studies}) != len(studies):
        raise UserError(f"the same study given twice ({studies[0]}): give one per vehicle")
    data = compare({folder: read_study(folder) for folder in studies})
    tables = {folder: read_autopilot_table(folder) for folder in autopilot_tables or []}
    data["ladder"] = ladder(tables) if tables else None
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / DATA, data)
    pngs = [figure(data, out / FIGURE)]
    if data["ladder"]:
        pngs.append(ladder_figure(data["ladder"], out / LADDER_FIGURE))
    return write_page(out / PAGE, "deployment_study", TEMPLATE, data, figures=figures_by_name(pngs))


def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog=PROG, description=(__doc__ or "").splitlines()[0])
    p.add_argument("studies", nargs=2, type=Path, metavar="STUDY", help="a finished study's folder (study.json)")
    p.add_argument("--autopilot-tables", nargs="+", type=Path, default=[], metavar="DIR",
                   help="finished autopilot tables (python -m deployment_study.autopilot_table): the ladder "
                   "point mass -> rigid body -> real autopilot")  # fmt: skip
    p.add_argument("--out", type=output_dir, default="out/study_vehicles", help="folder for the page")
    args = p.parse_args(argv)
    page = write(args.studies, Path(args.out), args.autopilot_tables)
    print(f"wrote {page} (+ {DATA}, {FIGURE})")
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
