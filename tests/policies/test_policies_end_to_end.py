"""Train a few thousand steps, export and evaluate, through the command lines a user runs."""

from __future__ import annotations

import csv
import json

import onnx
from policy_helpers import TINY_ARGS, run_module


def test_train_export_evaluate_cli(tmp_path):
    run = tmp_path / "run"
    r = run_module("policies.train", *TINY_ARGS, "--steps", "3072", "--out", str(run))
    assert r.returncode == 0, r.stderr
    for name in (
        "config.toml",
        "state.json",
        "metrics.json",
        "best_model.zip",
        "final_model.zip",
        "checkpoints/latest.zip",
    ):
        assert (run / name).is_file(), name
    assert any((run / "tb").rglob("events.out.tfevents.*"))
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["done"] and metrics["timesteps"] >= 3072 and metrics["evals"]
    assert metrics["evals"][-1]["seed"] == 1_000_000  # held-out evaluation seeds
    assert metrics["env_steps_per_s"] > 0

    model_path = tmp_path / "p1_fp32.onnx"
    r = run_module("policies.export", str(run), "-o", str(model_path), "--eval-episodes", "8")
    assert r.returncode == 0, r.stderr
    onnx.checker.check_model(onnx.load(str(model_path)))

    out = tmp_path / "eval"
    r = run_module(
        "policies.evaluate",
        str(run),
        str(model_path),
        "--episodes",
        "12",
        "--seed",
        "0",
        "--out",
        str(out),
        "--name",
        "e2e",
    )
    assert r.returncode == 0, r.stderr
    assert "paired" in r.stdout and "success" in r.stdout
    report = json.loads((out / "e2e.json").read_text())
    names = list(report["policies"])
    assert names == ["run", "p1_fp32.onnx"]
    for entry in report["policies"].values():
        s = entry["summary"]
        lo, hi = s["success_ci95"]
        assert s["episodes"] == 12 and 0 <= lo <= s["success_rate"] + 1e-12 and s["success_rate"] <= hi + 1e-12
        assert abs(s["success_rate"] + s["collision_rate"] + s["timeout_rate"] - 1) < 1e-9
    # the same network through torch and onnxruntime, on the same seeded episodes: identical outcomes
    paired = report["paired_vs_first"]["p1_fp32.onnx"]
    assert paired["only_first"] == paired["only_second"] == 0
    with open(out / "e2e.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["policy"] for r in rows] == names
    assert (out / "e2e_episodes.csv").read_text().count("\n") == 1 + 2 * 12
    assert (out / "e2e.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_evaluate_pairs_a_policy_with_the_scripted_baselines(tiny_onnx, tmp_path):
    from policies.errors import run_cli
    from policies.evaluate import main

    assert (
        run_cli(
            main,
            [
                str(tiny_onnx),
                "baseline:heuristic",
                "baseline:random",
                "--episodes",
                "6",
                "--out",
                str(tmp_path),
                "--name",
                "b",
            ],
        )
        == 0
    )
    report = json.loads((tmp_path / "b.json").read_text())
    assert list(report["policies"]) == ["tiny_fp32.onnx", "heuristic", "random"]
    assert set(report["paired_vs_first"]) == {"heuristic", "random"}


def test_model_card_from_run_onnx_and_evaluation(tiny_run, tiny_onnx, tmp_path):
    from policies.card import main as card
    from policies.errors import run_cli
    from policies.evaluate import main as evaluate

    assert (
        run_cli(
            evaluate, [str(tiny_onnx), "baseline:random", "--episodes", "4", "--out", str(tmp_path), "--name", "ev"]
        )
        == 0
    )
    out = tmp_path / "card.md"
    assert (
        run_cli(
            card,
            [
                "--run",
                str(tiny_run),
                "--onnx",
                str(tiny_onnx),
                "--eval",
                str(tmp_path / "ev.json"),
                "--command",
                "python -m policies.train ...",
                "-o",
                str(out),
            ],
        )
        == 0
    )
    text = out.read_text()
    assert "Wilson 95% CI" in text and "python -m policies.train ..." in text and "random" in text
    data = json.loads(out.with_suffix(".json").read_text())
    assert data["evaluation"]["episodes"] == 4 and data["seed"] == 3 and data["machine"]["cores"] >= 1
    import onnxruntime

    assert data["versions"]["onnxruntime"] == onnxruntime.__version__ and "torch" in data["versions"]
    assert f"onnxruntime {onnxruntime.__version__}" in text
