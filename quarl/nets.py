"""Network bodies of quarl's own recipes, where the RL Zoo has none: MinAtar's small CNN.

Young & Tian (2019), "MinAtar: An Atari-Inspired Testbed for Thorough and Reproducible Reinforcement Learning
Experiments" (arXiv:1903.03176); the layer sizes are those of the authors' examples/dqn.py and examples/AC_lambda.py
(github.com/kenjyoung/MinAtar): one 3x3 convolution with 16 filters, stride 1, then 128 dense units.
"""

from __future__ import annotations

import torch
from gymnasium import spaces
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import nn

from quarl.errors import QuarlError


class MinAtarCNN(BaseFeaturesExtractor):
    """MinAtar's network body: conv 3x3 x 16 (stride 1) -> ReLU -> dense 128 -> ReLU; SB3 puts its heads on the 128.

    Takes observations as MinAtar's gym envs give them, (10, 10, C) with channels LAST, 0/1 values (bool or float32).
    The layout is fixed rather than guessed from the shape: Seaquest's (10, 10, 10) reads the same either way round.
    ReLU as in the authors' DQN (their online actor-critic uses SiLU/dSiLU; the zoo's recipes use ReLU CNNs).
    """

    def __init__(self, observation_space: spaces.Box, features_dim: int = 128, filters: int = 16) -> None:
        if len(observation_space.shape) != 3:
            raise QuarlError(f"MinAtarCNN needs (height, width, channels) observations, got {observation_space.shape}")
        height, width, channels = observation_space.shape
        super().__init__(observation_space, features_dim)
        # attribute names as SB3's NatureCNN: cnn, then linear
        self.cnn = nn.Sequential(nn.Conv2d(channels, filters, kernel_size=3, stride=1), nn.ReLU(), nn.Flatten())
        self.linear = nn.Sequential(nn.Linear(filters * (height - 2) * (width - 2), features_dim), nn.ReLU())

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        return self.linear(self.cnn(observations.permute(0, 3, 1, 2)))
