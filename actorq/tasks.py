"""The tasks ActorQ trains: what env the actors step, what SB3 algorithm the learner owns, how actions come
out of the network the actors run, and how a policy is judged.

* ``nav``: airq's navigation env (``nav_env``, level ``default`` unless told), 25 discrete actions, an SB3
  DQN whose Q-network is a policies preset (Policy III, 4096-512-1024, by default: the size where int8 pays).
  Actors act epsilon-greedily on the Q-values; success rate is the score.
* ``pendulum``: Gymnasium's ``Pendulum-v1``, one continuous torque, an SB3 TD3 (the RL Zoo's settings:
  400-300 networks, Gaussian action noise 0.1), as ActorQ used a deterministic-policy-gradient learner
  (D4PG) for continuous control. Actors run the actor network ``mu`` without its final ``tanh`` (the graph
  every template builds ends in a Linear layer), apply ``tanh`` and the noise themselves. Return is the score.

The network an actor runs is exported through ``actorq.nets``: its ``logits`` output is the Q-values (nav) or
the pre-``tanh`` action (pendulum); the ``action`` output (argmax) is used by nav only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from actorq.errors import ActorQError
from nav_env.baselines import HeuristicPolicy
from nav_env.config import load_level
from nav_env.env import NavEnv
from nav_env.rollout import run_episodes, summarize
from policies.config import EVAL_SEED_BASE  # held-out evaluation episodes 1M + j, as policies evaluates

TASKS = ("nav", "pendulum")


@dataclass(frozen=True)
class TaskSpec:
    name: str
    algorithm: str  # the SB3 off-policy algorithm the learner owns
    discrete: bool
    default_network: str  # an actorq.nets network name, or hidden sizes "400,300"
    reward_threshold: float  # the score a run counts as "reached" (nav: success rate; pendulum: mean return)
    score_name: str
    split_input: bool  # the int8 recipe splits the first layer at the depth/state boundary (nav only)


SPECS: dict[str, TaskSpec] = {
    "nav": TaskSpec("nav", "dqn", True, "policy3", 0.95, "success rate", True),
    # the RL Zoo's TD3 Pendulum-v1 reaches about -150 (its benchmark.md); -200 is "swings up and holds"
    "pendulum": TaskSpec("pendulum", "td3", False, "400,300", -200.0, "mean return", False),
}


def spec(name: str) -> TaskSpec:
    try:
        return SPECS[name]
    except KeyError:
        raise ActorQError(f"unknown task {name!r} (known: {', '.join(TASKS)})") from None


def make_env(task: str, level: str = "default") -> gym.Env:
    """One env of the task (actors step one env each, as ActorQ's actors do)."""
    if spec(task).name == "nav":
        return NavEnv(level)
    return gym.make("Pendulum-v1")


def io_sizes(env: gym.Env) -> tuple[int, int]:
    """(observation floats, network outputs: discrete actions or continuous action dimensions)."""
    obs_space, act_space = env.observation_space, env.action_space
    if not isinstance(obs_space, gym.spaces.Box):
        raise ActorQError(f"observations must be a Box, got {obs_space}")
    if isinstance(act_space, gym.spaces.Discrete):
        return int(np.prod(obs_space.shape)), int(act_space.n)
    if isinstance(act_space, gym.spaces.Box):
        return int(np.prod(obs_space.shape)), int(np.prod(act_space.shape))
    raise ActorQError(f"actions must be Discrete or Box, got {act_space}")


def hidden_sizes(task: str, network: str) -> tuple[int, ...]:
    """A network name (policy1..3, actorq) or comma-separated hidden sizes."""
    # deferred: torch (via actorq.nets): seconds to import
    from actorq.nets import NETWORKS

    name = network or spec(task).default_network
    if name in NETWORKS:
        return NETWORKS[name]
    try:
        sizes = tuple(int(x) for x in name.split(","))
    except ValueError:
        raise ActorQError(
            f"network {name!r}: neither a known network ({', '.join(NETWORKS)}) nor hidden sizes like 400,300"
        ) from None
    if not sizes or min(sizes) < 1:
        raise ActorQError(f"network {name!r}: hidden sizes must be positive integers")
    return sizes


@dataclass(frozen=True)
class Exploration:
    """How an actor turns the network's outputs into the action it takes and the action the buffer keeps."""

    discrete: bool
    epsilon: float = 0.0  # nav: probability of a uniformly random action
    noise_std: float = 0.0  # pendulum: Gaussian noise on the tanh action in [-1, 1]

    def act(self, action: np.ndarray, logits: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One observation's (argmax action, logits) -> the buffer's action (int, or float in [-1, 1])."""
        if self.discrete:
            if self.epsilon > 0.0 and rng.random() < self.epsilon:
                return np.array(rng.integers(logits.shape[-1]), dtype=np.int64)
            return np.array(action.reshape(-1)[0], dtype=np.int64)
        squashed = np.tanh(logits.reshape(-1).astype(np.float64))
        if self.noise_std > 0.0:
            squashed = squashed + rng.normal(0.0, self.noise_std, size=squashed.shape)
        return np.clip(squashed, -1.0, 1.0).astype(np.float32)


def env_action(env: gym.Env, buffer_action: np.ndarray) -> Any:
    """The action the env takes for a buffer action (SB3 keeps continuous actions scaled to [-1, 1])."""
    space = env.action_space
    if isinstance(space, gym.spaces.Box):
        low, high = space.low, space.high
        return (low + 0.5 * (buffer_action + 1.0) * (high - low)).astype(space.dtype)
    return int(buffer_action)


def heuristic_observations(episodes: int, seed: int, max_samples: int, level: str = "default") -> np.ndarray:
    """What nav_env's scripted heuristic sees flying the level (quantize.calibration's recording and filter)."""
    # deferred: onnxruntime (via quantize.calibration): ~0.2 s to import, paid only where used
    from quantize.calibration import collect_observations

    cfg = load_level(level)
    return collect_observations(HeuristicPolicy(cfg), cfg, episodes, seed, max_samples)


def calibration_observations(task: str, n: int, level: str = "default") -> np.ndarray:
    """Observations the int8 template is calibrated on before the first rollout: nav_env's scripted heuristic
    flying the level (as quantize calibrates), or random actions in Pendulum; seeds from quantize's
    CALIBRATION_SEED."""
    # deferred: onnxruntime (via quantize.calibration): ~0.2 s to import, paid only where used
    from quantize.calibration import CALIBRATION_SEED

    if spec(task).name == "nav":
        return heuristic_observations(max(1, n // 100), CALIBRATION_SEED, n, level)
    env = make_env(task)
    rng = np.random.default_rng(CALIBRATION_SEED)
    rows: list[np.ndarray] = []
    episode = 0
    while len(rows) < n:
        obs, _ = env.reset(seed=CALIBRATION_SEED + episode)
        episode += 1
        done = False
        while not done and len(rows) < n:
            rows.append(np.asarray(obs, dtype=np.float32))
            obs, _, terminated, truncated, _ = env.step(env_action(env, rng.uniform(-1, 1, size=1)))
            done = terminated or truncated
    return np.stack(rows)


@dataclass(frozen=True)
class Score:
    """A policy judged on held-out seeded episodes (the same episodes for every policy)."""

    episodes: int
    score: float  # nav: success rate; pendulum: mean return
    mean_return: float
    success_rate: float | None  # nav only


def evaluate(task: str, policy: Callable[[np.ndarray], np.ndarray], episodes: int, level: str = "default") -> Score:
    """Deterministic actions (argmax, or tanh without noise) from ``policy`` (obs batch -> (action, logits)
    as an actor's session gives them) on episodes seeded EVAL_SEED_BASE + j."""
    if episodes < 1:
        raise ActorQError(f"evaluation needs at least 1 episode, got {episodes}")
    if spec(task).name == "nav":
        results = list(
            run_episodes(lambda obs: policy(obs)[0], load_level(level), episodes, EVAL_SEED_BASE, num_envs=16)
        )
        summary = summarize(results)
        rate = float(summary["success_rate"])
        return Score(episodes, rate, float(summary["mean_return"]), rate)
    env = make_env(task)
    greedy = Exploration(discrete=False)
    rng = np.random.default_rng(0)
    returns = []
    for j in range(episodes):
        obs, _ = env.reset(seed=EVAL_SEED_BASE + j)
        total, done = 0.0, False
        while not done:
            action, logits = policy(np.asarray(obs, dtype=np.float32)[None])
            obs, reward, terminated, truncated, _ = env.step(env_action(env, greedy.act(action, logits, rng)))
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    mean = float(np.mean(returns))
    return Score(episodes, mean, mean, None)
