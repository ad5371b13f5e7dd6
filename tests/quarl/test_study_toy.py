"""The study end to end at toy scale (the CI run): configs/quarl/toy.toml (CartPole, PPO and A2C, two
seeds, two bit widths) through a real local Ray Tune, then the report: its table, CSV, figures and reading.

Training returns differ between CPU kinds (the float reduction order of torch's and MKL's kernels;
docs/results.md, "What differs between CPU kinds"): PPO's seed 0 at 25k steps ends below CartPole's gate of 475 on
an Intel Xeon with AVX-512 VNNI and above it on AMD EPYCs. So no assertion on the real run depends on which side of
the gate a seed lands: the real run is checked for what it records, for gate verdicts that agree with its own
recorded returns, and against bounds far from the returns it reaches on any CPU measured. The gate and the report
on either side of it are checked on recorded returns (``RECORDED``), the same on every CPU."""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from report_data import make_trial, write_trial  # noqa: E402

from quarl.published import baseline_gate  # noqa: E402
from quarl.report import build_report  # noqa: E402
from quarl.results import Baseline, TrialResult  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "configs" / "quarl" / "toy.toml"
POLICIES = {"fp32", "fp16", "int8", "int8-w7", "int8-dynamic", "ptq-8bit", "ptq-4bit", "qat-8bit", "qat-4bit"}
GATE = 475.0  # CartPole-v1's gymnasium reward_threshold, the zoo's PPO and A2C reach it

# The real run's bounds, far from its returns on every CPU measured (docs/results.md): PPO at 25k steps learns
# (fp32 mean on seeds 0 and 1: 455.4 and 500.0 on the Xeon; 308.9-500.0 with MKL held to AVX2, torch's unvectorized
# kernels or two threads, other reduction orders), far above a random policy (about 22); A2C at 4k steps does not
# (24.4 and 26.5, the same with those kernels; at most 240.5 over seeds 0-7), far below the gate.
PPO_LEARNED = 150.0

# fp32 returns of the toy's trials on its 10 evaluation episodes, as recorded by `quarl run configs/quarl/toy.toml`
# on the 2-core Intel Xeon with AVX-512 VNNI (torch 2.13.0+cpu, stable-baselines3 2.9.2).
RECORDED = {
    ("ppo", 0): [500.0, 500.0, 500.0, 500.0, 500.0, 278.0, 276.0, 500.0, 500.0, 500.0],  # 455.4: fails the gate
    ("ppo", 1): [500.0] * 10,
    ("a2c", 0): [23.0, 27.0, 31.0, 24.0, 23.0, 20.0, 20.0, 31.0, 24.0, 21.0],
    ("a2c", 1): [26.0, 29.0, 31.0, 27.0, 23.0, 21.0, 21.0, 33.0, 28.0, 26.0],
}
ABOVE_GATE = [500.0] * 8 + [480.0, 400.0]  # 488.0: a seed 0 past the gate, as on the AMD EPYCs
BELOW_GATE = [500.0] * 8 + [376.0, 368.0]  # 474.4: a seed 1 just short of it


def quarl(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-m", "quarl", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )


def quiet(line: str) -> None:
    pass


# ---------------------------------------------------------------------------- the gate on recorded returns


def test_the_gate_passes_a_mean_that_reaches_its_threshold():
    published, source, threshold = baseline_gate("CartPole-v1", "ppo")
    assert threshold == GATE
    verdicts = {key: Baseline.judge(published, source, threshold, r).passed for key, r in RECORDED.items()}
    assert verdicts == {("ppo", 0): False, ("ppo", 1): True, ("a2c", 0): False, ("a2c", 1): False}
    assert Baseline.judge(published, source, threshold, ABOVE_GATE).passed
    assert not Baseline.judge(published, source, threshold, BELOW_GATE).passed
    assert Baseline.judge(published, source, threshold, [450.0, 500.0]).passed  # 475 exactly reaches it
    assert not Baseline.judge(published, source, threshold, [450.0, 499.0]).passed
    low = baseline_gate("MountainCar-v0", "dqn")  # a negative threshold, -110
    assert Baseline.judge(*low, [-100.0, -120.0]).passed and not Baseline.judge(*low, [-100.0, -120.5]).passed


def recorded_study(study: Path, fp32: dict[tuple[str, int], list[float]]) -> None:
    """The toy's four trials with these fp32 returns, judged by CartPole's gate; every other policy plays the same
    episodes a fixed amount lower (int8 5, 4-bit QAT 50, 4-bit PTQ 100), so the table and the reading have numbers."""
    lower = {"fp16": 0, "int8": 5, "int8-w7": 5, "int8-dynamic": 0, "ptq-8bit": 0, "ptq-4bit": 100}
    lower |= {"qat-8bit": 0, "qat-4bit": 50}
    for (algo, seed), returns in fp32.items():
        episodes = {name: [r - d for r in returns] for name, d in lower.items()} | {"fp32": returns}
        mean = {name: float(np.mean(r)) for name, r in episodes.items()}
        onnx = {name: mean[name] for name in ("fp16", "int8", "int8-w7", "int8-dynamic")}
        ptq, qat = ({b: mean[f"{m}-{b}bit"] for b in (8, 4)} for m in ("ptq", "qat"))
        t = make_trial("CartPole-v1", algo, seed, mean["fp32"], onnx, ptq, qat, episode_returns=episodes)
        gate = baseline_gate("CartPole-v1", algo)
        write_trial(study, dataclasses.replace(t, baseline=Baseline.judge(*gate, returns)))


# PPO's fp32 returns per seed in place of RECORDED's, its passed seeds, its status, its fp32 mean over the seeds used
SIDES = [
    pytest.param({}, [1], "ok; baseline failed for seed(s) 0, left out", 500.0, id="xeon-vnni"),
    pytest.param({0: ABOVE_GATE}, [0, 1], "ok", (488.0 + 500.0) / 2, id="both-pass"),
    pytest.param({1: BELOW_GATE}, [], "baseline failed", (455.4 + 474.4) / 2, id="none-pass"),
]


@pytest.mark.parametrize("ppo,passed,status,fp32", SIDES)
def test_report_on_either_side_of_the_gate(tmp_path, ppo, passed, status, fp32):
    study = tmp_path / "study"
    recorded_study(study, {**RECORDED, **{("ppo", s): r for s, r in ppo.items()}})
    report = build_report(study, tmp_path / "report", figures=False, warn=quiet)
    cell = report.cell("CartPole-v1", "ppo")
    assert cell.passed_seeds == passed and cell.status == status and cell.counted == bool(passed)
    assert cell.used_seeds == (passed or [0, 1]) and cell.rewards["fp32"].mean == pytest.approx(fp32)
    a2c = report.cell("CartPole-v1", "a2c")
    assert a2c.passed_seeds == [] and a2c.status == "baseline failed" and not a2c.counted
    assert a2c.rewards["fp32"].mean == pytest.approx((24.4 + 26.5) / 2)

    table = (tmp_path / "report" / "table2.md").read_text()
    ppo_row = next(line for line in table.splitlines() if line.startswith("| CartPole-v1 | PPO"))
    a2c_row = next(line for line in table.splitlines() if line.startswith("| CartPole-v1 | A2C"))
    assert f"| 0,1 ({len(cell.used_seeds)}) |" in ppo_row and "500.0 / 500.0 / 500.0" in ppo_row
    if passed:
        assert f"| {status} (gate ≥ 475.0) |" in ppo_row
    else:
        assert f"| **baseline failed** (fp32 {fp32:.1f} < 475.0) |" in ppo_row
    assert "| **baseline failed** (fp32 25.45 < 475.0) |" in a2c_row
    rows = {r["algo"]: r for r in csv.DictReader((tmp_path / "report" / "table2.csv").open())}
    assert rows["ppo"]["status"] == status and float(rows["ppo"]["fp32_mean"]) == pytest.approx(fp32)
    assert rows["a2c"]["status"] == "baseline failed"

    reading = (tmp_path / "report" / "reading.md").read_text()
    failed = "CartPole-v1 A2C, CartPole-v1 PPO" if not passed else "CartPole-v1 A2C"
    assert f"{int(bool(passed))} cell(s) passed their baseline" in reading
    assert f"Baseline failed (shown in the tables, not used here): {failed}." in reading
    if passed:
        assert "int8 (static) loses most here with PPO" in reading
    else:
        assert "int8: no cell passed its baseline" in reading


# ---------------------------------------------------------------------------- the real run through Ray Tune


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("toy") / "study"
    run = quarl("run", str(CONFIG), "--out", str(out))
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    return out


def trial(study: Path, algo: str, seed: int) -> TrialResult:
    return TrialResult.load(study / "trials" / f"CartPole-v1_{algo}_s{seed}" / "trial.json")


def test_every_trial_runs_through_tune_and_records_every_policy(study):
    record = json.loads((study / "study.json").read_text())
    assert record["status"] == "done"
    assert record["counts"] == {"trials": 4, "done": 4, "failed": 0, "unfinished": 0}
    names = sorted(t["name"] for t in record["trials"])
    assert names == ["CartPole-v1_a2c_s0", "CartPole-v1_a2c_s1", "CartPole-v1_ppo_s0", "CartPole-v1_ppo_s1"]
    for name in names:
        result = TrialResult.load(study / "trials" / name / "trial.json")
        assert {p.name for p in result.policies} == POLICIES
        assert all(len(p.returns) == 10 for p in result.policies)
        assert (study / "trials" / name / "log.txt").stat().st_size > 0
        for f in ("fp32", "fp16", "int8", "int8-w7", "int8-dynamic"):
            assert (study / "trials" / name / f"{f}.onnx").is_file()
        # the recorded verdict is the gate's on the recorded fp32 returns, whichever side of 475 they fall
        gate = baseline_gate(result.env_id, result.algo)
        assert gate[2] == GATE and result.baseline == Baseline.judge(*gate, result.policy("fp32").returns)
    # PPO's 25k steps learn CartPole and A2C's 4k do not, with wide margins on every CPU kind measured
    for seed in (0, 1):
        ppo, a2c = trial(study, "ppo", seed), trial(study, "a2c", seed)
        assert ppo.policy("fp32").mean >= PPO_LEARNED, f"PPO seed {seed}: {ppo.policy('fp32').returns}"
        assert a2c.policy("fp32").mean < GATE and not a2c.baseline.passed, a2c.policy("fp32").returns


def test_rerun_resumes_without_running_anything_again(study):
    stamps = {p: p.stat().st_mtime_ns for p in (study / "trials").rglob("stages/*.json")}
    run = quarl("run", str(CONFIG), "--out", str(study))
    assert run.returncode == 0, run.stderr[-2000:]
    assert {p: p.stat().st_mtime_ns for p in (study / "trials").rglob("stages/*.json")} == stamps


def test_report_table_figures_and_reading(study, tmp_path):
    out = tmp_path / "report"
    run = quarl("report", str(study), "--out", str(out))
    assert run.returncode == 0, run.stderr[-2000:]
    # PPO's cell as its recorded verdicts make it (which seeds pass depends on the CPU: the statuses themselves
    # are checked on recorded returns above); A2C's fails on every CPU
    trials = {s: trial(study, "ppo", s) for s in (0, 1)}
    passed = [s for s, t in trials.items() if t.baseline.passed]
    used, failed = passed or [0, 1], [s for s in (0, 1) if s not in passed]
    status = f"ok; baseline failed for seed(s) {failed[0]}, left out" if len(failed) == 1 else "ok"
    status = "baseline failed" if not passed else status
    table = (out / "table2.md").read_text()
    ppo = next(line for line in table.splitlines() if line.startswith("| CartPole-v1 | PPO"))
    a2c = next(line for line in table.splitlines() if line.startswith("| CartPole-v1 | A2C"))
    assert "| **baseline failed** (fp32 " in a2c and f"| 0,1 ({len(used)}) |" in ppo
    assert ("**baseline failed**" in ppo) == (not passed) and (status in ppo)
    assert "500.0 / 500.0 / 500.0" in ppo  # the seed's CartPole PPO row beside ours
    rows = list(csv.DictReader((out / "table2.csv").open()))
    assert {(r["env_id"], r["algo"]) for r in rows} == {("CartPole-v1", "ppo"), ("CartPole-v1", "a2c")}
    ppo_row = next(r for r in rows if r["algo"] == "ppo")
    fp32_means = [trials[s].policy("fp32").mean for s in used]
    assert float(ppo_row["fp32_mean"]) == pytest.approx(sum(fp32_means) / len(used), abs=0.01)
    assert ppo_row["status"] == status and ppo_row["seed_fp32"] == "500.0"
    assert next(r for r in rows if r["algo"] == "a2c")["status"] == "baseline failed"
    for png in ("reward_vs_bits_CartPole-v1_ppo.png", "weights_CartPole-v1_ppo.png", "weight_widths.png"):
        data = (out / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000, png
    reading = (out / "reading.md").read_text()
    assert f"{int(bool(passed))} cell(s) passed their baseline" in reading and "CartPole-v1 PPO" in reading
    assert "Baseline failed" in reading and "CartPole-v1 A2C" in reading
