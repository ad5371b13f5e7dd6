"""Small real policies for the quantize tests: an MLP behaviour-cloned from nav_env's heuristic (so
its logits have the margins of a trained policy, unlike random weights) exported to the airq ONNX
contract with torch's TorchScript exporter (the pattern policies.export produces: Gemm/Relu/ArgMax)."""

from __future__ import annotations

import io
import json

import numpy as np
import onnx
import torch
from torch import nn

from nav_env.baselines import HeuristicPolicy
from nav_env.config import load_level
from nav_env.rollout import run_episodes


class Actor(nn.Module):
    def __init__(self, obs_dim: int = 1032, hidden: tuple[int, ...] = (64, 64, 64), n_actions: int = 25):
        super().__init__()
        layers: list[nn.Module] = []
        d = obs_dim
        for h in hidden:
            layers += [nn.Linear(d, h), nn.ReLU()]
            d = h
        self.body, self.head = nn.Sequential(*layers), nn.Linear(d, n_actions)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.head(self.body(obs))
        return torch.argmax(logits, dim=1), logits


def heuristic_dataset(
    episodes: int = 24, seed: int = 5_000_000, level: str = "default"
) -> tuple[np.ndarray, np.ndarray]:
    cfg = load_level(level)
    teacher = HeuristicPolicy(cfg)
    obs_seen, act_seen = [], []

    def record(obs: np.ndarray) -> np.ndarray:
        a = teacher(obs)
        obs_seen.append(obs.copy())
        act_seen.append(np.asarray(a).copy())
        return a

    for _ in run_episodes(record, cfg, episodes, seed, num_envs=16):
        pass
    return np.concatenate(obs_seen), np.concatenate(act_seen).astype(np.int64)


def behaviour_cloned_actor(hidden: tuple[int, ...] = (64, 64, 64), iters: int = 400, seed: int = 0) -> Actor:
    torch.manual_seed(seed)
    x, y = heuristic_dataset()
    x_t, y_t = torch.as_tensor(x), torch.as_tensor(y)
    actor = Actor(hidden=hidden)
    opt = torch.optim.Adam(actor.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(iters):
        idx = torch.randint(0, len(x_t), (256,), generator=gen)
        loss = nn.functional.cross_entropy(actor(x_t[idx])[1], y_t[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return actor.eval()


def export_onnx(actor: nn.Module, obs_dim: int = 1032, metadata: dict[str, str] | None = None) -> bytes:
    buf = io.BytesIO()
    torch.onnx.export(
        actor,
        (torch.zeros(1, obs_dim),),
        buf,
        input_names=["obs"],
        output_names=["action", "logits"],
        dynamic_axes={"obs": {0: "batch"}, "action": {0: "batch"}, "logits": {0: "batch"}},
        opset_version=17,
        dynamo=False,
    )
    model = onnx.load_from_string(buf.getvalue())
    model.ir_version = 10
    meta = {
        "airq.obs_dim": str(obs_dim),
        "airq.action_space": "discrete:25",
        "airq.precision": "fp32",
        "airq.preset": "test-bc",
        "airq.level": "default",
        "airq.action_table": json.dumps([[0.0] * 4] * 25),
    }
    onnx.helper.set_model_props(model, meta | (metadata or {}))
    return model.SerializeToString()
