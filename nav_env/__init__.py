"""nav_env: Air Learning-style point-to-point drone navigation, as Gymnasium environments.

Registered ids: ``AirNav-v0`` (the ``default`` level), ``AirNav-Easy-v0``, ``AirNav-Default-v0``,
``AirNav-Hard-v0``. Each supports ``gymnasium.make`` and
``gymnasium.make_vec(..., vectorization_mode="vector_entry_point")`` (the native batched env).
"""

from gymnasium.envs.registration import register, registry

from nav_env.actions import ACTION_NAMES, DISCRETE_ACTIONS, HOVER_ACTION, N_DISCRETE_ACTIONS
from nav_env.config import ConfigError, NavConfig, available_levels, load_level
from nav_env.env import NavEnv
from nav_env.vector import NavVectorEnv

__all__ = [
    "ACTION_NAMES",
    "DISCRETE_ACTIONS",
    "HOVER_ACTION",
    "N_DISCRETE_ACTIONS",
    "ConfigError",
    "NavConfig",
    "NavEnv",
    "NavVectorEnv",
    "available_levels",
    "load_level",
    "env_id",
]

_IDS = {"AirNav-v0": "default", "AirNav-Easy-v0": "easy", "AirNav-Default-v0": "default", "AirNav-Hard-v0": "hard"}


def env_id(level: str) -> str:
    """The registered id of a named level."""
    return {"default": "AirNav-v0", "easy": "AirNav-Easy-v0", "hard": "AirNav-Hard-v0"}.get(level, f"AirNav-{level}")


for _id, _level in _IDS.items():
    if _id not in registry:
        register(
            id=_id,
            entry_point="nav_env.env:NavEnv",
            vector_entry_point="nav_env.vector:NavVectorEnv",
            kwargs={"level": _level},
        )
