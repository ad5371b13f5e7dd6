"""Level configuration: typed dataclasses loaded from TOML files in ``nav_env/levels/``.

The level files are package data (they ship in the wheel); ``AIRQ_CONFIG_DIR=DIR`` reads them from
``DIR/levels/`` instead.

Every key is validated: an unknown section or key, a wrong type, or a non-positive size raises
:class:`ConfigError` with a one-line message naming the offending value.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import tomllib
from dataclasses import dataclass, field
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

from airq_cli import UserError

# Levels ship inside the package (package data); AIRQ_CONFIG_DIR=DIR overrides with DIR/levels/*.toml.
LEVEL_DIR: Traversable = (
    Path(os.environ["AIRQ_CONFIG_DIR"]) / "levels" if os.environ.get("AIRQ_CONFIG_DIR") else files("nav_env") / "levels"
)


class ConfigError(UserError, ValueError):
    """A configuration value is missing, unknown or out of range."""


@dataclass(frozen=True)
class ArenaConfig:
    size_x: float = 30.0  # m
    size_y: float = 30.0  # m
    ceiling: float = 10.0  # m
    altitude: float = 2.0  # m, start altitude (discrete actions hold it)
    spawn_margin: float = 2.0  # m, start and goal keep this far from the walls


@dataclass(frozen=True)
class ObstacleConfig:
    cylinders: tuple[int, int] = (6, 12)  # count range, inclusive
    cylinder_radius: tuple[float, float] = (0.4, 1.2)  # m
    boxes: tuple[int, int] = (4, 7)
    box_side: tuple[float, float] = (1.0, 3.0)  # m, each side drawn independently
    moving: tuple[int, int] = (0, 0)  # moving cylinders
    moving_radius: tuple[float, float] = (0.4, 0.8)
    moving_speed: tuple[float, float] = (0.5, 1.5)  # m/s
    clearance: float = 1.5  # m of free space around start and goal


@dataclass(frozen=True)
class CameraConfig:
    width: int = 32
    height: int = 32
    fov_deg: float = 90.0  # horizontal
    vfov_deg: float = 0.0  # vertical; 0 = square pixels (vertical FOV from fov_deg and the aspect ratio)
    max_range: float = 10.0  # m; depth is normalised by it
    noise_std: float = 0.0  # Gaussian depth noise, as a fraction of max_range
    dropout: float = 0.0  # probability that a pixel reads 0 (no return)


@dataclass(frozen=True)
class VehicleConfig:
    radius: float = 0.3  # m, collision radius
    dt: float = 0.1  # s of simulated time per step
    tau: float = 0.15  # s, first-order velocity response
    max_speed: float = 5.0  # m/s, bound of velocity commands and observations
    max_yaw_rate: float = 2.0  # rad/s


@dataclass(frozen=True)
class TaskConfig:
    goal_zones: tuple[tuple[float, float], ...] = ((8.0, 14.0), (14.0, 20.0), (20.0, 27.0), (27.0, 34.0))
    success_radius: float = 1.5  # m
    max_steps: int = 500
    action_type: str = "discrete"  # or "continuous"


@dataclass(frozen=True)
class RewardConfig:
    success: float = 10.0
    collision: float = -10.0
    step: float = -0.01
    progress: float = 0.5  # per metre of distance gained toward the goal


@dataclass(frozen=True)
class CurriculumConfig:
    enabled: bool = False
    window: int = 200  # episodes of the current zone
    threshold: float = 0.3  # success rate over the window that unlocks the next zone


@dataclass(frozen=True)
class ObservationConfig:
    # the versioned observation: False is depth + the 8 state values; True appends the airframe's attitude and body
    # rates (roll, pitch, p, q, r: N_ATTITUDE_FEATURES values after the 8), for a vehicle that tilts to accelerate
    attitude: bool = False


@dataclass(frozen=True)
class NavConfig:
    level: str = "default"
    arena: ArenaConfig = field(default_factory=ArenaConfig)
    obstacles: ObstacleConfig = field(default_factory=ObstacleConfig)
    camera: CameraConfig = field(default_factory=CameraConfig)
    vehicle: VehicleConfig = field(default_factory=VehicleConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    curriculum: CurriculumConfig = field(default_factory=CurriculumConfig)
    observation: ObservationConfig = field(default_factory=ObservationConfig)

    @property
    def n_state(self) -> int:
        """The state values after the depth image: 8, or 8 + N_ATTITUDE_FEATURES with ``observation.attitude``."""
        return N_STATE_FEATURES + (N_ATTITUDE_FEATURES if self.observation.attitude else 0)

    @property
    def obs_dim(self) -> int:
        return self.camera.width * self.camera.height + self.n_state

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


N_STATE_FEATURES = 8
N_ATTITUDE_FEATURES = 5  # roll, pitch (/ ATTITUDE_SCALE_RAD), body rates p, q, r (/ BODY_RATE_SCALE_RAD_S), in [-1, 1]
ATTITUDE_SCALE_RAD = math.pi / 4  # 45 degrees, beyond the cascade's 35-degree tilt limit (docs/dynamics.md)
BODY_RATE_SCALE_RAD_S = 4.0  # beyond the rate loop's 220 deg/s (3.84 rad/s) roll/pitch limit
DEFAULT_CAMERA = (32, 32)  # (height, width) of every level's camera
AIRLEARNING_CAMERA = (144, 256)  # (height, width): Air Learning's depth image


def parse_camera(spec: str | tuple[int, int] | list[int]) -> tuple[int, int]:
    """``"144x256"`` (height x width), ``"airlearning"``, ``"default"`` or a (height, width) pair ->
    (height, width); ConfigError (one line) otherwise."""
    if isinstance(spec, str):
        named = {"airlearning": AIRLEARNING_CAMERA, "default": DEFAULT_CAMERA}
        if spec.lower() in named:
            return named[spec.lower()]
        h, sep, w = spec.lower().partition("x")
        if not sep or not h.strip().isdigit() or not w.strip().isdigit():
            raise ConfigError(
                f"camera size must be HEIGHTxWIDTH (e.g. 144x256), 'airlearning' or 'default', got {spec!r}"
            )
        spec = (int(h), int(w))
    if len(spec) != 2 or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in spec):
        raise ConfigError(f"camera size must be two positive integers (height, width), got {spec!r}")
    if spec[0] * spec[1] > 4096 * 4096:
        raise ConfigError(f"camera size {spec[0]}x{spec[1]} is too large (at most 4096x4096 pixels)")
    return int(spec[0]), int(spec[1])


def camera_overrides(spec: str | tuple[int, int] | list[int], fov_deg: float = 90.0) -> dict[str, Any]:
    """Level overrides for a camera of another size with the default camera's field of view.

    The default camera is 32 x 32 with a 90 x 90 degree view. Another size keeps that view: a
    non-square image (Air Learning's 144 x 256) gets ``camera.vfov_deg = fov_deg`` (non-square
    pixels), so every pixel of the 32 x 32 image covers the same solid angle as a block of the larger
    one (8 x 4.5 pixels at 144 x 256). A square size keeps square pixels (and the default is untouched).
    """
    h, w = parse_camera(spec)
    overrides: dict[str, Any] = {"camera.height": h, "camera.width": w}
    if h != w:
        overrides["camera.vfov_deg"] = float(fov_deg)
    return overrides


def observation_overrides_from_metadata(metadata: dict[str, str]) -> dict[str, Any]:
    """The keys of a policy's ``airq.env_config`` metadata that shape its observation (camera size, the attitude
    values) as level overrides ({} if absent), so tools that rebuild a policy's env from its level name give it the
    observation it takes."""
    env = _env_config_of(metadata)
    cam = env.get("camera") or {}
    overrides = {f"camera.{k}": cam[k] for k in ("width", "height", "vfov_deg") if k in cam}
    observation = env.get("observation") or {}
    if "attitude" in observation:
        overrides["observation.attitude"] = bool(observation["attitude"])
    return overrides


def with_policy_observation(cfg: NavConfig, metadata: dict[str, str]) -> NavConfig:
    """``cfg`` as a policy with this metadata sees it: the same world, task and vehicle, with the observation the
    policy was trained on (its camera, whether the attitude values follow the state). A policy that records no
    environment (a baseline, a foreign model) gets ``cfg`` as it is. The observation draws no random numbers, so a
    seed gives the same episode whichever observation flies it."""
    overrides = observation_overrides_from_metadata(metadata)
    if not overrides:
        return cfg
    data = cfg.to_dict()
    name = data.pop("level")
    apply_overrides(data, overrides)
    return config_from_dict(data, name=name, source=f"level {name!r} with the policy's observation")


def state_size_of(metadata: dict[str, str]) -> int:
    """How many state values follow the depth image in the observation of a policy with this metadata."""
    attitude = (_env_config_of(metadata).get("observation") or {}).get("attitude")
    return N_STATE_FEATURES + (N_ATTITUDE_FEATURES if attitude else 0)


def _env_config_of(metadata: dict[str, str]) -> dict[str, Any]:
    try:
        env = json.loads(metadata.get("airq.env_config") or "{}")
    except ValueError:
        return {}
    return env if isinstance(env, dict) else {}


SECTIONS = {f.name: f.type for f in dataclasses.fields(NavConfig) if f.name != "level"}
_SECTION_CLASSES = {
    "arena": ArenaConfig,
    "obstacles": ObstacleConfig,
    "camera": CameraConfig,
    "vehicle": VehicleConfig,
    "task": TaskConfig,
    "reward": RewardConfig,
    "curriculum": CurriculumConfig,
    "observation": ObservationConfig,
}


def available_levels() -> list[str]:
    if not LEVEL_DIR.is_dir():
        return []
    return sorted(p.name.removesuffix(".toml") for p in LEVEL_DIR.iterdir() if p.name.endswith(".toml") and p.is_file())


def load_level(level: str | os.PathLike = "default", overrides: dict[str, Any] | None = None) -> NavConfig:
    """Load a level by name (``nav_env/levels/NAME.toml``) or by path, then apply dotted overrides.

    ``overrides`` maps ``"section.key"`` to a value, e.g. ``{"camera.width": 64}``.
    """
    path: Path | Traversable = Path(level)
    if Path(level).suffix != ".toml":
        path = LEVEL_DIR / f"{level}.toml"
        if not path.is_file():
            raise ConfigError(f"unknown level {str(level)!r} (known: {', '.join(available_levels())})")
    elif not path.is_file():
        raise ConfigError(f"level file not found: {path}")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: invalid TOML: {e}") from None
    name = data.pop("level", Path(path.name).stem)
    apply_overrides(data, overrides)
    return config_from_dict(data, name=name, source=str(path))


def apply_overrides(data: dict[str, Any], overrides: dict[str, Any] | None, what: str = "override") -> None:
    """Put dotted ``{"section.key": value}`` overrides into TOML ``data`` (sections of keys)."""
    for dotted, value in (overrides or {}).items():
        section, _, key = dotted.partition(".")
        if not key:
            raise ConfigError(f"{what} {dotted!r} must be 'section.key'")
        data.setdefault(section, {})[key] = value


def config_from_dict(data: dict[str, Any], name: str = "custom", source: str = "config") -> NavConfig:
    sections: dict[str, Any] = {}
    for section, values in data.items():
        if section == "level":
            name = values
            continue
        cls = _SECTION_CLASSES.get(section)
        if cls is None:
            raise ConfigError(f"{source}: unknown config section {section!r} (known: {', '.join(_SECTION_CLASSES)})")
        if not isinstance(values, dict):
            raise ConfigError(f"{source}: [{section}] must be a table")
        sections[section] = build_section(cls, section, values, source)
    cfg = NavConfig(level=name, **sections)
    validate(cfg, source)
    return cfg


def build_section(cls: type, section: str, values: dict[str, Any], source: str) -> Any:
    known = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in values.items():
        f = known.get(key)
        if f is None:
            raise ConfigError(f"{source}: unknown config key '{section}.{key}' (known: {', '.join(known)})")
        kwargs[key] = _coerce(value, getattr(cls(), key), f"{section}.{key}", source)
    return cls(**kwargs)


def _coerce(value: Any, default: Any, where: str, source: str) -> Any:
    """Convert TOML values to the type of the default (lists -> tuples), checking types."""
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ConfigError(f"{source}: {where} must be true or false, got {value!r}")
        return value
    if isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{source}: {where} must be an integer, got {value!r}")
        return value
    if isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{source}: {where} must be a number, got {value!r}")
        return float(value)
    if isinstance(default, str):
        if not isinstance(value, str):
            raise ConfigError(f"{source}: {where} must be a string, got {value!r}")
        return value
    if isinstance(default, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{source}: {where} must be a list, got {value!r}")
        if default and isinstance(default[0], tuple):
            return tuple(_coerce(v, default[0], where, source) for v in value)
        if len(value) != len(default):
            raise ConfigError(f"{source}: {where} must have {len(default)} values, got {value!r}")
        return tuple(_coerce(v, d, where, source) for v, d in zip(value, default))
    raise ConfigError(f"{source}: {where}: unsupported value {value!r}")


def validate(cfg: NavConfig, source: str = "config") -> None:
    def positive(where: str, v: float) -> None:
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
            raise ConfigError(f"{source}: {where} must be positive, got {v!r}")

    def nonneg(where: str, v: float) -> None:
        if not (math.isfinite(v) and v >= 0):
            raise ConfigError(f"{source}: {where} must be >= 0, got {v!r}")

    def ordered(where: str, r: tuple, minimum_positive: bool) -> None:
        lo, hi = r
        (positive if minimum_positive else nonneg)(where, lo)
        if hi < lo:
            raise ConfigError(f"{source}: {where} range is reversed: {r!r}")

    a, o, c, v, t, cu = cfg.arena, cfg.obstacles, cfg.camera, cfg.vehicle, cfg.task, cfg.curriculum
    for k in ("size_x", "size_y", "ceiling", "altitude"):
        positive(f"arena.{k}", getattr(a, k))
    nonneg("arena.spawn_margin", a.spawn_margin)
    if a.altitude >= a.ceiling:
        raise ConfigError(f"{source}: arena.altitude {a.altitude} must be below arena.ceiling {a.ceiling}")
    if 2 * a.spawn_margin >= min(a.size_x, a.size_y):
        raise ConfigError(f"{source}: arena.spawn_margin {a.spawn_margin} leaves no room to spawn")
    for k in ("cylinders", "boxes", "moving"):
        ordered(f"obstacles.{k}", getattr(o, k), minimum_positive=False)
    for k in ("cylinder_radius", "box_side", "moving_radius"):
        ordered(f"obstacles.{k}", getattr(o, k), minimum_positive=True)
    ordered("obstacles.moving_speed", o.moving_speed, minimum_positive=False)
    nonneg("obstacles.clearance", o.clearance)
    positive("camera.width", c.width)
    positive("camera.height", c.height)
    positive("camera.max_range", c.max_range)
    if not 0 < c.fov_deg < 180:
        raise ConfigError(f"{source}: camera.fov_deg must be in (0, 180), got {c.fov_deg!r}")
    if not (c.vfov_deg == 0 or 0 < c.vfov_deg < 180):
        raise ConfigError(f"{source}: camera.vfov_deg must be 0 (square pixels) or in (0, 180), got {c.vfov_deg!r}")
    nonneg("camera.noise_std", c.noise_std)
    if not 0 <= c.dropout < 1:
        raise ConfigError(f"{source}: camera.dropout must be in [0, 1), got {c.dropout!r}")
    for k in ("radius", "dt", "tau", "max_speed", "max_yaw_rate"):
        positive(f"vehicle.{k}", getattr(v, k))
    if not t.goal_zones:
        raise ConfigError(f"{source}: task.goal_zones must not be empty")
    for i, z in enumerate(t.goal_zones):
        if len(z) != 2:
            raise ConfigError(f"{source}: task.goal_zones[{i}] must be [min, max], got {z!r}")
        ordered(f"task.goal_zones[{i}]", z, minimum_positive=True)
        diag = math.hypot(a.size_x - 2 * a.spawn_margin, a.size_y - 2 * a.spawn_margin)
        if z[0] >= diag:
            raise ConfigError(f"{source}: task.goal_zones[{i}] starts at {z[0]} m, beyond the arena's {diag:.1f} m")
    positive("task.success_radius", t.success_radius)
    positive("task.max_steps", t.max_steps)
    if t.action_type not in ("discrete", "continuous"):
        raise ConfigError(f"{source}: task.action_type must be 'discrete' or 'continuous', got {t.action_type!r}")
    positive("curriculum.window", cu.window)
    if not 0 < cu.threshold <= 1:
        raise ConfigError(f"{source}: curriculum.threshold must be in (0, 1], got {cu.threshold!r}")
