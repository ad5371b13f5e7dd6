"""Network presets from the QuaRL paper's Air Learning case study, and the supported algorithms.

All hidden layers use ReLU: it quantizes to int8 well (no saturating non-linearity whose range must
be captured) and is what the device runtime executes cheapest. The deployed network is the actor
(PPO/A2C) or the Q-network (DQN); the critic is training-only, so Policy III gets a smaller critic
(256, 256) to keep its PPO update affordable on 2 CPU cores.
"""

from __future__ import annotations

from dataclasses import dataclass

from policies.errors import UserError

ALGORITHMS = ("ppo", "a2c", "dqn")


@dataclass(frozen=True)
class Preset:
    name: str
    actor: tuple[int, ...]  # hidden sizes of the deployed network
    critic: tuple[int, ...]  # hidden sizes of the value network (PPO/A2C only)
    activation: str = "relu"
    description: str = ""


PRESETS: dict[str, Preset] = {
    "policy1": Preset("policy1", (64, 64, 64), (64, 64, 64), description="Policy I: 3 x 64"),
    "policy2": Preset("policy2", (256, 256, 256), (256, 256, 256), description="Policy II: 3 x 256"),
    "policy3": Preset(
        "policy3",
        (4096, 512, 1024),
        (256, 256),
        description="Policy III: 4096-512-1024 actor, smaller 256-256 critic (training only)",
    ),
}


def get_preset(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        raise UserError(f"unknown policy preset {name!r} (known: {', '.join(PRESETS)})") from None


def check_algorithm(name: str) -> str:
    if name not in ALGORITHMS:
        raise UserError(f"unknown algorithm {name!r} (known: {', '.join(ALGORITHMS)})")
    return name
