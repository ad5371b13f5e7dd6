"""The network a trained SB3 model acts with, as one torch module: flat float32 observation -> (action, logits).

Whatever the algorithm, the acting path is ``input -> features -> body -> head -> output``:

=========  ==============================  ==============================  ==========================
algorithm  features                        body -> head                    output
=========  ==============================  ==============================  ==========================
DQN        q_net.features_extractor        q_net.q_net[:-1] -> [-1]        argmax of the Q-values
PPO / A2C  (pi_)features_extractor         mlp_extractor.policy_net ->     argmax (discrete); the mean
                                           action_net                      clipped to the bounds (Box)
DDPG/TD3   actor.features_extractor        actor.mu[:-2] -> mu[-2]         tanh, scaled to the bounds
SAC        actor.features_extractor        actor.latent_pi -> actor.mu     tanh, scaled to the bounds
=========  ==============================  ==============================  ==========================

``logits`` is the head's output (Q-values, categorical logits, or the action before its squash): the int8
recipe keeps that last layer in float, as quantize.ptq does for the nav policies. In front of the features go
the steps SB3 applies before the network: VecNormalize's observation statistics (clipped) and images / 255.

Fake quantization (the seed's quantizer, quantize.fakequant) goes into a copy of the actor for n-bit PTQ, and
into the live SB3 model for QAT (``insert_into_model``), where it trains; the actor taken from that model
afterwards carries the quantizers with it.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from quantize.fakequant import ActivationQuant, calibrate_module, insert_fake_quant


@dataclass(frozen=True)
class ObsNormalizer:
    """VecNormalize's observation transform, frozen: clip((obs - mean) / sqrt(var + eps), -clip, clip)."""

    mean: np.ndarray
    var: np.ndarray
    epsilon: float
    clip: float


class DeployedActor(nn.Module):
    low: torch.Tensor  # action bounds (Box actions)
    high: torch.Tensor
    obs_mean: torch.Tensor  # VecNormalize's statistics, when the zoo normalizes
    obs_std: torch.Tensor

    def __init__(
        self,
        features: nn.Module,
        body: nn.Module,
        head: nn.Module,
        obs_shape: tuple[int, ...],
        output: str,  # "argmax", "clip" or "tanh"
        low: np.ndarray | None = None,
        high: np.ndarray | None = None,
        normalizer: ObsNormalizer | None = None,
        image_scale: bool = False,
    ):
        super().__init__()
        self.features, self.body, self.head = features, body, head
        self.obs_shape, self.output, self.image_scale = tuple(obs_shape), output, image_scale
        self.obs_dim = int(np.prod(obs_shape))
        self.input_quant: ActivationQuant | None = None
        self.register_buffer("low", torch.as_tensor(np.zeros(1) if low is None else low, dtype=torch.float32))
        self.register_buffer("high", torch.as_tensor(np.ones(1) if high is None else high, dtype=torch.float32))
        self.normalized = normalizer is not None
        if normalizer is not None:
            self.register_buffer("obs_mean", torch.as_tensor(normalizer.mean, dtype=torch.float32).reshape(-1))
            self.register_buffer(
                "obs_std",
                torch.sqrt(torch.as_tensor(normalizer.var, dtype=torch.float32) + normalizer.epsilon).reshape(-1),
            )
            self.obs_clip = float(normalizer.clip)

    def preprocess(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs
        if self.normalized:
            x = torch.clamp((x - self.obs_mean) / self.obs_std, -self.obs_clip, self.obs_clip)
        if self.image_scale:
            x = x / 255.0
        if self.input_quant is not None:
            x = self.input_quant(x)
        return x.reshape(-1, *self.obs_shape)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.head(self.body(self.features(self.preprocess(obs))))
        if self.output == "argmax":
            return torch.argmax(logits, dim=1), logits
        if self.output == "clip":
            return torch.maximum(torch.minimum(logits, self.high), self.low), logits
        return self.low + (torch.tanh(logits) + 1.0) * 0.5 * (self.high - self.low), logits


@dataclass
class ActingPath:
    """References into a live SB3 model (not copies): where its acting modules sit."""

    features: nn.Module
    body: nn.Module
    head: nn.Module
    output: str
    squash: nn.Module | None  # DDPG/TD3's final Tanh inside actor.mu: not an activation to quantize
    owner: nn.Module  # the module whose ``features_extractor`` attribute feeds the acting path
    head_owner: tuple[nn.Module, str] | None  # where the head sits as an attribute (PPO, SAC), else inside body


def acting_path(model) -> ActingPath:
    policy = model.policy
    if hasattr(policy, "q_net"):  # DQN
        seq = policy.q_net.q_net
        return ActingPath(
            policy.q_net.features_extractor, nn.Sequential(*list(seq)[:-1]), seq[-1], "argmax", None, policy.q_net, None
        )
    if hasattr(policy, "mlp_extractor"):  # PPO, A2C
        features = policy.features_extractor if policy.share_features_extractor else policy.pi_features_extractor
        discrete = hasattr(model.action_space, "n")
        return ActingPath(
            features,
            policy.mlp_extractor.policy_net,
            policy.action_net,
            "argmax" if discrete else "clip",
            None,
            policy,
            (policy, "action_net"),
        )
    actor = policy.actor
    if hasattr(actor, "latent_pi"):  # SAC
        return ActingPath(actor.features_extractor, actor.latent_pi, actor.mu, "tanh", None, actor, (actor, "mu"))
    mu = list(actor.mu)  # DDPG / TD3: Linear, ReLU, ..., Linear, Tanh
    if not isinstance(mu[-1], nn.Tanh):
        raise ValueError(f"expected actor.mu to end with Tanh, got {mu[-1]}")
    return ActingPath(actor.features_extractor, nn.Sequential(*mu[:-2]), mu[-2], "tanh", mu[-1], actor, None)


def normalizer_of(vec_normalize) -> ObsNormalizer | None:
    if vec_normalize is None or not vec_normalize.norm_obs:
        return None
    rms = vec_normalize.obs_rms
    return ObsNormalizer(
        np.asarray(rms.mean), np.asarray(rms.var), float(vec_normalize.epsilon), float(vec_normalize.clip_obs)
    )


def actor_from_model(model, vec_normalize=None) -> DeployedActor:
    """A CPU copy of the model's acting network, in eval mode."""
    # deferred: stable_baselines3: seconds to import
    from stable_baselines3.common.preprocessing import is_image_space

    path = acting_path(model)
    space = model.observation_space
    low = high = None
    if path.output != "argmax":
        low, high = np.asarray(model.action_space.low), np.asarray(model.action_space.high)
    image = is_image_space(space) and bool(getattr(model.policy, "normalize_images", True))
    actor = DeployedActor(
        copy.deepcopy(path.features).cpu(),
        copy.deepcopy(path.body).cpu(),
        copy.deepcopy(path.head).cpu(),
        tuple(space.shape),
        path.output,
        low,
        high,
        normalizer_of(vec_normalize),
        image,
    )
    return actor.eval()  # after QAT, features is the InputQuant wrapper: the copy quantizes its input too


def fake_quant_copy(actor: DeployedActor, bits: int, rounding: str, calibration_obs: np.ndarray) -> DeployedActor:
    """n-bit PTQ: weights and activations (input, every activation function's output) with the seed's
    quantizer, activation ranges from ``calibration_obs``; the logits stay float."""
    q = copy.deepcopy(actor)
    q.input_quant = ActivationQuant(bits)
    insert_fake_quant(q.features, bits, rounding)  # type: ignore[arg-type]
    insert_fake_quant(q.body, bits, rounding)  # type: ignore[arg-type]
    q.head = _quant_head(q.head, bits, rounding)
    calibrate_module(q, q, torch.as_tensor(calibration_obs, dtype=torch.float32))
    return q.eval()


def _quant_head(head: nn.Module, bits: int, rounding: str) -> nn.Module:
    holder = nn.Sequential(head)
    insert_fake_quant(holder, bits, rounding)  # type: ignore[arg-type]
    return holder[0]


class InputQuant(nn.Module):
    """The seed's input quantization in front of a live features extractor (QAT)."""

    def __init__(self, quant: ActivationQuant, inner: nn.Module):
        super().__init__()
        self.quant, self.inner = quant, inner
        self.features_dim = getattr(inner, "features_dim", None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(self.quant(x))


def insert_into_model(model, bits: int, rounding: str) -> nn.Module:
    """QAT: quantizers into the live model's acting path (same Parameters, so SB3's optimizers and target
    copies keep working). Returns the module holding every quantizer (the policy), for freezing."""
    path = acting_path(model)
    quant = ActivationQuant(bits)
    owner = path.owner
    wrapped = InputQuant(quant, path.features)
    # SB3 calls <owner>.features_extractor(obs); PPO/A2C without a shared extractor use pi_features_extractor
    for attr in ("features_extractor", "pi_features_extractor"):
        if getattr(owner, attr, None) is path.features:
            setattr(owner, attr, wrapped)
    skip = (path.squash,) if path.squash is not None else ()
    insert_fake_quant(path.features, bits, rounding, skip)  # type: ignore[arg-type]
    if path.head_owner is None:  # DQN, DDPG/TD3: body and head are the live Sequential's members
        live = model.policy.q_net.q_net if hasattr(model.policy, "q_net") else model.policy.actor.mu
        insert_fake_quant(live, bits, rounding, skip)  # type: ignore[arg-type]
    else:
        insert_fake_quant(path.body, bits, rounding, skip)  # type: ignore[arg-type]
        holder, attr = path.head_owner
        setattr(holder, attr, _quant_head(getattr(holder, attr), bits, rounding))
    return model.policy
