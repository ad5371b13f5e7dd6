"""quarl.zoo: every cell's RL Zoo entry parses as rl_zoo3 2.9.2 reads it and builds a real SB3 model on its env."""

from __future__ import annotations

import importlib.util
import json
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from stable_baselines3.common.atari_wrappers import AtariWrapper
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.noise import NormalActionNoise, OrnsteinUhlenbeckActionNoise
from stable_baselines3.common.sb2_compat.rmsprop_tf_like import RMSpropTFLike
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv, VecFrameStack, VecNormalize
from torch import nn

from quarl import zoo
from quarl.errors import QuarlError
from quarl.nets import MinAtarCNN

# The package each env needs beyond gymnasium's classic control, and the spaces its observations and actions have,
# for the cells this machine cannot make the env of: their models are built on a stand-in with those spaces.
ATARI_SPACES = (spaces.Box(0, 255, (84, 84, 1), np.uint8), spaces.Discrete(4))  # after AtariWrapper (Breakout)
ENV_PACKAGES: dict[str, tuple[str, tuple[spaces.Space, spaces.Space]]] = {
    "HalfCheetahBulletEnv-v0": ("pybullet", (spaces.Box(-np.inf, np.inf, (26,)), spaces.Box(-1, 1, (6,)))),
    "BipedalWalker-v3": ("Box2D", (spaces.Box(-np.inf, np.inf, (24,)), spaces.Box(-1, 1, (4,)))),
    zoo.ATARI_EXAMPLE: ("ale_py", ATARI_SPACES),
    **{
        env_id: ("minatar", (spaces.Box(0, 1, (10, 10, 4), np.float32), spaces.Discrete(3)))
        for env_id in zoo.MINATAR_ENV_IDS
    },
}


def has_package(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


if has_package("ale_py"):
    import ale_py

    gym.register_envs(ale_py)
if has_package("minatar") and "MinAtar/Breakout-v1" not in gym.registry:
    import minatar.gym

    minatar.gym.register_envs()


def cell_id(cell: tuple[str, str]) -> str:
    return f"{cell[1]}-{cell[0]}"


BUILDABLE = [c for c in zoo.known_cells() if c[0] not in ENV_PACKAGES or has_package(ENV_PACKAGES[c[0]][0])]
WITHOUT_PACKAGE = [c for c in zoo.known_cells() if c not in BUILDABLE]


def make_venv(entry: zoo.ZooEntry, stand_in_spaces: tuple[spaces.Space, spaces.Space] | None = None) -> VecEnv:
    """The env the entry trains on, wrapped as rl_zoo3's create_envs does (env wrapper, VecNormalize, VecFrameStack).

    With stand_in_spaces, stand-ins with those spaces instead. Atari: one real env and stand-ins with its spaces for
    the others, since an ALE env takes about 0.5 s to make and the zoo's A2C wants 16.
    """
    wrapper = None
    if entry.env_id.startswith("MinAtar/"):
        wrapper = lambda env: gym.wrappers.DtypeObservation(env, np.float32)  # noqa: E731
    elif entry.raw.get("env_wrapper"):
        assert entry.raw["env_wrapper"] == ["stable_baselines3.common.atari_wrappers.AtariWrapper"]
        wrapper = AtariWrapper
    if stand_in_spaces is not None:
        venv: VecEnv = DummyVecEnv([lambda: StandIn(*stand_in_spaces)] * entry.n_envs)
    elif wrapper is AtariWrapper:
        real = AtariWrapper(gym.make(entry.env_id))
        spaces_of_real = (real.observation_space, real.action_space)
        venv = DummyVecEnv([lambda: real] + [lambda: StandIn(*spaces_of_real)] * (entry.n_envs - 1))
    else:
        venv = make_vec_env(entry.env_id, n_envs=entry.n_envs, seed=0, wrapper_class=wrapper)
    if entry.normalize is not None:
        venv = VecNormalize(venv, **entry.normalize)
    if entry.frame_stack is not None:
        venv = VecFrameStack(venv, entry.frame_stack)
    return venv


class StandIn(gym.Env):
    """An env with the real one's spaces and nothing else, for a model to be built on."""

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space) -> None:
        self.observation_space, self.action_space = observation_space, action_space

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        return self.observation_space.sample(), 0.0, False, False, {}


def test_the_cells_of_the_brief_are_known():
    cells = set(zoo.known_cells())
    wanted = {("CartPole-v1", a) for a in ("a2c", "dqn", "ppo")} | {
        ("MountainCar-v0", a) for a in ("a2c", "dqn", "ppo")
    }
    wanted |= {(env, a) for env in ("MountainCarContinuous-v0", "HalfCheetahBulletEnv-v0") for a in zoo.ALGO_CLASSES}
    wanted -= {("MountainCarContinuous-v0", "dqn"), ("HalfCheetahBulletEnv-v0", "dqn")}
    wanted |= {(env, a) for env in ("Pendulum-v1", "BipedalWalker-v3") for a in ("ddpg", "td3")}
    wanted |= {(env, a) for env in (zoo.ATARI_EXAMPLE, *zoo.MINATAR_ENV_IDS) for a in ("a2c", "dqn", "ppo")}
    assert cells == wanted


@pytest.mark.parametrize("cell", BUILDABLE, ids=cell_id)
def test_every_cell_parses_and_builds_on_its_env(cell):
    entry = zoo.zoo_entry(*cell)
    assert not {"n_timesteps", "policy", "n_envs", "normalize", "frame_stack", "env_wrapper"} & set(entry.algo_kwargs)
    assert not any(key.startswith("noise") or key == "callback" for key in entry.algo_kwargs)
    json.dumps(entry.raw), json.dumps(zoo.describe(entry))  # both go into trial.json
    venv = make_venv(entry)
    try:
        model = zoo.make_model(entry, venv, seed=0)
        assert type(model) is zoo.ALGO_CLASSES[entry.algo]
        assert model.n_envs == entry.n_envs
    finally:
        venv.close()


@pytest.mark.parametrize("cell", WITHOUT_PACKAGE, ids=cell_id)
def test_a_cell_whose_env_package_is_absent_builds_on_a_stand_in(cell):
    env_id, _ = cell
    package, (observation_space, action_space) = ENV_PACKAGES[env_id]
    # not built on its env only because the package is really not installed: installing it moves the cell to the test above
    assert not has_package(package)
    with pytest.raises(gym.error.Error):
        gym.make(env_id)
    entry = zoo.zoo_entry(*cell)
    venv = make_venv(entry, (observation_space, action_space))
    assert type(zoo.make_model(entry, venv, seed=0)) is zoo.ALGO_CLASSES[entry.algo]


# PPO and A2C take gradient steps within 200 steps; TD3's entry learns from step 10000, so it collects with its noise
@pytest.mark.parametrize(
    "cell", [("CartPole-v1", "ppo"), ("Pendulum-v1", "td3"), ("MinAtar/Breakout-v1", "a2c")], ids=cell_id
)
def test_cheap_cells_learn_200_steps(cell):
    entry = zoo.zoo_entry(*cell)
    venv = make_venv(entry)
    try:
        model = zoo.make_model(entry, venv, seed=0).learn(200)
    finally:
        venv.close()
    assert model.num_timesteps >= 200


def test_lin_schedules_run_from_their_start_to_0_and_numbers_stay_constant():
    kwargs = zoo.zoo_entry("CartPole-v1", "ppo").algo_kwargs  # learning_rate: lin_0.001, clip_range: lin_0.2
    assert (kwargs["learning_rate"](1.0), kwargs["learning_rate"](0.5), kwargs["learning_rate"](0.0)) == (
        0.001,
        0.0005,
        0,
    )
    assert (kwargs["clip_range"](1.0), kwargs["clip_range"](0.0)) == (0.2, 0)
    assert zoo.describe(zoo.zoo_entry("CartPole-v1", "ppo"))["learning_rate"] == "linear 0.001 -> 0"
    constant = zoo.zoo_entry("CartPole-v1", "dqn").algo_kwargs["learning_rate"]  # !!float 2.3e-3
    assert constant(1.0) == constant(0.0) == 2.3e-3


def test_policy_kwargs_strings_become_objects():
    kwargs = zoo.zoo_entry("HalfCheetahBulletEnv-v0", "ppo").algo_kwargs["policy_kwargs"]
    assert kwargs == {
        "log_std_init": -2,
        "ortho_init": False,
        "activation_fn": nn.ReLU,
        "net_arch": {"pi": [256, 256], "vf": [256, 256]},
    }
    atari = zoo.zoo_entry("PongNoFrameskip-v4", "a2c").algo_kwargs["policy_kwargs"]
    assert atari == {"optimizer_class": RMSpropTFLike, "optimizer_kwargs": {"eps": 1e-5}}
    minatar = zoo.zoo_entry("MinAtar/Seaquest-v1", "dqn").algo_kwargs["policy_kwargs"]
    assert minatar == {"features_extractor_class": MinAtarCNN, "net_arch": []}


def test_the_other_keys_are_read_as_rl_zoo3_reads_them():
    assert zoo.zoo_entry("MountainCarContinuous-v0", "ppo").n_timesteps == 20000  # !!float 20000
    ddpg = zoo.zoo_entry("MountainCarContinuous-v0", "ddpg")
    assert ddpg.noise == ("ornstein-uhlenbeck", 0.5)
    assert isinstance(zoo.action_noise(ddpg, 1), OrnsteinUhlenbeckActionNoise)
    assert isinstance(zoo.action_noise(zoo.zoo_entry("Pendulum-v1", "td3"), 1), NormalActionNoise)
    assert zoo.action_noise(zoo.zoo_entry("CartPole-v1", "dqn"), 1) is None
    # normalize: true -> {}, plus the entry's gamma, which rl_zoo3 gives VecNormalize too
    assert zoo.zoo_entry("MountainCar-v0", "a2c").normalize == {}
    assert zoo.zoo_entry("MountainCar-v0", "ppo").normalize == {"gamma": 0.99}
    atari = zoo.zoo_entry(zoo.ATARI_EXAMPLE, "dqn")
    assert (atari.frame_stack, atari.policy, atari.n_envs, atari.normalize) == (4, "CnnPolicy", 1, None)
    assert atari.source == "rl_zoo3 2.9.2 hyperparams/dqn.yml: atari"
    assert zoo.zoo_entry("MinAtar/Breakout-v1", "dqn").source.startswith("quarl (MinAtar, ours)")
    parsed = zoo.parse_entry(
        "X-v0",
        "sac",
        {
            "n_timesteps": 1e5,
            "policy": "MlpPolicy",
            "train_freq": [1, "episode"],
            "normalize": "{'norm_obs': True, 'norm_reward': False}",
        },
        "test",
    )
    assert parsed.algo_kwargs["train_freq"] == (1, "episode")
    assert parsed.normalize == {"norm_obs": True, "norm_reward": False}
    assert parsed.n_timesteps == 100_000


@pytest.mark.parametrize(
    "policy_kwargs",
    [
        "__import__('os').system('touch {marker}')",
        "dict(activation_fn=__import__('os').system('touch {marker}'))",
        "dict(net_arch=[64, 64], activation_fn=nn.Module.__subclasses__)",
        "dict(f=(lambda: open('{marker}', 'w'))())",
        "[x for x in ().__class__.__bases__]",
    ],
)
def test_a_hostile_policy_kwargs_string_is_refused_unrun(policy_kwargs, tmp_path):
    marker = tmp_path / "ran"
    raw = {"n_timesteps": 1000, "policy": "MlpPolicy", "policy_kwargs": policy_kwargs.format(marker=marker)}
    with pytest.raises(QuarlError, match="not allowed"):
        zoo.parse_entry("CartPole-v1", "ppo", raw, "test")
    assert not marker.exists()


def test_what_needs_more_than_sb3_core_is_refused_by_name():
    with pytest.raises(QuarlError, match="sb3_contrib"):
        zoo.zoo_entry("CartPole-v1", "qrdqn")
    raw = {
        "n_timesteps": 1000,
        "policy": "MlpPolicy",
        "env_wrapper": ["sb3_contrib.common.wrappers.TimeFeatureWrapper"],
    }
    with pytest.raises(QuarlError, match="sb3_contrib"):
        zoo.parse_entry("HalfCheetahBulletEnv-v0", "sac", raw, "test")
    with pytest.raises(QuarlError, match="rl_zoo3"):
        zoo.parse_entry("Pendulum-v1", "sac", {"n_timesteps": 1000, "policy": "MlpPolicy", "callback": ["x"]}, "test")
    with pytest.raises(QuarlError, match="not arguments of SB3's PPO"):
        zoo.parse_entry("CartPole-v1", "ppo", {"n_timesteps": 1000, "policy": "MlpPolicy", "buffer_size": 10}, "test")


@pytest.mark.parametrize("cell", [("Pong-v9", "ppo"), ("CartPole-v1", "sac"), ("CartPole-v1", "ppo2")])
def test_an_unknown_cell_is_one_line_naming_the_known_ones(cell):
    with pytest.raises(QuarlError) as error:
        zoo.zoo_entry(*cell)
    message = str(error.value)
    assert "\n" not in message and cell[1] in message
    if cell[1] != "ppo2":
        assert "CartPole-v1 (a2c, dqn, ppo)" in message and "MinAtar/" in message and "NoFrameskip-v4" in message
    else:
        assert "a2c, dqn, ppo, ddpg, td3, sac" in message


def test_a_venv_unlike_the_entry_is_refused():
    entry = zoo.zoo_entry("MountainCar-v0", "ppo")  # 16 envs, normalized
    venv = make_vec_env("MountainCar-v0", n_envs=2, seed=0)
    with pytest.raises(QuarlError, match="does not match"):
        zoo.make_model(entry, venv, seed=0)
