"""The study's environments: what the agent trains on and the single env every policy is evaluated on.

Families (``task_family``):

* ``classic``: Gymnasium classic control (CartPole-v1, MountainCar-v0, MountainCarContinuous-v0, Pendulum-v1).
* ``minatar``: MinAtar (Young & Tian 2019), 10x10 Atari-like games, the CPU stand-in for Atari; observations
  are bool planes, given to the networks as float32 in [0, 1]; MinAtar has no time limit of its own, so the
  study caps episodes at ``MINATAR_MAX_STEPS``.
* ``atari``: ALE games (ale-py), with SB3's AtariWrapper and a 4-frame stack as the RL Zoo trains them;
  evaluation plays full games (no end of episode on a life lost, raw rewards, not clipped).
* ``locomotion``: PyBullet (pybullet-envs-gymnasium) or MuJoCo tasks, when installed.

The observation a deployed policy receives is the flat float32 vector of the (wrapped, channel-first for
images) observation: ``policy_observation``. VecNormalize's observation statistics, when the zoo uses them,
are folded into the exported network (quarl.export), so evaluation feeds raw observations.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from quarl.errors import QuarlError

if TYPE_CHECKING:
    from stable_baselines3.common.vec_env import VecEnv

    from quarl.zoo import ZooEntry

MINATAR_MAX_STEPS = 10_000  # an episode cap for evaluation and training (MinAtar games can last forever)
CLASSIC = ("CartPole-v1", "MountainCar-v0", "MountainCarContinuous-v0", "Pendulum-v1", "Acrobot-v1")


def task_family(env_id: str) -> str:
    if env_id.startswith("MinAtar/"):
        return "minatar"
    if env_id.startswith("ALE/") or env_id.endswith("NoFrameskip-v4"):
        return "atari"
    if env_id in CLASSIC:
        return "classic"
    if "Bullet" in env_id or env_id.split("-")[0] in ("HalfCheetah", "Walker2d", "Hopper", "Ant", "BipedalWalker"):
        return "locomotion"
    raise QuarlError(
        f"unknown task {env_id!r}: classic control ({', '.join(CLASSIC)}), MinAtar/<Game>-v1, ALE/<Game>-v5, "
        "<Game>NoFrameskip-v4 or a PyBullet/MuJoCo locomotion task"
    )


def register_families(env_id: str) -> None:
    """Gymnasium >= 1.0 needs the ALE and MinAtar envs registered in every process that makes them."""
    family = task_family(env_id)
    try:
        if family == "minatar":
            # deferred: minatar: an optional extra (the study's)
            import minatar.gym

            if env_id not in gym.registry:
                minatar.gym.register_envs()
        elif family == "atari":
            # deferred: ale_py: an optional extra (the study's)
            import ale_py

            gym.register_envs(ale_py)
        elif family == "locomotion" and "Bullet" in env_id:
            # deferred: pybullet_envs_gymnasium: the locomotion extra
            import pybullet_envs_gymnasium  # noqa: F401 - registers the Bullet envs
    except ImportError as e:
        raise QuarlError(f"{env_id}: its package is not installed ({e.name}); see docs/quarl.md, 'Tasks'") from None
    if env_id not in gym.registry:
        raise QuarlError(f"{env_id}: not a registered Gymnasium env")


class FloatObservation(gym.ObservationWrapper):
    """MinAtar's bool planes as float32 in [0, 1] (what the networks and onnxruntime take)."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        space = env.observation_space
        assert isinstance(space, gym.spaces.Box)
        self.observation_space = gym.spaces.Box(0.0, 1.0, space.shape, np.float32)

    def observation(self, observation: Any) -> np.ndarray:
        return np.asarray(observation, dtype=np.float32)


def make_env(env_id: str, evaluation: bool = False) -> gym.Env:
    """One env as the agent sees it, before vectorization (Atari: SB3's AtariWrapper; evaluation plays full,
    unclipped games)."""
    register_families(env_id)
    family = task_family(env_id)
    if family == "minatar":
        return FloatObservation(gym.make(env_id, max_episode_steps=MINATAR_MAX_STEPS))
    if family == "atari":
        # deferred: stable_baselines3: seconds to import
        from stable_baselines3.common.atari_wrappers import AtariWrapper

        env = gym.make(env_id, full_action_space=False) if env_id.startswith("ALE/") else gym.make(env_id)
        if evaluation:
            return AtariWrapper(env, terminal_on_life_loss=False, clip_reward=False)
        return AtariWrapper(env)
    return gym.make(env_id)


def make_train_env(entry: ZooEntry, seed: int) -> VecEnv:
    """The zoo's training VecEnv: n_envs copies, frame stack and VecNormalize as its entry says."""
    # deferred: stable_baselines3: seconds to import
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecFrameStack, VecNormalize, VecTransposeImage

    venv: VecEnv = make_vec_env(lambda: make_env(entry.env_id), n_envs=entry.n_envs, seed=seed)
    if entry.frame_stack:
        venv = VecFrameStack(venv, entry.frame_stack)
    if task_family(entry.env_id) == "atari":
        venv = VecTransposeImage(venv)
    if entry.normalize is not None:
        venv = VecNormalize(venv, **entry.normalize)  # the zoo's normalize kwargs (with the entry's gamma)
    return venv


class EpisodeEnv:
    """The evaluation env of a trial: one env with the training wrappers that shape observations (frame stack,
    channel-first images), without the ones that shape training (reward clipping, life loss, VecNormalize).
    ``reset(seed)`` and ``step(action)`` give the flat float32 observation a deployed policy receives."""

    def __init__(self, env_id: str, frame_stack: int | None):
        self.env_id = env_id
        self.env = make_env(env_id, evaluation=True)
        self.frame_stack = frame_stack or 1
        self.image = task_family(env_id) == "atari"
        self._frames: list[np.ndarray] = []
        space = self.env.observation_space
        assert space.shape is not None
        self.obs_dim = int(np.prod(space.shape)) * self.frame_stack
        self.action_space = self.env.action_space

    def _flat(self, obs: np.ndarray) -> np.ndarray:
        if self.frame_stack == 1 and not self.image:
            return np.asarray(obs, dtype=np.float32).reshape(-1)
        self._frames = (self._frames + [np.asarray(obs)])[-self.frame_stack :]
        stacked = np.concatenate(self._frames, axis=-1)  # VecFrameStack stacks on the last (channel) axis
        if self.image:
            stacked = np.transpose(stacked, (2, 0, 1))  # VecTransposeImage: HWC -> CHW
        return np.asarray(stacked, dtype=np.float32).reshape(-1)

    def reset(self, seed: int) -> np.ndarray:
        obs, _ = self.env.reset(seed=seed)
        self.action_space.seed(seed)
        if self.frame_stack > 1:
            zero = np.zeros_like(np.asarray(obs))
            self._frames = [zero] * (self.frame_stack - 1)  # VecFrameStack starts from zeros
        return self._flat(obs)

    def step(self, action: Any) -> tuple[np.ndarray, float, bool]:
        obs, reward, terminated, truncated, _ = self.env.step(action)
        return self._flat(obs), float(reward), bool(terminated or truncated)

    def close(self) -> None:
        self.env.close()


PolicyFn = Callable[[np.ndarray], np.ndarray]  # a batch of flat observations -> a batch of actions
