"""The published numbers the study is compared with, copied here with their sources (nothing is read from
outside the project at run time), and the fp32 baseline gate built from them.

* ``SEED_TABLE2``, ``SEED_MEAN_ERRORS``: the seed's post-training quantization results, Table 2 of
  Krishnan et al., "QuaRL: Quantized Reinforcement Learning" (SysML 2020; TMLR 2022). The seed evaluated
  the RL Baselines Zoo's pretrained agents (Atari NoFrameskip-v4 games, CartPole, the PyBullet
  locomotion tasks, BipedalWalker-v2, MountainCarContinuous-v0).
* ``ZOO_SCORES``: rl-baselines3-zoo's ``benchmark.md`` (single runs; Atari v4 NoFrameskip at 10M steps,
  the other budgets as listed).
* ``GYM_REWARD_THRESHOLDS``: ``gymnasium.spec(env_id).reward_threshold`` in gymnasium 1.4.0 (a test
  checks these against the installed gymnasium).

The gate (:func:`baseline_gate`) decides whether a trial's fp32 policy is good enough for its
quantization numbers to count (``quarl.results.Baseline``):

1. gymnasium's ``reward_threshold`` where the env has one and the zoo's own published agent for this
   algorithm reaches it (CartPole-v1 475, MountainCar-v0 -110 for DQN, MountainCarContinuous-v0 90 for
   A2C/DDPG/TD3/SAC, BipedalWalker-v3 300 for TD3);
2. otherwise ``GATE_FRACTION`` of the zoo's score: ``published - (1 - GATE_FRACTION) * |published|``
   (80% of a positive score; a negative score made 20% worse), also where gymnasium's threshold is above
   what the zoo's agent reached (MountainCar-v0 A2C -111.3 and PPO -110.4 < -110; BipedalWalker-v3 A2C,
   PPO, DDPG < 300): a threshold the reference agent itself misses would fail every faithful baseline;
3. MinAtar: there is no zoo score, and the MinAtar paper (Young & Tian 2019, arXiv:1903.03176) and its
   repository give DQN / actor-critic results as learning curves only, no numbers to copy. The gate is
   "clearly better than a uniform random policy", measured at run time: the random policy plays the
   same kind of seeded episodes (``episodes`` of them from ``seed``, the same ``max_steps`` cap) and the
   threshold is its mean return + max(3 x its per-episode standard deviation, 1). MinAtar rewards come
   in units of 1, so the policy must average at least one more reward per episode than chance, and more
   than nearly every single random episode. ``published`` is NaN there.

Unknown env or algorithm (no published score to gate on): a one-line QuarlError.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import gymnasium as gym
import numpy as np

from quarl.config import EVAL_SEED
from quarl.errors import QuarlError
from quarl.results import error_percent
from quarl.tasks import register_families

SEED_SOURCE = "QuaRL (Krishnan et al., SysML 2020 / TMLR 2022), Table 2"

# The seed's Table 2: reward fp32 / fp16 / int8 per environment and algorithm (post-training quantization).
SEED_TABLE2: dict[tuple[str, str], tuple[float, float, float]] = {
    ("Breakout", "a2c"): (379, 371, 350),
    ("Breakout", "dqn"): (214, 217, 78),
    ("Breakout", "ppo"): (400, 400, 368),
    ("SpaceInvaders", "a2c"): (717, 667, 634),
    ("SpaceInvaders", "dqn"): (586, 625, 509),
    ("SpaceInvaders", "ppo"): (698, 662, 684),
    ("BeamRider", "a2c"): (3087, 3060, 2793),
    ("BeamRider", "dqn"): (925, 823, 721),
    ("BeamRider", "ppo"): (1655, 1820, 1697),
    ("MsPacman", "a2c"): (1915, 1915, 2045),
    ("MsPacman", "dqn"): (1433, 1429, 2024),
    ("MsPacman", "ppo"): (1735, 1735, 1845),
    ("Qbert", "a2c"): (5002, 5002, 5611),
    ("Qbert", "dqn"): (641, 641, 616),
    ("Qbert", "ppo"): (15010, 15010, 14425),
    ("Seaquest", "a2c"): (782, 756, 753),
    ("Seaquest", "dqn"): (1709, 1885, 1582),
    ("Seaquest", "ppo"): (1782, 1784, 1795),
    ("CartPole", "a2c"): (500, 500, 500),
    ("CartPole", "dqn"): (500, 500, 500),
    ("CartPole", "ppo"): (500, 500, 500),
    ("Pong", "a2c"): (20, 20, 19),
    ("Pong", "dqn"): (21, 21, 21),
    ("Pong", "ppo"): (20, 20, 20),
    # DDPG, same table
    ("Walker2D", "ddpg"): (1890, 1929, 1866),
    ("HalfCheetah", "ddpg"): (2553, 2551, 2473),
    ("BipedalWalker", "ddpg"): (98, 90, 83),
    ("MountainCarContinuous", "ddpg"): (92, 92, 92),
}

# The seed's mean error % (fp16, int8) per algorithm over its Table 2 environments (same paper).
SEED_MEAN_ERRORS: dict[str, tuple[float, float]] = {
    "a2c": (1.66, 2.31),
    "dqn": (-0.88, 8.60),
    "ppo": (-0.62, 0.54),
    "ddpg": (1.54, 4.93),
}

# Our env ids -> the seed's Table 2 environment, with a note where the version differs from the seed's.
ATARI_GAMES = ("Breakout", "SpaceInvaders", "BeamRider", "MsPacman", "Qbert", "Seaquest", "Pong")
SEED_ENVS: dict[str, tuple[str, str]] = {
    **{f"{g}NoFrameskip-v4": (g, "") for g in ATARI_GAMES},
    **{f"ALE/{g}-v5": (g, "seed: NoFrameskip-v4; v5 has sticky actions") for g in ATARI_GAMES},
    "CartPole-v1": ("CartPole", ""),
    "MountainCarContinuous-v0": ("MountainCarContinuous", ""),
    "Walker2DBulletEnv-v0": ("Walker2D", ""),
    "HalfCheetahBulletEnv-v0": ("HalfCheetah", ""),
    "BipedalWalker-v3": ("BipedalWalker", "seed: BipedalWalker-v2"),
}

ZOO_SOURCE = "rl-baselines3-zoo benchmark.md"
# rl-baselines3-zoo benchmark.md: score and training steps per env and algorithm (single runs).
ZOO_SCORES: dict[str, dict[str, tuple[float, int]]] = {
    "PongNoFrameskip-v4": {"a2c": (17.3, 10_000_000), "dqn": (20.6, 10_000_000), "ppo": (20.99, 10_000_000)},
    "BreakoutNoFrameskip-v4": {"a2c": (279.8, 10_000_000), "dqn": (358.3, 10_000_000), "ppo": (398.0, 10_000_000)},
    "BeamRiderNoFrameskip-v4": {"a2c": (2890, 10_000_000), "dqn": (4296, 10_000_000), "ppo": (3397, 10_000_000)},
    "QbertNoFrameskip-v4": {"a2c": (3882, 10_000_000), "dqn": (9497, 10_000_000), "ppo": (15627, 10_000_000)},
    "SeaquestNoFrameskip-v4": {"a2c": (1721, 10_000_000), "dqn": (2000, 10_000_000), "ppo": (1784, 10_000_000)},
    "SpaceInvadersNoFrameskip-v4": {"a2c": (627, 10_000_000), "dqn": (623, 10_000_000), "ppo": (960, 10_000_000)},
    "CartPole-v1": {"a2c": (500, 500_000), "dqn": (500, 50_000), "ppo": (500, 100_000)},
    "MountainCar-v0": {"a2c": (-111.3, 1_000_000), "dqn": (-100.8, 120_000), "ppo": (-110.4, 1_000_000)},
    "MountainCarContinuous-v0": {
        "a2c": (91.2, 100_000),
        "ppo": (88.3, 20_000),
        "ddpg": (93.5, 300_000),
        "td3": (93.5, 300_000),
        "sac": (94.7, 50_000),
    },
    "Pendulum-v1": {"ddpg": (-152.1, 20_000), "td3": (-151.9, 20_000)},
    "HalfCheetahBulletEnv-v0": {
        "a2c": (2107, 2_000_000),
        "ppo": (2925, 2_000_000),
        "ddpg": (2078, 1_000_000),
        "td3": (2822, 1_000_000),
        "sac": (2792, 1_000_000),
    },
    "Walker2DBulletEnv-v0": {
        "a2c": (858, 2_000_000),
        "ppo": (2110, 2_000_000),
        "ddpg": (1388, 1_000_000),
        "td3": (2214, 1_000_000),
    },
    "BipedalWalker-v3": {
        "a2c": (299.8, 5_000_000),
        "ppo": (213.3, 5_000_000),
        "ddpg": (197.5, 1_000_000),
        "td3": (306.0, 1_000_000),
    },
}
# ALE v5 ids take the NoFrameskip-v4 score (the zoo benchmarks v4 only), said in the source string.
ZOO_ALIASES = {f"ALE/{g}-v5": f"{g}NoFrameskip-v4" for g in ATARI_GAMES if f"{g}NoFrameskip-v4" in ZOO_SCORES}

# gymnasium 1.4.0: gym.spec(env_id).reward_threshold (None for the Atari games and MinAtar).
GYM_REWARD_THRESHOLDS: dict[str, float] = {
    "CartPole-v1": 475.0,
    "MountainCar-v0": -110.0,
    "MountainCarContinuous-v0": 90.0,
    "BipedalWalker-v3": 300.0,
}

GATE_FRACTION = 0.8  # a cell without an attainable gymnasium threshold must reach 80% of the zoo's score

MINATAR_GAMES = ("Asterix", "Breakout", "Freeway", "Seaquest", "SpaceInvaders")
MINATAR_ALGOS = ("a2c", "dqn", "ppo")  # discrete actions
MINATAR_RANDOM_SDS = 3.0  # threshold = random mean + max(3 sd, 1 reward)
MINATAR_MIN_MARGIN = 1.0


@dataclass(frozen=True)
class SeedRow:
    """The seed's Table 2 numbers for one of our cells."""

    env: str  # the seed's name for it, e.g. "Breakout"
    fp32: float
    fp16: float
    int8: float
    note: str  # where our env's version differs from the seed's

    @property
    def error_fp16(self) -> float:
        return error_percent(self.fp32, self.fp16)

    @property
    def error_int8(self) -> float:
        return error_percent(self.fp32, self.int8)


def is_minatar(env_id: str) -> bool:
    return env_id.startswith("MinAtar/")


def seed_row(env_id: str, algo: str) -> SeedRow | None:
    """The seed's Table 2 row for this env and algorithm, or None when the seed has none (MinAtar is not
    one of the seed's environments: its games are analogues of Atari games, not the same tasks)."""
    env, note = SEED_ENVS.get(env_id, ("", ""))
    row = SEED_TABLE2.get((env, algo.lower()))
    if row is None:
        return None
    fp32, fp16, int8 = map(float, row)
    return SeedRow(env, fp32, fp16, int8, note)


def zoo_score(env_id: str, algo: str) -> tuple[float, str] | None:
    """(score, source text) from the zoo's benchmark, or None."""
    key = ZOO_ALIASES.get(env_id, env_id)
    entry = ZOO_SCORES.get(key, {}).get(algo.lower())
    if entry is None:
        return None
    score, steps = entry
    alias = f"; {key}'s score (the zoo benchmarks v4, v5 adds sticky actions)" if key != env_id else ""
    return float(score), f"{ZOO_SOURCE}: {algo.upper()} {key} {score:g} ({steps:,} steps){alias}"


def fraction_threshold(published: float) -> float:
    return published - (1.0 - GATE_FRACTION) * abs(published)


def baseline_gate(
    env_id: str, algo: str, *, episodes: int = 100, seed: int = EVAL_SEED, max_steps: int | None = None
) -> tuple[float, str, float]:
    """(published score, its source and the rule used, threshold the fp32 mean return must reach).

    ``episodes``, ``seed`` and ``max_steps`` matter only for MinAtar, where the threshold is measured by
    playing a uniform random policy (see the module's docstring); elsewhere the gate is a table lookup.
    """
    algo = algo.lower()
    if is_minatar(env_id):
        game = env_id.removeprefix("MinAtar/").rsplit("-v", 1)[0]
        if game not in MINATAR_GAMES:
            raise QuarlError(f"unknown MinAtar game {env_id!r} (known: {', '.join(MINATAR_GAMES)})")
        if algo not in MINATAR_ALGOS:
            raise QuarlError(f"{env_id}: no baseline for {algo!r} (MinAtar has discrete actions: a2c, dqn, ppo)")
        mean, sd = random_policy_returns(env_id, episodes, seed, max_steps)
        threshold = mean + max(MINATAR_RANDOM_SDS * sd, MINATAR_MIN_MARGIN)
        source = (
            "no published score (MinAtar, Young & Tian 2019, reports learning curves only); gate: uniform random "
            f"policy over {episodes} seeded episodes {mean:.3g} (sd {sd:.3g}) + max(3 sd, 1)"
        )
        return math.nan, source, threshold
    zoo = zoo_score(env_id, algo)
    if zoo is None:
        known = sorted(set(ZOO_SCORES) | set(ZOO_ALIASES))
        if env_id in ZOO_SCORES or env_id in ZOO_ALIASES:
            algos = sorted(ZOO_SCORES[ZOO_ALIASES.get(env_id, env_id)])
            raise QuarlError(f"{env_id}: no published zoo score for {algo!r} (has: {', '.join(algos)})")
        raise QuarlError(
            f"unknown env {env_id!r}: no published score to gate its baseline on (known: {', '.join(known)}, MinAtar/*)"
        )
    published, source = zoo
    gym_threshold = GYM_REWARD_THRESHOLDS.get(env_id)
    if gym_threshold is not None and published >= gym_threshold:
        return published, f"{source}; gate: gymnasium reward_threshold {gym_threshold:g}", gym_threshold
    why = (
        f"gymnasium's reward_threshold {gym_threshold:g} is above the zoo's score"
        if gym_threshold is not None
        else "gymnasium has no reward_threshold"
    )
    threshold = fraction_threshold(published)
    return published, f"{source}; gate: {GATE_FRACTION:g} x zoo score = {threshold:.4g} ({why})", threshold


@lru_cache(maxsize=32)
def random_policy_returns(env_id: str, episodes: int, seed: int, max_steps: int | None) -> tuple[float, float]:
    """Mean and standard deviation of a uniform random policy's return over seeded episodes (episode i:
    reset and action sampling seeded with seed + i), MinAtar registered first."""
    if episodes < 1:
        raise QuarlError(f"{env_id}: the random-policy gate needs episodes >= 1, got {episodes}")

    register_families(env_id)
    try:
        env = gym.make(env_id, max_episode_steps=max_steps) if max_steps else gym.make(env_id)
    except gym.error.Error as e:
        raise QuarlError(f"{env_id}: cannot make the env for the random-policy gate: {e}") from None
    returns = []
    try:
        for i in range(episodes):
            env.reset(seed=seed + i)
            env.action_space.seed(seed + i)
            total, done = 0.0, False
            while not done:
                _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
                total += float(reward)
                done = terminated or truncated
            returns.append(total)
    finally:
        env.close()
    return float(np.mean(returns)), float(np.std(returns))
