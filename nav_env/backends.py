"""The backends: where a policy flies. One registry of :class:`Backend` descriptors, each saying what its world can
do; every decision that depends on the backend asks its descriptor here instead of comparing names.

=============  ===========================================================  ===========  ==============
name           world                                                        in-process   bridge first
=============  ===========================================================  ===========  ==============
``embedded``   nav_env's kinematic vehicle, numpy (the default)             yes          no
``mujoco``     a rigid-body quadrotor under a PX4-style cascade (MuJoCo)    yes          no
``airsim``     an AirSim / Cosys-AirSim server                              no           no
``autopilot``  a real ArduPilot / PX4 vehicle flown by the bridge (MAVLink)  no           yes
=============  ===========================================================  ===========  ==============

An in-process backend runs its batch simulator here (:func:`simulator`), so it has the vector env, latency timing,
training, evaluation and calibration; the others talk to a world outside this process one step at a time. A new
backend is one module (its env, and its simulator if it runs in-process) and one entry in ``_REGISTRY``, with its
options dataclass; docs/architecture.md says how.

Entry points are ``"module:attribute"`` strings imported on first use (Gymnasium's registry does the same): the
backends' own dependencies (MuJoCo, the AirSim client, pymavlink) are optional, and nav_env's envs import this
module.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from nav_env.config import ConfigError, NavConfig
from nav_env.dynamics.config import load_dynamics

if TYPE_CHECKING:
    import gymnasium as gym

    from nav_env.dynamics.config import DynamicsConfig
    from nav_env.sim import BatchSim

DEFAULT_BACKEND = "embedded"


@dataclass(frozen=True)
class EmbeddedOptions:
    """The embedded simulator takes no options: its vehicle is the level's (``[vehicle]`` in the level TOML)."""


@dataclass(frozen=True)
class MujocoOptions:
    """``dynamics``: a :class:`nav_env.dynamics.config.DynamicsConfig`, a dynamics TOML path, or None for the
    shipped Iris (docs/dynamics.md)."""

    dynamics: DynamicsConfig | str | Path | None = field(default=None, metadata={"arg": "dynamics"})


@dataclass(frozen=True)
class AirSimOptions:
    """Where the AirSim server is and how to drive it (docs/airsim.md); ``arg`` names hil.run's argument."""

    host: str = field(default="127.0.0.1", metadata={"arg": "airsim_host"})
    port: int = field(default=41451, metadata={"arg": "airsim_port"})
    scene: str | None = field(default=None, metadata={"arg": "airsim_scene"})
    lockstep: bool = field(default=False, metadata={"arg": "airsim_lockstep"})
    client: str = "auto"  # auto, airsim or cosysairsim: which client library (nav_env.airsim.client)


@dataclass(frozen=True)
class AutopilotOptions:
    """``telemetry``: this host's MAVLink endpoint to the autopilot (docs/autopilot.md); ``arg`` names hil.run's
    argument."""

    telemetry: str | None = field(default=None, metadata={"arg": "telemetry"})


class SimulatorFactory(Protocol):
    def __call__(self, cfg: NavConfig, n: int, dynamics: Any, single: bool) -> BatchSim: ...


@dataclass(frozen=True)
class Backend:
    """One backend: its name, what it can do, its options and how to make its env (and its simulator)."""

    name: str
    help: str  # one line, for --help and the docs
    world: str  # how a report names where the run flew
    options: type  # its options dataclass; make_env takes an instance
    env: str  # entry point of its single env, called with (config=, render_mode=, **env_kwargs(options))
    simulator: str | None = None  # entry point of its batch simulator (a SimulatorFactory); None: not in-process
    dynamics_config: bool = False  # a vehicle dynamics TOML configures it (docs/dynamics.md)
    bridge_first: bool = False  # its env reaches the vehicle through the bridge: start the bridge before the env
    flies_real_vehicle: bool = False  # the bridge flies a real autopilot (--fc) that the env reads (--telemetry)
    own_clock: bool = False  # flies in the vehicle's own clock: nothing here paces it (no --rate-hz)

    @property
    def in_process(self) -> bool:
        """Runs here, batched: the vector env, latency timing, training, evaluation and calibration need it."""
        return self.simulator is not None

    @property
    def is_default(self) -> bool:
        return self.name == DEFAULT_BACKEND

    def options_from(self, values: Mapping[str, Any]) -> Any:
        """Its options from a command line's values: each option field that names an ``arg`` in its metadata
        takes that value when it is given (not None)."""
        given = {
            f.name: values[f.metadata["arg"]]
            for f in fields(self.options)
            if "arg" in f.metadata and values.get(f.metadata["arg"]) is not None
        }
        return self.options(**given)

    def make_env(self, cfg: NavConfig, render_mode: str | None = None, options: Any = None) -> gym.Env:
        """A single env for ``cfg`` in this backend."""
        options = self._check_options(options)
        try:
            env_class = _load(self.env)
        except ImportError as e:
            raise RuntimeError(f"the {self.name} backend is not available: {e}") from None
        kwargs = {f.name: getattr(options, f.name) for f in fields(options)}
        if self.in_process:
            kwargs["backend"] = self.name
        return env_class(config=cfg, render_mode=render_mode, **kwargs)

    def make_simulator(self, cfg: NavConfig, n: int, dynamics: Any = None, single: bool = False) -> BatchSim:
        """Its batch simulator of ``n`` envs (``single``: a one-env fast path where it has one)."""
        if self.simulator is None:
            raise ConfigError(
                f"the {self.name} backend does not run in this process (in-process backends: "
                f"{', '.join(backend_names(in_process=True))})"
            )
        if dynamics is not None and not self.dynamics_config:
            raise ConfigError(
                f"the {self.name} simulator has no vehicle dynamics to configure (dynamics= is for "
                f"{' or '.join(repr(n) for n in backend_names(dynamics_config=True))})"
            )
        try:
            factory: SimulatorFactory = _load(self.simulator)
        except ImportError as e:
            raise ConfigError(str(e)) from None
        return factory(cfg, n, dynamics, single)

    def _check_options(self, options: Any) -> Any:
        if options is None:
            try:
                return self.options()
            except TypeError as e:
                raise ValueError(f"the {self.name} backend needs options: {e}") from None
        if not isinstance(options, self.options):
            raise ValueError(f"the {self.name} backend takes {self.options.__name__}, got {type(options).__name__}")
        return options


def _load(entry_point: str) -> Any:
    module, _, attribute = entry_point.partition(":")
    return getattr(importlib.import_module(module), attribute)


_REGISTRY: dict[str, Backend] = {
    b.name: b
    for b in (
        Backend(
            name="embedded",
            help="nav_env's kinematic vehicle (the default)",
            world="embedded simulator",
            options=EmbeddedOptions,
            env="nav_env.env:NavEnv",
            simulator="nav_env.sim:embedded_simulator",
        ),
        Backend(
            name="mujoco",
            help="a rigid-body quadrotor under a PX4-style cascade, docs/dynamics.md",
            world="mujoco simulator",
            options=MujocoOptions,
            env="nav_env.env:NavEnv",
            simulator="nav_env.dynamics.world:mujoco_simulator",
            dynamics_config=True,
        ),
        Backend(
            name="airsim",
            help="an AirSim / Cosys-AirSim server, docs/airsim.md",
            world="airsim simulator",
            options=AirSimOptions,
            env="nav_env.airsim:AirSimNavEnv",
        ),
        Backend(
            name="autopilot",
            help="a real ArduPilot/PX4 vehicle flown by the bridge over MAVLink in a virtual world, docs/autopilot.md",
            world="an autopilot's vehicle in a virtual arena",
            options=AutopilotOptions,
            env="nav_env.autopilot:AutopilotNavEnv",
            bridge_first=True,
            flies_real_vehicle=True,
            own_clock=True,
        ),
    )
}


def get_backend(name: str) -> Backend:
    """The backend called ``name``; a one-line error naming the known ones otherwise."""
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown backend {name!r} (known: {', '.join(_REGISTRY)})") from None


def dynamics_for(backend: str, path: str | Path | None) -> DynamicsConfig | None:
    """The vehicle dynamics file ``path`` (docs/dynamics.md) loaded for the in-process ``backend``: None without one;
    ConfigError with one line for a backend that has no vehicle dynamics or a bad file."""
    if not path:
        return None
    if not get_backend(backend).dynamics_config:
        raise ConfigError(
            f"--dynamics applies to --backend {' or '.join(backend_names(dynamics_config=True))}, not {backend}"
        )
    return load_dynamics(path)


def backend_named(name: str | None) -> Backend:
    """The backend a model's metadata, a model card or a report names; none named is the default (files written
    before there was a choice name none)."""
    return get_backend(name or DEFAULT_BACKEND)


def backend_names(**capabilities: bool) -> tuple[str, ...]:
    """The backends' names, those with every given capability only: ``backend_names(in_process=True)``."""
    return tuple(b.name for b in _REGISTRY.values() if all(getattr(b, k) == v for k, v in capabilities.items()))


def make_env(
    cfg: NavConfig, backend: str = DEFAULT_BACKEND, render_mode: str | None = None, options: Any = None
) -> gym.Env:
    """A single env for ``cfg`` on ``backend`` with its ``options`` (an instance of its options dataclass; None:
    the defaults). Every backend gives the same observation, actions and episode logic."""
    return get_backend(backend).make_env(cfg, render_mode, options)


def simulator(
    cfg: NavConfig, n: int, backend: str = DEFAULT_BACKEND, dynamics: Any = None, single: bool = False
) -> BatchSim:
    """The batch simulator of ``n`` envs on an in-process ``backend`` (``dynamics``: its vehicle dynamics, where it
    has any; ``single``: the one-env fast path where it has one)."""
    try:
        found = get_backend(backend)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return found.make_simulator(cfg, n, dynamics, single)


__all__ = [
    "DEFAULT_BACKEND",
    "AirSimOptions",
    "AutopilotOptions",
    "Backend",
    "EmbeddedOptions",
    "MujocoOptions",
    "backend_names",
    "get_backend",
    "make_env",
    "simulator",
]
