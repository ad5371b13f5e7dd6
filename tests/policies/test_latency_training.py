"""Latency-aware training and evaluation (docs/latency.md): policies.train --latency trains with every
action landing a drawn delay; policies.evaluate --latency flies the same delays for every policy."""

from __future__ import annotations

import json

import numpy as np
from policy_helpers import TINY_ARGS, run_module

from nav_env.config import load_level
from nav_env.latency import parse_latency
from nav_env.rollout import run_episodes
from policies.config import TrainConfig
from policies.vec_adapter import NavSB3VecEnv


def test_training_with_latency_runs_records_its_source_and_refuses_a_bad_one(tmp_path):
    run = tmp_path / "run"
    r = run_module("policies.train", *TINY_ARGS, "--steps", "2048", "--latency", "fixed:200", "--out", str(run))
    assert r.returncode == 0, r.stderr
    assert 'latency = "fixed:200"' in (run / "config.toml").read_text()
    assert json.loads((run / "metrics.json").read_text())["done"]
    for bad, needle in (
        ("measured", "no device here to measure"),
        ("fixed:-1", "must be finite and >= 0"),
        ("profile:pi3b", "predicted per model by hil.run"),
    ):
        r = run_module("policies.train", *TINY_ARGS, "--latency", bad, "--out", str(tmp_path / "bad"))
        lines = [line for line in r.stderr.splitlines() if line.strip()]
        assert r.returncode == 2 and len(lines) == 1 and needle in lines[0], r.stderr


def test_the_training_env_flies_the_drawn_delays():
    """Hover-then-forward from rest: with a 200 ms delay the first two steps do not move the vehicles."""
    cfg = TrainConfig(level="easy", num_envs=4, curriculum=False, latency="fixed:200").env_config(False)
    delayed = NavSB3VecEnv(4, cfg, latency=TrainConfig(latency="fixed:200").latency_source())
    plain = NavSB3VecEnv(4, cfg)
    moved = {}
    for name, venv in (("delayed", delayed), ("plain", plain)):
        venv.seed(5)
        venv.reset()
        start = venv.venv.sim.pos.copy()
        venv.step(np.zeros(4, dtype=np.int64))  # forward 5 m/s
        moved[name] = np.linalg.norm(venv.venv.sim.pos - start, axis=1)
    assert np.all(moved["delayed"] == 0) and np.all(moved["plain"] > 0)


def test_evaluation_with_latency_pairs_episode_by_episode(tmp_path):
    """A replayed distribution: each episode's delays come from its own seed, so the batch size (and so
    which episodes run side by side) does not change what an episode meets."""
    report = tmp_path / "report.json"
    q = list(np.linspace(20_000.0, 300_000.0, 201))  # 20-300 ms, as a hil.run report keeps them
    report.write_text(json.dumps({"runs": [{"policy": "pi.onnx", "round_trip_quantiles_us": q}]}))
    source = parse_latency(f"replay:{report}").for_policy("", "")
    cfg = load_level("default")

    def pilot(obs):
        return np.zeros(len(obs), dtype=np.int64)  # forward, whatever it sees

    wide = sorted(run_episodes(pilot, cfg, 6, seed=11, num_envs=6, latency=source), key=lambda e: e.episode)
    narrow = sorted(run_episodes(pilot, cfg, 6, seed=11, num_envs=2, latency=source), key=lambda e: e.episode)
    assert [(e.outcome, e.steps, e.path_length) for e in wide] == [(e.outcome, e.steps, e.path_length) for e in narrow]
    lockstep = sorted(run_episodes(pilot, cfg, 6, seed=11, num_envs=6), key=lambda e: e.episode)
    assert [e.path_length for e in lockstep] != [e.path_length for e in wide]
