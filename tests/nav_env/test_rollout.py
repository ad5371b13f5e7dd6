"""Seeded evaluation pairs episodes across policies; baselines and the CLI tools run."""

import json
import subprocess
import sys

import numpy as np

from nav_env import load_level
from nav_env.baselines import HeuristicPolicy, RandomPolicy
from nav_env.rollout import run_episodes, summarize
from nav_env.stats import mcnemar_exact, paired_difference, wilson_interval


def test_episodes_pair_up_across_policies_and_env_counts():
    cfg = load_level("default")
    a = sorted(run_episodes(HeuristicPolicy(cfg), cfg, 24, seed=5, num_envs=8), key=lambda r: r.episode)
    b = sorted(run_episodes(RandomPolicy(cfg), cfg, 24, seed=5, num_envs=3), key=lambda r: r.episode)
    c = sorted(run_episodes(HeuristicPolicy(cfg), cfg, 24, seed=5, num_envs=5), key=lambda r: r.episode)
    assert [r.episode for r in a] == list(range(24))
    assert [(r.start_distance, r.zone) for r in a] == [(r.start_distance, r.zone) for r in b]
    assert [(r.outcome, r.steps, r.episode_return) for r in a] == [(r.outcome, r.steps, r.episode_return) for r in c]


def test_heuristic_beats_random_on_default():
    cfg = load_level("default")
    h = summarize(list(run_episodes(HeuristicPolicy(cfg), cfg, 60, seed=0)))
    r = summarize(list(run_episodes(RandomPolicy(cfg), cfg, 60, seed=0)))
    assert h["success_rate"] > r["success_rate"] + 0.3
    assert h["path_efficiency"] >= 1.0
    assert abs(h["success_rate"] + h["collision_rate"] + h["timeout_rate"] - 1) < 1e-9


def test_wilson_and_mcnemar_against_hand_values():
    lo, hi = wilson_interval(50, 100)
    assert abs(lo - 0.4038) < 1e-4 and abs(hi - 0.5962) < 1e-4
    assert wilson_interval(0, 10)[0] == 0.0
    assert abs(mcnemar_exact(0, 6) - 0.03125) < 1e-12
    d = paired_difference(np.array([1, 1, 0, 0, 1]), np.array([1, 0, 1, 1, 1]))
    assert d["only_first"] == 1 and d["only_second"] == 2 and abs(d["diff"] - 0.2) < 1e-12


def test_evaluate_cli_writes_json(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "nav_env.evaluate", "--level", "easy", "--episodes", "6", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    report = json.loads((tmp_path / "baselines_easy.json").read_text())
    assert set(report["policies"]) == {"heuristic", "random"}
    assert len(report["policies"]["heuristic"]["episodes"]) == 6
    assert "paired_vs_first" in report and "heuristic" in r.stdout


def test_bench_and_demo_run(tmp_path):
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "nav_env.bench",
            "--seconds",
            "0.05",
            "--rounds",
            "1",
            "--num-envs",
            "4",
            "--out",
            str(tmp_path / "b.json"),
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    figures = json.loads((tmp_path / "b.json").read_text())
    assert all(v > 0 for v in figures["env_steps_per_s"].values())
    r = subprocess.run(
        [sys.executable, "-m", "nav_env.demo", "--episodes", "1", "--out", str(tmp_path / "demo")],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "demo" / "episode_0.png").stat().st_size > 1000
