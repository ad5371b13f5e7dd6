"""python -m deployment_study.vehicles: two real (small) studies, the point mass and the quadrotor, side by side in
one page; the page in headless Chromium shows vehicles.json's numbers; bad input is one line and exit 2."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mujoco", reason="the quadrotor's study needs the dynamics extra (make installs it)")

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def studies(tmp_path_factory) -> dict[str, Path]:
    """Policy I fp32 and int8 of each vehicle, 3 episodes on `default`, with the latency stage (pi3b)."""
    out = {}
    for backend, source in (("embedded", "policy1"), ("mujoco", "policy1_quadrotor")):
        models = tmp_path_factory.mktemp(f"models_{backend}")
        paths = []
        for prec in ("fp32", "int8"):
            paths.append(models / f"{source}_{prec}.onnx")
            shutil.copy(ROOT / "models" / f"{source}_{prec}.onnx", paths[-1])
        folder = tmp_path_factory.mktemp(f"study_{backend}")
        proc = run(
            "deployment_study", "--sim-only", "--profile", "pi3b", "--backend", backend, "--models", *map(str, paths),
            "--episodes", "3", "--levels", "default", "--timing-acts", "10", "--timing-rounds", "2",
            "--no-memory-study", "--quiet", "--out", str(folder),
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-2000:]
        out[backend] = folder
    return out


def test_the_page_shows_both_vehicles_numbers(studies, tmp_path):
    from report_pages import check_page

    proc = run("deployment_study.vehicles", str(studies["embedded"]), str(studies["mujoco"]), "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    data = json.loads((tmp_path / "vehicles.json").read_text())
    assert [v["vehicle"] for v in data["vehicles"]] == ["point mass", "rigid-body quadrotor"]
    assert [r["policy"] for r in data["vehicles"][1]["lockstep"]] == ["Policy I, quadrotor"]
    required = []
    for k, v in enumerate(data["vehicles"]):
        # the latency stage flies only models whose roofline check agreed (timing: under load it may not)
        assert v["lockstep"], v
        for section in ("lockstep", "at_board"):
            for i in range(len(v[section])):
                key = f"vehicles.{k}.{section}.{i}"
                required += [f"{key}.fp32_success", f"{key}.int8_success", f"{key}.int8_minus_fp32.diff"]
    figures = (
        "[...document.querySelectorAll('figure img')].map(i => [i.closest('figure').dataset.figure, i.naturalWidth])"
    )
    loaded = check_page(tmp_path / "vehicles.html", data, required, figures)
    assert [name for name, width in loaded.found if width > 0] == ["vehicles.png"]


def test_bad_input_is_one_line(studies, tmp_path):
    copy = shutil.copytree(studies["mujoco"], tmp_path / "copy")
    twice = run("deployment_study.vehicles", str(studies["mujoco"]), str(studies["mujoco"]), "--out", str(tmp_path))
    same = run("deployment_study.vehicles", str(studies["mujoco"]), str(copy), "--out", str(tmp_path))
    missing = run("deployment_study.vehicles", str(studies["mujoco"]), str(tmp_path / "none"), "--out", str(tmp_path))
    for proc, message in (
        (twice, "the same study given twice"),
        (same, "two studies of the same vehicle (mujoco, mujoco): give one per vehicle"),
        (missing, "no study.json (run python -m deployment_study --out"),
    ):
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1


def test_int8_against_fp32_at_the_board_pairs_each_groups_flights():
    """The latency stage's fp32 and int8 of one group, level and size, paired over their episodes' outcomes."""
    from deployment_study.vehicles import at_board

    def row(precision, stand_in, ms, outcomes):
        flight = {
            "delay_ms": ms,
            "episodes": len(outcomes),
            "success_rate": outcomes.count("success") / len(outcomes),
            "success_ci95": [0.0, 1.0],
            "collision_rate": 0.0,
            "mean_time_to_goal_s": 6.0,
            "mean_path_length_m": 20.0,
            "outcomes": outcomes,
        }
        return {
            "level": "default", "group": "policy3_quadrotor", "precision": precision, "model": f"m_{precision}.onnx",
            "predicted_ms": ms, "prediction": "roofline", "lockstep": flight | {"delay_ms": 0.0},
            "at_board": flight, "paired": {}, "stand_in": stand_in or "",
        }  # fmt: skip

    ok, crash = "success", "collision"
    study = {
        "latency": {
            "rows": [
                row("fp32", None, 12.7, [ok, ok, ok, ok]),
                row("int8", None, 3.3, [ok, ok, ok, crash]),
                row("fp32", "Air Learning-sized", 289.0, [ok, crash, crash, crash]),
                row("int8", "Air Learning-sized", 70.8, [ok, ok, ok, crash]),
            ]
        }
    }
    pairs = at_board(study)
    assert [(p["policy"], p["fp32_ms"], p["int8_ms"]) for p in pairs] == [
        ("Policy III, quadrotor", 12.7, 3.3),
        ("Policy III, quadrotor, Air Learning-sized", 289.0, 70.8),
    ]
    assert [p["int8_minus_fp32"]["diff"] for p in pairs] == [-0.25, 0.5]
    assert at_board({"latency": None}) == [] and at_board({}) == []


def test_the_ladder_shows_each_rung_of_the_autopilot_tables(studies, tmp_path):
    """--autopilot-tables: the autopilot table's rows (here of real hil.run flights of the two simulators: the
    autopilots need SITL builds) become the ladder's cells, paired against the MuJoCo quadrotor, shown in the page
    and in ladder.png; a folder without a table is one line."""
    from report_pages import check_page

    from deployment_study.autopilot_table import Args, table

    models = [str(ROOT / "models" / f"policy1_quadrotor_{p}.onnx") for p in ("fp32", "int8")]
    reports = {}
    for backend in ("embedded", "mujoco"):
        out = tmp_path / backend
        proc = run("hil.run", *[x for m in models for x in ("--policy", m)], "--sim-only", "--backend", backend,
                   "--level", "default", "--episodes", "4", "--out", str(out), "--quiet")  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-2000:]
        reports[backend] = json.loads((out / "report.json").read_text())
    folder = tmp_path / "table"
    folder.mkdir()
    (folder / "autopilot_table.json").write_text(json.dumps(table(Args(models=models, episodes=4), reports)))
    page = tmp_path / "page"
    proc = run("deployment_study.vehicles", str(studies["embedded"]), str(studies["mujoco"]),
               "--autopilot-tables", str(folder), "--out", str(page))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    data = json.loads((page / "vehicles.json").read_text())
    ladder = data["ladder"]
    assert [r["vehicle"] for r in ladder["rungs"]] == ["embedded", "mujoco"]
    assert [(r["policy"], r["precision"]) for r in ladder["rows"]] == [
        ("Policy I, quadrotor", "fp32"), ("Policy I, quadrotor", "int8")
    ]  # fmt: skip
    for row, model in zip(ladder["rows"], models, strict=True):
        for vehicle in ("embedded", "mujoco"):
            run_ = next(r for r in reports[vehicle]["runs"] if r["policy"] == model)
            won = sum(e["outcome"] == "success" for e in run_["episodes"])
            assert (row["rungs"][vehicle]["successes"], row["rungs"][vehicle]["episodes"]) == (won, 4)
        assert row["rungs"]["mujoco"]["minus_mujoco"] is None and row["rungs"]["embedded"]["minus_mujoco"]["n"] == 4
    # int8 against fp32 on each rung, paired by seed
    fp32_row, int8_row = ladder["rows"]
    for vehicle in ("embedded", "mujoco"):
        assert "minus_fp32" not in fp32_row["rungs"][vehicle]
        d = int8_row["rungs"][vehicle]["minus_fp32"]
        assert d["n"] == 4 and d["diff"] == pytest.approx(
            (int8_row["rungs"][vehicle]["successes"] - fp32_row["rungs"][vehicle]["successes"]) / 4
        )
    required = [f"ladder.rows.{i}.rungs.{v}.success_rate" for i in range(2) for v in ("embedded", "mujoco")]
    figures = (
        "[...document.querySelectorAll('figure img')].map(i => [i.closest('figure').dataset.figure, i.naturalWidth])"
    )
    loaded = check_page(page / "vehicles.html", data, required, figures)
    assert [name for name, width in loaded.found if width > 0] == ["vehicles.png", "ladder.png"]
    missing = run("deployment_study.vehicles", str(studies["embedded"]), str(studies["mujoco"]),
                  "--autopilot-tables", str(tmp_path), "--out", str(tmp_path / "x"))  # fmt: skip
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1
    assert "no autopilot_table.json (run python -m deployment_study.autopilot_table" in missing.stderr
