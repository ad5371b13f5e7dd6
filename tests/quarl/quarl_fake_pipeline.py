"""A stand-in for quarl.pipeline.run_trial in the Tune runner's tests (run_study(trial_fn="quarl_fake_pipeline.run_trial")):
no training, a valid TrialResult in trial.json at once. Each call appends a line to ``<trial_dir>/calls.txt`` (how
the tests count runs); a spec whose name is a line of ``<out>/fail.txt`` raises, as a broken trial would; with
``<out>/sleep.txt`` each call first sleeps that many seconds."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from airq_cli import write_atomic
from quarl.config import TrialSpec
from quarl.results import Baseline, EvalProtocol, PolicyEval, TrainInfo, TrialResult


def run_trial(spec: TrialSpec, trial_dir: Path, progress: bool) -> TrialResult:
    with open(trial_dir / "calls.txt", "a") as f:
        f.write(f"{os.getpid()}\n")
    print(f"fake stdout {spec.name}")
    print(f"fake stderr {spec.name}", file=sys.stderr)
    os.write(1, f"fake fd 1 {spec.name}\n".encode())  # as a C library or a child process would write
    pause = trial_dir.parent.parent / "sleep.txt"  # seconds to take, as a real trial would
    if pause.is_file():
        time.sleep(float(pause.read_text()))
    fail = trial_dir.parent.parent / "fail.txt"
    if fail.is_file() and spec.name in fail.read_text().split():
        raise ValueError(f"planned failure of {spec.name}\nsecond line not shown")
    returns = [100.0 + spec.seed + i for i in range(spec.eval_episodes)]
    result = TrialResult(
        env_id=spec.env_id,
        algo=spec.algo,
        seed=spec.seed,
        train=TrainInfo(steps=spec.steps or 1000, wall_s=0.0, hyperparams={}, hyperparams_source="fake"),
        protocol=EvalProtocol(spec.eval_episodes, spec.eval_seed, None),
        baseline=Baseline(published=100.0, published_source="fake", threshold=90.0, passed=True),
        policies=[PolicyEval("fp32", "onnx", "fp32", 32, returns)],
        machine={"fake": True},
    )
    write_atomic(trial_dir / "trial.json", result.to_json().encode())
    return result
