"""The parts of an ActorQ run without Ray: a rollout actor's transitions, the SB3 learner fed with them, and the
broadcaster's re-calibration rule for stale int8 activation scales."""

from __future__ import annotations

import numpy as np
import pytest

from actorq.broadcaster import Broadcaster, forward_fp32
from actorq.learner import Learner, LearnerSettings
from actorq.nets import actor_weights, mlp_actor
from actorq.rollout import RolloutWorker
from actorq.tasks import Exploration, calibration_observations
from actorq.weights import Fp32Template


def _pendulum_version(learner: Learner, version: int = 0):
    return Fp32Template(learner.acting_network()).build(learner.weights(), version)


def test_a_rollout_is_reproducible_and_keeps_the_final_observation_of_each_episode():
    learner = Learner(LearnerSettings(task="pendulum", network="32,32", buffer_size=1000, batch_size=32))
    model = _pendulum_version(learner)
    runs = []
    for _ in range(2):
        worker = RolloutWorker("pendulum", actor=1, seed=3)
        summary, batch = worker.rollout(230, Exploration(False, noise_std=0.3), 0, [model])
        runs.append((summary, batch))
    (summary, batch), (_, again) = runs
    assert summary.steps == len(batch) == 230 and summary.version == 0 and set(batch.version) == {0}
    for name in ("obs", "next_obs", "action", "reward", "truncated"):
        np.testing.assert_array_equal(getattr(batch, name), getattr(again, name))  # same seed, same transitions
    # Pendulum-v1 truncates at 200 steps: the 200th transition ends the episode with its own last observation,
    # and the next one starts from a fresh reset (not a continuation)
    assert batch.truncated[199] and not batch.truncated[:199].any() and len(summary.episode_returns) == 1
    np.testing.assert_array_equal(batch.obs[1:200], batch.next_obs[:199])
    assert not np.array_equal(batch.obs[200], batch.next_obs[199])
    assert np.all(np.abs(batch.action) <= 1.0)

    # the learner takes them into SB3's buffer (truncation is not termination) and trains with SB3's train()
    assert learner.add(batch) == 230 and learner.model.replay_buffer.size() == 230
    assert learner.model.replay_buffer.timeouts[199, 0] == 1.0 and learner.model.replay_buffer.dones[199, 0] == 1.0
    before = learner.weights()
    stats = learner.train(20)
    assert stats.updates == 20 and stats.total_updates == 20 and stats.loss is not None
    assert any(not np.array_equal(before[k], v) for k, v in learner.weights().items())


def test_dqn_learner_acts_through_its_q_network_and_copies_its_target_on_sb3s_schedule():
    learner = Learner(
        LearnerSettings(task="nav", network="policy1", buffer_size=2000, batch_size=32, target_update_interval=100)
    )
    model = learner.model
    worker = RolloutWorker("nav", actor=0, seed=0)
    template = Fp32Template(learner.acting_network())
    _, batch = worker.rollout(99, Exploration(True, epsilon=0.5), 0, [template.build(learner.weights(), 0)])
    learner.add(batch)
    learner.train(30)
    q, target = model.q_net.state_dict(), model.q_net_target.state_dict()
    assert any(not np.array_equal(q[k].numpy(), target[k].numpy()) for k in q)  # 99 steps: no copy yet
    _, batch = worker.rollout(1, Exploration(True, epsilon=0.5), 0, [None])  # same version: not fetched again
    learner.add(batch)  # the 100th env step: SB3's _on_step copies the Q-network into the target
    q, target = model.q_net.state_dict(), model.q_net_target.state_dict()
    assert all(np.array_equal(q[k].numpy(), target[k].numpy()) for k in q)
    # the actors' network is the Q-network itself: its fp32 outputs are SB3's Q-values
    obs = batch.obs[:1]
    import torch

    with torch.no_grad():
        expected = model.q_net(torch.as_tensor(obs)).numpy()
    np.testing.assert_allclose(forward_fp32(learner.weights(), obs), expected, rtol=1e-5, atol=1e-5)


@pytest.fixture(scope="module")
def nav_observations() -> np.ndarray:
    return calibration_observations("nav", 512)


def test_broadcaster_recalibrates_when_int8_and_fp32_actions_part(nav_observations):
    net = mlp_actor((64, 64, 64), seed=1)
    weights = actor_weights(net)
    broadcaster = Broadcaster((64, 64, 64), 1032, 25, True, "int8", nav_observations, recalibrate_below=0.9)
    first = broadcaster.publish(weights, 0)
    assert first.version == 0 and first.precision == "int8"
    # a large change: the first layer 8x larger; the calibrated (stale) activation ranges clip everything after it
    drifted = dict(weights) | {"body.0.weight": weights["body.0.weight"] * 8, "body.0.bias": weights["body.0.bias"] * 8}
    broadcaster.publish(drifted, 1)
    broadcaster.publish(drifted, 2)  # built from a new template calibrated on these weights
    records = broadcaster.history()
    assert records[0].agreement >= 0.9 and not records[0].recalibrated and records[0].template_s > 0
    assert records[1].agreement < 0.9 and not records[1].recalibrated and records[1].template_s == 0
    assert records[2].recalibrated and records[2].template_s > 0 and records[2].agreement >= 0.9


def test_fp32_broadcaster_is_exact_and_never_checks(nav_observations):
    net = mlp_actor((64, 64, 64), seed=2)
    broadcaster = Broadcaster((64, 64, 64), 1032, 25, True, "fp32", nav_observations)
    model = broadcaster.publish(actor_weights(net), 4)
    from quantize.runtime import session

    logits = session(model.onnx).run(["logits"], {"obs": nav_observations[:32]})[0]
    np.testing.assert_allclose(logits, forward_fp32(actor_weights(net), nav_observations[:32]), rtol=1e-5, atol=1e-5)
    assert broadcaster.history()[0].agreement is None
