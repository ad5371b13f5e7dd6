"""A2C and DQN train through the same CLI and export to the same ONNX contract (DQN exports its
Q-network: the "logits" output holds Q-values, whose argmax is the action)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch
from policy_helpers import TINY_ARGS

from policies.actor import actor_from_model, load_run
from policies.errors import run_cli


@pytest.mark.parametrize(
    "algo,extra",
    [
        ("a2c", ["--n-steps", "16"]),
        ("dqn", ["--buffer-size", "4000", "--learning-starts", "256", "--target-update-interval", "512"]),
    ],
)
def test_algorithm_trains_and_exports(tmp_path, algo, extra):
    from policies.export import export_run
    from policies.train import main

    run = tmp_path / algo
    assert (
        run_cli(
            main, [*TINY_ARGS, "--algo", algo, "--steps", "1024", "--eval-every", "100000", *extra, "--out", str(run)]
        )
        == 0
    )
    out = tmp_path / f"{algo}.onnx"
    meta = export_run(run, out, eval_episodes=0)
    assert meta["airq.algorithm"] == algo
    _, model, _ = load_run(run)
    actor = actor_from_model(model)
    obs = np.random.default_rng(0).random((256, 1032), dtype=np.float32)
    with torch.no_grad():
        t_action, t_logits = (x.numpy() for x in actor(torch.from_numpy(obs)))
    o_action, o_logits = ort.InferenceSession(str(out)).run(["action", "logits"], {"obs": obs})
    np.testing.assert_allclose(o_logits, t_logits, atol=1e-5, rtol=0)
    np.testing.assert_array_equal(o_action, t_action)
