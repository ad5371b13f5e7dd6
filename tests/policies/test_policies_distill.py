"""The Policy III warm start (behaviour cloning + DAgger) produces a normal run directory that
export and PPO fine-tuning (--init-from) accept. Uses Policy I as the student to stay fast."""

from __future__ import annotations

import json

import torch
from policy_helpers import TINY_ARGS

from policies.actor import actor_from_model, load_run
from policies.errors import run_cli


def test_distill_then_finetune(tiny_run, tmp_path):
    from policies.distill import main as distill
    from policies.export import export_run
    from policies.train import main as train

    student = tmp_path / "student"
    assert (
        run_cli(
            distill,
            [
                "--teacher",
                str(tiny_run),
                "--out",
                str(student),
                "--policy",
                "policy1",
                "--iterations",
                "2",
                "--samples-per-iteration",
                "2048",
                "--eval-episodes",
                "4",
            ],
        )
        == 0
    )
    metrics = json.loads((student / "metrics.json").read_text())
    assert [e["teacher_share"] for e in metrics["evals"]] == [1.0, 0.5]
    assert metrics["evals"][-1]["samples"] == 4096
    export_run(student, tmp_path / "student.onnx", eval_episodes=0)
    assert (tmp_path / "student.onnx").stat().st_size > 0

    # warm start copies the student's actor exactly
    from policies.builders import build_model, make_vec_env, warm_start
    from policies.config import TrainConfig

    cfg = TrainConfig(policy="policy1", num_envs=2, n_steps=128, batch_size=256, progress=False)
    fresh = build_model(cfg, make_vec_env(cfg), tb_dir=None)
    warm_start(fresh, str(student))
    _, s_model, _ = load_run(student)
    obs = torch.rand(16, 1032)
    with torch.no_grad():
        torch.testing.assert_close(actor_from_model(fresh)(obs)[1], actor_from_model(s_model)(obs)[1], rtol=0, atol=0)

    # and the training CLI fine-tunes from it
    tuned = tmp_path / "tuned"
    assert (
        run_cli(
            train,
            [*TINY_ARGS, "--steps", "1024", "--init-from", str(student), "--out", str(tuned), "--eval-every", "100000"],
        )
        == 0
    )
    assert json.loads((tuned / "metrics.json").read_text())["done"]


def test_distillation_flies_the_teachers_simulator():
    """A teacher trained on the quadrotor with randomized physics teaches on that vehicle: the student's data are
    the mujoco env's observations (under the teacher's dynamics file), not the point mass's."""
    import numpy as np
    from gymnasium.vector import AutoresetMode

    from nav_env import NavVectorEnv, load_level
    from nav_env.dynamics.config import load_dynamics
    from policies.distill import collect

    cfg = load_level("default")
    dyn = load_dynamics("configs/dynamics/iris_randomized.toml")

    def hover(obs):
        return torch.full((len(obs),), 7), None  # action 7: hover

    x, y = collect(hover, hover, cfg, 8, 1.0, seed=5, num_envs=4, backend="mujoco", dynamics=dyn)
    env = NavVectorEnv(4, config=cfg, autoreset_mode=AutoresetMode.SAME_STEP, backend="mujoco", dynamics=dyn)
    first, _ = env.reset(seed=5)
    assert np.array_equal(x[:4], first) and (y == 7).all()
    embedded = NavVectorEnv(4, config=cfg, autoreset_mode=AutoresetMode.SAME_STEP)
    assert not np.array_equal(x[:4], embedded.reset(seed=5)[0])  # the noise and the camera's own tilt differ
