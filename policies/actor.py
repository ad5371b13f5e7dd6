"""The deployable network of a trained SB3 model: a plain torch MLP mapping the flat observation to
``(action, logits)``. Evaluation during training, export and ``policies.evaluate`` all act through it,
so the numbers reported for a run are those of the network that ships."""

from __future__ import annotations

import copy
import zipfile
from pathlib import Path

import numpy as np
import torch
from torch import nn

from policies.config import (
    RUN_CHECKPOINTS,  # noqa: F401 - re-exported: callers import it from here
    from_run_dir,
)
from policies.errors import UserError


class DiscreteActor(nn.Module):
    """obs float32 [batch, obs_dim] -> (action int64 [batch], logits float32 [batch, n_actions]).

    For PPO/A2C the logits are the categorical policy's; for DQN they are the Q-values. Either way
    the deterministic action is their argmax.
    """

    def __init__(self, body: nn.Module, head: nn.Linear, obs_dim: int):
        super().__init__()
        self.body, self.head, self.obs_dim = body, head, obs_dim

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.head(self.body(obs))
        return torch.argmax(logits, dim=1), logits


def actor_from_model(model) -> DiscreteActor:
    """Copy the acting network out of an SB3 PPO/A2C/DQN model (on CPU, in eval mode)."""
    policy = model.policy
    obs_dim = int(np.prod(model.observation_space.shape))
    if hasattr(policy, "q_net"):  # DQN: q_net.q_net is Sequential(Linear, ReLU, ..., Linear)
        layers = list(policy.q_net.q_net)
        body, head = nn.Sequential(*layers[:-1]), layers[-1]
    else:  # ActorCriticPolicy; the features extractor is a Flatten of an already flat observation
        body, head = policy.mlp_extractor.policy_net, policy.action_net
    actor = DiscreteActor(copy.deepcopy(body).cpu(), copy.deepcopy(head).cpu(), obs_dim)
    return actor.eval()


def torch_policy_fn(actor: nn.Module):
    """A batch policy for nav_env.rollout.run_episodes: the action output of an actor returning (action, logits)
    (a DiscreteActor, quantize's fake-quant actors, quarl's DeployedActor)."""

    @torch.no_grad()
    def act(obs: np.ndarray) -> np.ndarray:
        action, _ = actor(torch.as_tensor(obs, dtype=torch.float32))
        return action.numpy()

    return act


def algo_class(name: str):
    # deferred: stable_baselines3: seconds to import
    from stable_baselines3 import A2C, DQN, PPO

    return {"ppo": PPO, "a2c": A2C, "dqn": DQN}[name]


def checkpoint_path(run_dir: Path, which: str = "best") -> Path:
    """``best`` (best periodic evaluation on held-out seeds), ``final`` or ``latest`` (resume point);
    ``best`` falls back to ``final`` then ``latest`` for runs too short to have evaluated."""
    order = {"best": ["best", "final", "latest"], "final": ["final"], "latest": ["latest"]}[which]
    for name in order:
        path = run_dir / ("checkpoints/latest.zip" if name == "latest" else f"{name}_model.zip")
        if path.is_file():
            return path
    raise UserError(f"{run_dir}: no {which} checkpoint (is this a policies.train run directory?)")


def load_run(run_dir: str | Path, which: str = "best"):
    """(TrainConfig, SB3 model, checkpoint path) of a run directory; UserError if missing or corrupt."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise UserError(f"run directory not found: {run_dir}")
    if not (run_dir / "config.toml").is_file():
        raise UserError(f"{run_dir}: not a run directory (no config.toml)")
    cfg = from_run_dir(run_dir)
    path = checkpoint_path(run_dir, which)
    try:
        model = algo_class(cfg.algo).load(path, device="cpu")
    except (zipfile.BadZipFile, EOFError, KeyError, ValueError, RuntimeError, OSError) as e:
        raise UserError(
            f"{path}: corrupt checkpoint ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
        ) from None
    return cfg, model, path
