"""SB3-ready hyperparameters for the study's cells (env, algorithm), from the RL Baselines3 Zoo, and the model they build.

Where the numbers come from: ``quarl/rl_zoo3_hyperparams.yml``, whose entries are copied verbatim from the rl_zoo3
2.9.2 wheel's ``rl_zoo3/hyperparams/<algo>.yml`` (the RL Baselines3 Zoo, Raffin et al., MIT licence): the zoo's tuned
entries for the classic-control and Bullet cells, its generic ``atari`` entry for any Atari ``<Game>NoFrameskip-v4``,
and a ``minatar`` section of ours (the zoo has none), derived from that Atari entry with every change said in the file.

An entry is read the way rl_zoo3 2.9.2 reads it (``exp_manager.py``: ``_preprocess_hyperparams`` and the
``_preprocess_schedules``, ``_preprocess_normalization``, ``_preprocess_action_noise`` it calls):

* learning_rate, clip_range, clip_range_vf: ``lin_<x>`` is linear from x (start) to 0 (end), a number is constant
  (a negative one is left as it is, as the zoo does);
* policy_kwargs, replay_buffer_kwargs and a string ``normalize`` are Python expressions, which the zoo runs through
  ``eval``; here ``ast`` reads them, allowing literals, ``dict(...)`` and the classes in ``ALLOWED_NAMES`` only;
* train_freq lists become tuples, n_timesteps floats (``1e5``) ints;
* ``normalize: true`` means ``VecNormalize()``, a dict (or its string) ``VecNormalize(**dict)``; the entry's gamma,
  if it has one, is added (rl_zoo3 discounts the normalized returns with the algorithm's gamma);
* noise_type and noise_std make an action noise per env (``action_noise``);
* n_timesteps, policy, n_envs, normalize, frame_stack and the noise are ``ZooEntry`` fields, never constructor
  arguments; env_wrapper stays in ``raw`` for whoever builds the env (AtariWrapper, SB3's own, for Atari).

The zoo's ``default`` entries are not used: a cell without an entry is an error. So is anything that needs more than
SB3 core (sb3_contrib's algorithms and wrappers, rl_zoo3's own wrappers and callbacks).

    entry = zoo_entry("CartPole-v1", "ppo")
    model = make_model(entry, venv, seed=0)  # venv: entry.n_envs envs, VecNormalize / VecFrameStack as the entry says
"""

from __future__ import annotations

import ast
import copy
import functools
import inspect
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np
import torch
import yaml
from stable_baselines3 import A2C, DDPG, DQN, PPO, SAC, TD3
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.noise import ActionNoise, NormalActionNoise, OrnsteinUhlenbeckActionNoise
from stable_baselines3.common.sb2_compat.rmsprop_tf_like import RMSpropTFLike
from stable_baselines3.common.utils import ConstantSchedule, LinearSchedule
from stable_baselines3.common.vec_env import VecEnv, VecFrameStack, VecNormalize, is_vecenv_wrapped
from torch import nn

from quarl.errors import QuarlError
from quarl.nets import MinAtarCNN

ZOO = "rl_zoo3 2.9.2"
HYPERPARAMS_FILE = "rl_zoo3_hyperparams.yml"  # package data next to this module
ALGO_CLASSES: dict[str, type[BaseAlgorithm]] = {
    "a2c": A2C,
    "dqn": DQN,
    "ppo": PPO,
    "ddpg": DDPG,
    "td3": TD3,
    "sac": SAC,
}
# rl_zoo3's other algorithms (utils.ALGOS) are sb3_contrib's
SB3_CONTRIB_ALGOS = ("ars", "crossq", "qrdqn", "tqc", "trpo", "ppo_lstm")
ATARI_ENV_ID = re.compile(r"[A-Za-z]+NoFrameskip-v4")  # the ids of the zoo's Atari benchmark
ATARI_EXAMPLE = "BreakoutNoFrameskip-v4"  # stands for all of them in known_cells()
MINATAR_GAMES = ("Asterix", "Breakout", "Freeway", "Seaquest", "SpaceInvaders")
MINATAR_ENV_IDS = tuple(f"MinAtar/{game}-v1" for game in MINATAR_GAMES)

# The names an entry's expression strings may use. rl_zoo3 evaluates them with `nn` and RMSpropTFLike imported
# (exp_manager.py); MinAtarCNN is ours.
ALLOWED_NAMES: dict[str, type] = {
    "nn.ReLU": nn.ReLU,
    "nn.Tanh": nn.Tanh,
    "nn.ELU": nn.ELU,
    "nn.LeakyReLU": nn.LeakyReLU,
    "nn.GELU": nn.GELU,
    "nn.SiLU": nn.SiLU,
    "RMSpropTFLike": RMSpropTFLike,
    "MinAtarCNN": MinAtarCNN,
}
ENV_WRAPPERS = ("stable_baselines3.common.atari_wrappers.AtariWrapper",)  # the SB3-core ones the zoo's entries use
SCHEDULE_KEYS = ("learning_rate", "clip_range", "clip_range_vf")
EXPRESSION_KEYS = ("policy_kwargs", "replay_buffer_kwargs")
# zoo keys that set up rl_zoo3's own machinery around the model; none of our entries has one
UNSUPPORTED_KEYS = ("callback", "vec_env_wrapper", "env_kwargs", "monitor_kwargs", "replay_buffer_class")


@dataclass(frozen=True)
class ZooEntry:
    """One cell's hyperparameters, parsed: ``algo_kwargs`` go straight to the SB3 constructor."""

    env_id: str
    algo: str
    n_timesteps: int
    n_envs: int
    policy: str  # "MlpPolicy" / "CnnPolicy"
    normalize: dict[str, Any] | None  # VecNormalize kwargs; None: no VecNormalize
    frame_stack: int | None  # VecFrameStack's n_stack; None: no stacking
    algo_kwargs: dict[str, Any]  # schedules as callables, policy_kwargs as objects, train_freq tuples...
    noise: tuple[str, float] | None  # (noise_type, noise_std), made per env by action_noise()
    source: str  # e.g. "rl_zoo3 2.9.2 hyperparams/ppo.yml: CartPole-v1"
    raw: dict[str, Any]  # the yml entry as read (JSON-serialisable), for the trial record


def zoo_entry(env_id: str, algo: str) -> ZooEntry:
    """The cell's hyperparameters; a QuarlError naming the known cells if there are none."""
    _algo_class(algo)
    table = _table()
    if env_id in table.get(algo, {}) and env_id != "atari":
        raw, source = table[algo][env_id], f"{ZOO} hyperparams/{algo}.yml: {env_id}"
    elif ATARI_ENV_ID.fullmatch(env_id) and "atari" in table.get(algo, {}):
        raw, source = table[algo]["atari"], f"{ZOO} hyperparams/{algo}.yml: atari"
    elif env_id in MINATAR_ENV_IDS and algo in table["minatar"]:
        raw = table["minatar"][algo]
        source = (
            f"quarl (MinAtar, ours): {ZOO} hyperparams/{algo}.yml: atari, adapted ({HYPERPARAMS_FILE}: minatar.{algo})"
        )
    else:
        raise QuarlError(f"no hyperparameters for {env_id} with {algo}; known: {_known_text()}")
    return parse_entry(env_id, algo, copy.deepcopy(raw), source)


def known_cells() -> list[tuple[str, str]]:
    """Every (env_id, algo) zoo_entry knows; Atari appears as BreakoutNoFrameskip-v4 (any <Game>NoFrameskip-v4 works)."""
    table = _table()
    cells = [(env_id, algo) for algo in ALGO_CLASSES for env_id in table.get(algo, {}) if env_id != "atari"]
    cells += [(ATARI_EXAMPLE, algo) for algo in ALGO_CLASSES if "atari" in table.get(algo, {})]
    cells += [(env_id, algo) for algo in ALGO_CLASSES if algo in table["minatar"] for env_id in MINATAR_ENV_IDS]
    return sorted(cells)


def parse_entry(env_id: str, algo: str, raw: dict[str, Any], source: str) -> ZooEntry:
    """A zoo-format entry (as in the yml) read as rl_zoo3 2.9.2 reads it; ``source`` prefixes every error."""
    algo_class = _algo_class(algo)
    kwargs = dict(raw)
    unsupported = [key for key in UNSUPPORTED_KEYS if key in kwargs]
    if unsupported:
        raise QuarlError(f"{source}: {unsupported} set up rl_zoo3's own machinery, which quarl does not use")
    if "n_timesteps" not in kwargs or "policy" not in kwargs:
        raise QuarlError(f"{source}: an entry needs n_timesteps and policy")
    n_timesteps = _positive_int(kwargs.pop("n_timesteps"), "n_timesteps", source)
    n_envs = _positive_int(kwargs.pop("n_envs", 1), "n_envs", source)
    policy = kwargs.pop("policy")
    if not isinstance(policy, str) or "." in policy:
        raise QuarlError(f"{source}: policy must be the name of an SB3 policy (e.g. MlpPolicy), got {policy!r}")
    frame_stack = kwargs.pop("frame_stack", None)
    if frame_stack is not None:
        frame_stack = _positive_int(frame_stack, "frame_stack", source)
    _check_env_wrapper(kwargs.pop("env_wrapper", None), source)
    noise = _noise(kwargs.pop("noise_type", None), kwargs.pop("noise_std", None), source)
    normalize = _normalize(kwargs.pop("normalize", False), kwargs.get("gamma"), source)
    for key in SCHEDULE_KEYS:
        if key in kwargs:
            kwargs[key] = _schedule(kwargs[key], f"{source}: {key}")
    if isinstance(kwargs.get("train_freq"), list):
        kwargs["train_freq"] = tuple(kwargs["train_freq"])
    for key in EXPRESSION_KEYS:
        if isinstance(kwargs.get(key), str):
            kwargs[key] = _evaluate(kwargs[key], f"{source}: {key}")
    parameters = inspect.signature(algo_class.__init__).parameters
    unknown = sorted(set(kwargs) - set(parameters))
    if unknown:
        raise QuarlError(f"{source}: {unknown} are not arguments of SB3's {algo_class.__name__}")
    if noise is not None and "action_noise" not in parameters:
        raise QuarlError(f"{source}: noise_type is for DDPG, TD3 and SAC, not {algo_class.__name__}")
    return ZooEntry(env_id, algo, n_timesteps, n_envs, policy, normalize, frame_stack, kwargs, noise, source, raw)


def action_noise(entry: ZooEntry, action_dim: int) -> ActionNoise | None:
    """The entry's exploration noise for an action of this size, as rl_zoo3 builds it; None without noise."""
    if entry.noise is None:
        return None
    noise_type, noise_std = entry.noise
    mean, sigma = np.zeros(action_dim), noise_std * np.ones(action_dim)
    if "normal" in noise_type:  # rl_zoo3 tests "normal" first, by substring
        return NormalActionNoise(mean=mean, sigma=sigma)
    return OrnsteinUhlenbeckActionNoise(mean=mean, sigma=sigma)


def make_model(
    entry: ZooEntry, venv: VecEnv, seed: int, threads: int = 1, tensorboard_log: str | None = None
) -> BaseAlgorithm:
    """The SB3 model of the entry on ``venv``, on the CPU with ``threads`` torch threads.

    ``venv`` must be what the entry trains on: entry.n_envs envs, wrapped in VecNormalize(**entry.normalize) and
    VecFrameStack(entry.frame_stack) when the entry has them (a QuarlError otherwise: the zoo's numbers assume them).
    """
    _check_venv(entry, venv)
    torch.set_num_threads(threads)
    # SB3 writes into policy_kwargs (e.g. use_sde for off-policy algorithms): the entry keeps its own untouched
    kwargs = copy.deepcopy(entry.algo_kwargs)
    if entry.noise is not None:
        shape = venv.action_space.shape
        if shape is None or len(shape) != 1:
            raise QuarlError(f"{entry.source}: action noise needs a flat Box action space, got {venv.action_space}")
        kwargs["action_noise"] = action_noise(entry, shape[0])
    algo_class = ALGO_CLASSES[entry.algo]
    return algo_class(entry.policy, venv, seed=seed, device="cpu", verbose=0, tensorboard_log=tensorboard_log, **kwargs)


def describe(entry: ZooEntry) -> dict[str, Any]:
    """The hyperparameters as given to SB3, JSON-safe (TrainInfo.hyperparams): schedules as "linear 0.001 -> 0"."""
    noise = None if entry.noise is None else f"{entry.noise[0]} std {entry.noise[1]:g}"
    return {
        "policy": entry.policy,
        "n_timesteps": entry.n_timesteps,
        "n_envs": entry.n_envs,
        "normalize": copy.deepcopy(entry.normalize),  # copies: a change to the record must not reach the entry
        "frame_stack": entry.frame_stack,
        "env_wrapper": copy.deepcopy(entry.raw.get("env_wrapper")),
        "action_noise": noise,
        **{key: _as_text(value) for key, value in entry.algo_kwargs.items()},
    }


def _evaluate(text: str, where: str) -> Any:
    """A zoo expression string, e.g. "dict(net_arch=[64, 64], activation_fn=nn.ReLU)", as a value; never eval.

    Allowed: numbers, strings, True/False/None, lists, tuples, {...}, dict(key=...), and the ALLOWED_NAMES.
    """
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        raise QuarlError(f"{where}: not a Python expression: {text!r}") from None
    return _value(tree.body, where)


def _value(node: ast.expr, where: str) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, bool | int | float | str | None):
        return node.value
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub | ast.UAdd)
        and isinstance(node.operand, ast.Constant)
    ):
        number = node.operand.value  # a signed number, e.g. log_std_init=-2
        if isinstance(number, int | float) and not isinstance(number, bool):
            return -number if isinstance(node.op, ast.USub) else number
    if isinstance(node, ast.List):
        return [_value(item, where) for item in node.elts]
    if isinstance(node, ast.Tuple):
        return tuple(_value(item, where) for item in node.elts)
    if isinstance(node, ast.Dict):  # {'norm_obs': False, ...}: string keys only
        keys = [key.value for key in node.keys if isinstance(key, ast.Constant) and isinstance(key.value, str)]
        if len(keys) == len(node.keys):
            return {key: _value(value, where) for key, value in zip(keys, node.values)}
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "dict"
        and not node.args
        and all(keyword.arg is not None for keyword in node.keywords)
    ):
        return {keyword.arg: _value(keyword.value, where) for keyword in node.keywords}
    name = _dotted_name(node)
    if name in ALLOWED_NAMES:
        return ALLOWED_NAMES[name]
    why = "" if name is None else _outside_sb3_core(name)
    if why:
        raise QuarlError(f"{where}: {name} {why}")
    allowed = ", ".join(ALLOWED_NAMES)
    raise QuarlError(f"{where}: {ast.unparse(node)!r} is not allowed (only literals, dict(...) and {allowed})")


def _dotted_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted_name(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


def _outside_sb3_core(name: str) -> str:
    """Why a dotted name from a zoo entry cannot be had here ("" when it is not known to be outside SB3 core)."""
    package = name.split(".")[0]
    if package == "sb3_contrib":
        return "is sb3_contrib's, not SB3 core's (sb3_contrib is not a dependency)"
    if package == "rl_zoo3":
        return "is rl_zoo3's own, not SB3 core's (rl_zoo3 is not a dependency)"
    return ""


def _algo_class(algo: str) -> type[BaseAlgorithm]:
    if algo in SB3_CONTRIB_ALGOS:
        raise QuarlError(f"{algo} is an sb3_contrib algorithm, not SB3 core's; known: {', '.join(ALGO_CLASSES)}")
    if algo not in ALGO_CLASSES:
        raise QuarlError(f"unknown algorithm {algo!r}; known: {', '.join(ALGO_CLASSES)}")
    return ALGO_CLASSES[algo]


@functools.cache
def _table() -> dict[str, dict[str, Any]]:
    """The yml: {algo: {env_id or "atari": entry}} for the zoo's sections, {algo: entry} under "minatar"."""
    text = resources.files("quarl").joinpath(HYPERPARAMS_FILE).read_text()
    table: dict[str, dict[str, Any]] = yaml.safe_load(text)
    return table


def _known_text() -> str:
    table = _table()
    by_env: dict[str, list[str]] = {}
    for algo in ALGO_CLASSES:
        for env_id in table.get(algo, {}):
            if env_id != "atari":
                by_env.setdefault(env_id, []).append(algo)
    atari = [algo for algo in ALGO_CLASSES if "atari" in table.get(algo, {})]
    minatar = [algo for algo in ALGO_CLASSES if algo in table["minatar"]]
    cells = [f"{env_id} ({', '.join(algos)})" for env_id, algos in by_env.items()]
    cells.append(f"Atari <Game>NoFrameskip-v4 ({', '.join(atari)})")
    cells.append(f"MinAtar/{{{','.join(MINATAR_GAMES)}}}-v1 ({', '.join(minatar)})")
    return "; ".join(cells)


def _positive_int(value: Any, key: str, where: str) -> int:
    # the zoo writes budgets as floats (!!float 1e5) and int()s them
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 1 or value != int(value):
        raise QuarlError(f"{where}: {key} must be a positive whole number, got {value!r}")
    return int(value)


def _schedule(value: Any, where: str) -> Any:
    if isinstance(value, str):
        match = re.fullmatch(r"lin_([0-9.]+(?:[eE][+-]?[0-9]+)?)", value)
        if match is None:
            raise QuarlError(
                f"{where}: a schedule string must be lin_<start> (rl_zoo3's linear_schedule), got {value!r}"
            )
        # rl_zoo3's SimpleLinearSchedule: progress_remaining * start, i.e. start at the beginning, 0 at the end
        return LinearSchedule(start=float(match.group(1)), end=0.0, end_fraction=1.0)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise QuarlError(f"{where}: must be a number or lin_<start>, got {value!r}")
    return value if value < 0 else ConstantSchedule(float(value))


def _normalize(value: Any, gamma: Any, where: str) -> dict[str, Any] | None:
    if value is False or value is None:
        return None
    if value is True:
        kwargs: Any = {}
    elif isinstance(value, str):
        kwargs = _evaluate(value, f"{where}: normalize")
    else:
        kwargs = copy.deepcopy(value)
    if not isinstance(kwargs, dict):
        raise QuarlError(f"{where}: normalize must be true, false or VecNormalize's keyword arguments, got {value!r}")
    if gamma is not None:
        kwargs["gamma"] = gamma
    return kwargs


def _noise(noise_type: Any, noise_std: Any, where: str) -> tuple[str, float] | None:
    if noise_type is None:
        if noise_std is not None:
            raise QuarlError(f"{where}: noise_std without noise_type")
        return None
    if not isinstance(noise_type, str) or not ("normal" in noise_type or "ornstein-uhlenbeck" in noise_type):
        raise QuarlError(f"{where}: noise_type must be 'normal' or 'ornstein-uhlenbeck', got {noise_type!r}")
    if isinstance(noise_std, bool) or not isinstance(noise_std, int | float) or noise_std <= 0:
        raise QuarlError(f"{where}: noise_std must be a positive number, got {noise_std!r}")
    return noise_type.strip(), float(noise_std)


def _check_env_wrapper(spec: Any, where: str) -> None:
    # rl_zoo3 takes a name, or a list of names and {name: kwargs} (utils.get_wrapper_class)
    items = [] if spec is None else spec if isinstance(spec, list) else [spec]
    for item in items:
        name = next(iter(item)) if isinstance(item, dict) and len(item) == 1 else item
        if name in ENV_WRAPPERS:
            continue
        why = _outside_sb3_core(name) if isinstance(name, str) else ""
        raise QuarlError(f"{where}: env_wrapper {name!r} {why or 'is not supported'} (supported: {ENV_WRAPPERS})")


def _check_venv(entry: ZooEntry, venv: VecEnv) -> None:
    wanted = f"{entry.n_envs} envs, VecNormalize {entry.normalize is not None}, VecFrameStack {entry.frame_stack}"
    got_stack = is_vecenv_wrapped(venv, VecFrameStack)
    if (
        venv.num_envs != entry.n_envs
        or is_vecenv_wrapped(venv, VecNormalize) != (entry.normalize is not None)
        or got_stack != (entry.frame_stack is not None)
    ):
        got = f"{venv.num_envs} envs, VecNormalize {is_vecenv_wrapped(venv, VecNormalize)}, VecFrameStack {got_stack}"
        raise QuarlError(f"{entry.source}: the VecEnv does not match the entry: wanted {wanted}; got {got}")


def _as_text(value: Any) -> Any:
    """A constructor argument as JSON-safe text or data."""
    if isinstance(value, LinearSchedule):
        return f"linear {value.start:g} -> {value.end:g}"
    if isinstance(value, ConstantSchedule):
        return value.val
    if isinstance(value, type):
        names = [name for name, known in ALLOWED_NAMES.items() if known is value]
        return names[0] if names else f"{value.__module__}.{value.__qualname__}"
    if isinstance(value, dict):
        return {str(key): _as_text(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_as_text(item) for item in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return repr(value)
