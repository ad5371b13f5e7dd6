"""The fp32 learner: an SB3 off-policy model (DQN for nav, TD3 for pendulum) and its replay buffer, fed by
the actors' transitions instead of its own rollouts.

SB3 does the learning: transitions go into ``model.replay_buffer`` through its ``add`` (so its timeout
handling applies), ``model.train(gradient_steps, batch_size)`` runs the updates, and DQN's target network
follows SB3's own ``_on_step`` (once per env step, as in ``learn``). Nothing here writes a loss. TensorBoard
scalars are SB3's own (``train/loss``, ...) plus the run's, through the model's logger.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from actorq.errors import ActorQError
from actorq.nets import actor_weights
from actorq.tasks import hidden_sizes, make_env, spec
from actorq.versions import RayProcess, Transitions


@dataclass(frozen=True)
class LearnerSettings:
    task: str
    network: str = ""  # "" = the task's default
    level: str = "default"
    seed: int = 0
    learning_rate: float = 1e-4
    gamma: float = 0.99
    buffer_size: int = 50_000
    batch_size: int = 64
    tau: float = 1.0  # DQN: hard target copies; TD3 uses 0.005
    target_update_interval: int = 2_000  # DQN, env steps
    torch_threads: int = 1


@dataclass(frozen=True)
class TrainStats:
    updates: int  # gradient steps this call
    total_updates: int
    seconds: float
    loss: float | None  # the last update's loss (DQN) or critic loss (TD3) as SB3 logged it


class Learner(RayProcess):
    """Owns the SB3 model. Not thread-safe; as a Ray actor its methods run one at a time."""

    def __init__(self, settings: LearnerSettings):
        # deferred: stable_baselines3: seconds to import
        from stable_baselines3 import DQN, TD3
        from stable_baselines3.common.logger import configure

        self.settings = settings
        torch.set_num_threads(settings.torch_threads)
        task = spec(settings.task)
        env = make_env(settings.task, settings.level)
        net_arch = list(hidden_sizes(settings.task, settings.network))
        common: dict[str, Any] = dict(
            learning_rate=settings.learning_rate,
            buffer_size=settings.buffer_size,
            batch_size=settings.batch_size,
            gamma=settings.gamma,
            learning_starts=0,  # the driver decides when training starts
            seed=settings.seed,
            device="cpu",
            verbose=0,
        )
        self.model: DQN | TD3
        if task.algorithm == "dqn":
            self.model = DQN(
                "MlpPolicy",
                env,
                policy_kwargs=dict(net_arch=net_arch, activation_fn=nn.ReLU),
                tau=settings.tau,
                target_update_interval=settings.target_update_interval,
                **common,
            )
        else:
            self.model = TD3("MlpPolicy", env, policy_kwargs=dict(net_arch=net_arch, activation_fn=nn.ReLU), **common)
        self.model.set_logger(configure(None, []))
        self.env_steps = 0
        self.updates = 0

    def use_tensorboard(self, folder: str) -> None:
        # deferred: stable_baselines3: seconds to import
        from stable_baselines3.common.logger import configure

        self.model.set_logger(configure(folder, ["tensorboard"]))

    def acting_network(self) -> nn.Sequential:
        """The network the actors run, sharing the model's modules: DQN's Q-network, or TD3's actor ``mu``
        without its final tanh (the actors apply it)."""
        policy: Any = self.model.policy
        if hasattr(policy, "q_net"):
            return policy.q_net.q_net
        layers = list(policy.actor.mu)
        if not isinstance(layers[-1], nn.Tanh):
            raise ActorQError("TD3's actor does not end in tanh: cannot hand it to the actors")
        return nn.Sequential(*layers[:-1])

    def weights(self) -> dict[str, np.ndarray]:
        """The current weight version's parameters (copies), as actorq.weights takes them."""
        return actor_weights(self.acting_network())

    def add(self, batch: Transitions) -> int:
        """Append a rollout's transitions to the replay buffer; returns the env steps seen so far."""
        model, buffer = self.model, self.model.replay_buffer
        assert buffer is not None
        discrete = spec(self.settings.task).discrete
        for t in range(len(batch)):
            action = np.array([[batch.action[t]]]) if discrete else batch.action[t][None]
            done = bool(batch.terminated[t] or batch.truncated[t])
            info = {"TimeLimit.truncated": bool(batch.truncated[t] and not batch.terminated[t])}
            buffer.add(
                batch.obs[t][None],
                batch.next_obs[t][None],
                action,
                np.array([batch.reward[t]], dtype=np.float32),
                np.array([done]),
                [info],
            )
            model.num_timesteps += 1
            if discrete:
                model._on_step()  # SB3 DQN's target network copy, counted in env steps as in learn()
        self.env_steps = model.num_timesteps
        return self.env_steps

    def train(self, updates: int, progress_remaining: float = 1.0) -> TrainStats:
        """``updates`` gradient steps of SB3's own ``train`` on the replay buffer."""
        if updates < 0:
            raise ActorQError(f"updates must be >= 0, got {updates}")
        model = self.model
        t0 = time.perf_counter()
        if updates:
            buffer = model.replay_buffer
            if buffer is None or buffer.size() < self.settings.batch_size:
                raise ActorQError(f"the replay buffer holds fewer than a batch ({self.settings.batch_size})")
            model._current_progress_remaining = progress_remaining
            model.train(gradient_steps=updates, batch_size=self.settings.batch_size)
        self.updates += updates
        loss = model.logger.name_to_value.get("train/loss", model.logger.name_to_value.get("train/critic_loss"))
        return TrainStats(updates, self.updates, time.perf_counter() - t0, None if loss is None else float(loss))

    def log(self, values: dict[str, float], step: int) -> None:
        """Run scalars beside SB3's, written together (TensorBoard when enabled)."""
        for key, value in values.items():
            self.model.logger.record(key, value)
        self.model.logger.dump(step)

    def save(self, path: str | Path) -> None:
        """The model (not the replay buffer) to an SB3 zip, written atomically."""
        path = Path(path)
        tmp = path.with_name(path.name + ".part")
        self.model.save(tmp)  # SB3 appends .zip to a name without it
        written = tmp if tmp.exists() else tmp.with_name(tmp.name + ".zip")
        written.chmod(0o644)
        written.replace(path)

    def load(self, path: str | Path, env_steps: int, updates: int) -> None:
        """Parameters (and optimizer state) of a checkpoint; the replay buffer starts empty."""
        path = Path(path)
        try:
            self.model.set_parameters(str(path), exact_match=True, device="cpu")
        except Exception as e:
            raise ActorQError(f"{path}: not a checkpoint of this learner ({str(e).splitlines()[0][:160]})") from None
        self.model.num_timesteps = self.env_steps = env_steps
        self.updates = updates
