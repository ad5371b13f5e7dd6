"""The model and its environment for a training run, built from a TrainConfig: the SB3 vector env over
nav_env's native one, the SB3 algorithm with the preset's network, and a warm start from another run.

The training run (policies.training_loop), the throughput bench (policies.bench) and distillation
(policies.distill) build their models here; policies.train is the command around the training run.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from policies.config import TRAIN_SEED_BASE, TrainConfig
from policies.errors import UserError
from policies.presets import get_preset

if TYPE_CHECKING:  # torch and SB3 load in the functions that use them: importing this module costs nothing
    from policies.vec_adapter import NavSB3VecEnv


def make_vec_env(cfg: TrainConfig, restart: int = 0) -> NavSB3VecEnv:
    # deferred: stable_baselines3 (via policies.vec_adapter): seconds to import
    from policies.vec_adapter import NavSB3VecEnv

    latency = cfg.latency_source()
    venv = NavSB3VecEnv(
        cfg.num_envs,
        cfg.env_config(cfg.curriculum),
        graduate=cfg.curriculum_graduate,
        latency=latency,
        backend=cfg.backend,
        dynamics=cfg.dynamics_config(),
    )
    # Training seeds start at 10M: disjoint from evaluation (0.. and 1M..); a resumed run draws new
    # episodes rather than replaying the first ones.
    seed = TRAIN_SEED_BASE + cfg.seed * 1_000_000 + restart * 10_000
    venv.seed(seed)
    if latency is not None:
        latency.start_episode(seed)  # the delays drawn during training are reproducible too
    return venv


def lr_schedule(cfg: TrainConfig):
    lr = cfg.learning_rate
    if cfg.lr_schedule == "constant":
        return lr
    return lambda progress_remaining: lr * max(progress_remaining, 0.0)


def build_model(cfg: TrainConfig, venv: NavSB3VecEnv, tb_dir: str | None):
    # deferred: torch: seconds to import
    from torch import nn

    # deferred: torch (via policies.actor): seconds to import
    from policies.actor import algo_class

    preset = get_preset(cfg.policy)
    common = dict(
        env=venv,
        learning_rate=lr_schedule(cfg),
        gamma=cfg.gamma,
        seed=cfg.seed,
        device="cpu",
        tensorboard_log=tb_dir,
        verbose=0,
    )
    if cfg.algo == "dqn":
        return algo_class("dqn")(
            "MlpPolicy",
            policy_kwargs=dict(net_arch=list(preset.actor), activation_fn=nn.ReLU),
            buffer_size=cfg.buffer_size,
            learning_starts=cfg.learning_starts,
            batch_size=cfg.batch_size,
            train_freq=cfg.train_freq,
            gradient_steps=cfg.gradient_steps,
            target_update_interval=max(cfg.target_update_interval // cfg.num_envs, 1),
            exploration_fraction=cfg.exploration_fraction,
            exploration_final_eps=cfg.exploration_final_eps,
            max_grad_norm=cfg.max_grad_norm,
            **common,
        )
    # What A2C and PPO share: the actor-critic MLP and their on-policy settings.
    on_policy: dict[str, Any] = dict(
        policy_kwargs=dict(net_arch=dict(pi=list(preset.actor), vf=list(preset.critic)), activation_fn=nn.ReLU),
        n_steps=cfg.n_steps,
        gae_lambda=cfg.gae_lambda,
        ent_coef=cfg.ent_coef,
        vf_coef=cfg.vf_coef,
        max_grad_norm=cfg.max_grad_norm,
        **common,
    )
    if cfg.algo == "a2c":
        return algo_class("a2c")("MlpPolicy", **on_policy)
    return algo_class("ppo")(
        "MlpPolicy", batch_size=cfg.batch_size, n_epochs=cfg.n_epochs, clip_range=cfg.clip_range, **on_policy
    )


def warm_start(model, source: str) -> None:
    """Copy the actor (policy_net + action_net) from another checkpoint / run dir of the same preset, or from a
    shipped fp32 ONNX model (models/*_fp32.onnx: its Gemm weights are the actor's layers)."""
    # deferred: torch (via policies.actor): seconds to import
    from policies.actor import load_run

    src = Path(source)
    if src.suffix == ".onnx":
        _warm_start_from_onnx(model, src)
        return
    if src.is_dir():
        _, teacher, _ = load_run(src)
    else:
        # deferred: stable_baselines3: seconds to import
        from stable_baselines3 import PPO

        if not src.is_file():
            raise UserError(f"init_from not found: {src}")
        teacher = PPO.load(src, device="cpu")
    for name in ("mlp_extractor.policy_net", "action_net"):
        dst_mod, src_mod = model.policy.get_submodule(name), teacher.policy.get_submodule(name)
        try:
            dst_mod.load_state_dict(src_mod.state_dict())
        except RuntimeError:
            raise UserError(f"init_from {src}: {name} has a different architecture") from None


def _warm_start_from_onnx(model, src: Path) -> None:
    """The actor's Linear layers from an fp32 ONNX export (policies.export: Gemm nodes with transB=1, weights
    (out, in) as torch keeps them), in graph order: the body's layers, then the head. A source with fewer inputs
    than the actor gets zero weights for the extra ones (the observation's last values)."""
    # deferred: onnx, torch: seconds to import
    import onnx
    import torch
    from onnx import numpy_helper

    if not src.is_file():
        raise UserError(f"init_from not found: {src}")
    graph = onnx.load(str(src)).graph
    weights = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    gemms = [n for n in graph.node if n.op_type == "Gemm"]
    if not gemms or any(n.input[1] not in weights or len(n.input) < 3 for n in gemms):
        raise UserError(f"init_from {src}: not an fp32 airq export (its layers are not Gemm nodes with weights)")
    policy = model.policy
    layers = [m for m in policy.mlp_extractor.policy_net if isinstance(m, torch.nn.Linear)] + [policy.action_net]
    if len(layers) != len(gemms):
        raise UserError(f"init_from {src}: {len(gemms)} layers, the preset's actor has {len(layers)}")
    with torch.no_grad():
        for i, (layer, node) in enumerate(zip(layers, gemms)):
            w, b = weights[node.input[1]].copy(), weights[node.input[2]].copy()
            if i == 0 and w.shape[0] == layer.weight.shape[0] and w.shape[1] < layer.weight.shape[1]:
                # an observation that gained values at its end (nav_env's observation.attitude): the new inputs start
                # at zero weight, so the warm-started actor acts as the source did until training moves them
                w = np.pad(w, ((0, 0), (0, layer.weight.shape[1] - w.shape[1])))
            if tuple(w.shape) != tuple(layer.weight.shape):
                raise UserError(
                    f"init_from {src}: layer {node.input[1]} is {w.shape}, the preset's is {tuple(layer.weight.shape)}"
                )
            layer.weight.copy_(torch.as_tensor(w))
            layer.bias.copy_(torch.as_tensor(b))
