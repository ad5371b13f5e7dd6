"""The quadrotor and flight-controller configuration of the ``mujoco`` backend (``nav_env/dynamics/iris.toml``).

Every key of the TOML file is a field below; an unknown key, a wrong type or a value out of range raises
:class:`nav_env.config.ConfigError` with a one-line message. ``load_dynamics(path, overrides)`` reads a file
(default: the shipped Iris) and applies dotted overrides such as ``{"wind.gust_std": 1.0}``.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field, fields
from importlib.resources import files
from pathlib import Path
from typing import Any

from nav_env.config import ConfigError, apply_overrides, build_section

DEFAULT_FILE = files("nav_env.dynamics") / "iris.toml"


@dataclass(frozen=True)
class AirframeConfig:
    mass: float = 1.545  # kg
    inertia: tuple[float, float, float] = (0.029125, 0.029125, 0.055225)  # kg m^2 about body x, y, z
    rotor_x: tuple[float, float, float, float] = (0.13, -0.13, 0.13, -0.13)  # m, forward
    rotor_y: tuple[float, float, float, float] = (-0.22, 0.20, 0.22, -0.20)  # m, left
    rotor_spin: tuple[int, int, int, int] = (1, 1, -1, -1)  # +1 counter-clockwise seen from above


@dataclass(frozen=True)
class MotorConfig:
    motor_constant: float = 5.84e-06  # N / (rad/s)^2
    moment_constant: float = 0.06  # m: yaw moment per newton of thrust
    max_rotor_speed: float = 1100.0  # rad/s
    time_constant_up: float = 0.0125  # s
    time_constant_down: float = 0.025  # s
    rotor_drag: float = 0.000175  # N s / m per rad/s of rotor speed

    @property
    def max_thrust(self) -> float:
        """N per rotor."""
        return self.motor_constant * self.max_rotor_speed**2


@dataclass(frozen=True)
class VelocityLoopConfig:
    p_xy: float = 3.0
    i_xy: float = 1.0
    p_z: float = 4.0
    i_z: float = 2.0
    p_z_position: float = 1.0
    integral_limit: float = 2.0
    max_tilt_deg: float = 35.0
    max_accel_up: float = 5.0
    max_accel_down: float = 5.0


@dataclass(frozen=True)
class AttitudeLoopConfig:
    p_roll_pitch: float = 6.5
    p_yaw: float = 2.8
    max_rate_roll_pitch_deg: float = 220.0
    max_rate_yaw_deg: float = 200.0


@dataclass(frozen=True)
class RateLoopConfig:
    p_roll_pitch: float = 25.0
    i_roll_pitch: float = 10.0
    p_yaw: float = 10.0
    i_yaw: float = 2.0
    integral_limit: float = 5.0


@dataclass(frozen=True)
class PhysicsConfig:
    step: float = 0.004  # s


@dataclass(frozen=True)
class CameraMountConfig:
    mount: str = "body"  # or "gimbal"
    pitch_deg: float = 0.0


@dataclass(frozen=True)
class WindConfig:
    speed: tuple[float, float] = (0.0, 0.0)  # m/s, range of the steady wind
    gust_std: float = 0.0  # m/s
    gust_time_constant: float = 2.0  # s


@dataclass(frozen=True)
class RandomizationConfig:
    """Ranges ``[low, high]`` drawn uniformly per episode from the episode's seed (:mod:`nav_env.dynamics.randomize`);
    a range of one value (``[1, 1]`` for a scale, ``[0, 0]`` for an addition) leaves that parameter nominal."""

    mass_scale: tuple[float, float] = (1.0, 1.0)  # the airframe's mass; the controller keeps the nominal one
    inertia_scale: tuple[float, float] = (1.0, 1.0)  # all three axes; the controller keeps the nominal ones
    motor_constant_scale: tuple[float, float] = (1.0, 1.0)  # thrust per (rad/s)^2 (so also the maximum thrust)
    motor_time_constant_scale: tuple[float, float] = (1.0, 1.0)  # both the up and the down time constant
    rotor_drag_scale: tuple[float, float] = (1.0, 1.0)
    gust_std: tuple[float, float] = (0.0, 0.0)  # m/s, added to wind.gust_std
    camera_pitch_deg: tuple[float, float] = (0.0, 0.0)  # added to camera_mount.pitch_deg
    depth_noise_std: tuple[float, float] = (0.0, 0.0)  # added to the level's camera.noise_std (normalised depth)
    act_delay_ms: tuple[float, float] = (0.0, 0.0)  # each action reaches the controller this late, on top of any

    @property
    def enabled(self) -> bool:
        """Whether any range is wider than one value or off its nominal value."""
        return any(
            tuple(getattr(self, f.name)) != tuple(f.default)  # type: ignore[arg-type]
            for f in fields(self)
        )


@dataclass(frozen=True)
class DynamicsConfig:
    airframe: AirframeConfig = field(default_factory=AirframeConfig)
    motors: MotorConfig = field(default_factory=MotorConfig)
    velocity_loop: VelocityLoopConfig = field(default_factory=VelocityLoopConfig)
    attitude_loop: AttitudeLoopConfig = field(default_factory=AttitudeLoopConfig)
    rate_loop: RateLoopConfig = field(default_factory=RateLoopConfig)
    physics: PhysicsConfig = field(default_factory=PhysicsConfig)
    camera_mount: CameraMountConfig = field(default_factory=CameraMountConfig)
    wind: WindConfig = field(default_factory=WindConfig)
    randomization: RandomizationConfig = field(default_factory=RandomizationConfig)
    source: str = "iris.toml"

    @property
    def hover_thrust(self) -> float:
        """N, all rotors."""
        return self.airframe.mass * GRAVITY

    @property
    def hover_rotor_speed(self) -> float:
        """rad/s of each rotor in a hover."""
        return math.sqrt(self.hover_thrust / 4 / self.motors.motor_constant)


GRAVITY = 9.81  # m/s^2, also MuJoCo's (the model sets it)

_SECTIONS: dict[str, type] = {
    "airframe": AirframeConfig,
    "motors": MotorConfig,
    "velocity_loop": VelocityLoopConfig,
    "attitude_loop": AttitudeLoopConfig,
    "rate_loop": RateLoopConfig,
    "physics": PhysicsConfig,
    "camera_mount": CameraMountConfig,
    "wind": WindConfig,
    "randomization": RandomizationConfig,
}


def load_dynamics(path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> DynamicsConfig:
    """The configuration in ``path`` (default: the shipped Iris) with dotted ``overrides`` applied."""
    source = DEFAULT_FILE if path is None else Path(path)
    if not source.is_file():
        raise ConfigError(f"dynamics file not found: {source}")
    try:
        data = tomllib.loads(source.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{source}: invalid TOML: {e}") from None
    apply_overrides(data, overrides, "dynamics override")
    name = source.name if path is None else str(source)
    sections = {}
    for section, values in data.items():
        cls = _SECTIONS.get(section)
        if cls is None:
            raise ConfigError(f"{name}: unknown section {section!r} (known: {', '.join(_SECTIONS)})")
        if not isinstance(values, dict):
            raise ConfigError(f"{name}: [{section}] must be a table")
        sections[section] = build_section(cls, section, values, name)
    cfg = DynamicsConfig(**sections, source=name)
    validate_dynamics(cfg)
    return cfg


def validate_dynamics(cfg: DynamicsConfig) -> None:
    src = cfg.source

    def positive(where: str, v: float) -> None:
        if not (math.isfinite(v) and v > 0):
            raise ConfigError(f"{src}: {where} must be positive, got {v!r}")

    def nonneg(where: str, v: float) -> None:
        if not (math.isfinite(v) and v >= 0):
            raise ConfigError(f"{src}: {where} must be >= 0, got {v!r}")

    a, m = cfg.airframe, cfg.motors
    positive("airframe.mass", a.mass)
    for i, v in enumerate(a.inertia):
        positive(f"airframe.inertia[{i}]", v)
    if any(s not in (1, -1) for s in a.rotor_spin) or sum(a.rotor_spin) != 0:
        raise ConfigError(f"{src}: airframe.rotor_spin must be two +1 and two -1, got {list(a.rotor_spin)}")
    for k in ("motor_constant", "moment_constant", "max_rotor_speed", "time_constant_up", "time_constant_down"):
        positive(f"motors.{k}", getattr(m, k))
    nonneg("motors.rotor_drag", m.rotor_drag)
    if 4 * m.max_thrust <= cfg.hover_thrust:
        raise ConfigError(f"{src}: the motors' {4 * m.max_thrust:.1f} N cannot lift {cfg.hover_thrust:.1f} N")
    for section in ("velocity_loop", "attitude_loop", "rate_loop"):
        for k, v in vars(getattr(cfg, section)).items():
            (positive if k.startswith(("p_", "max_", "integral")) else nonneg)(f"{section}.{k}", v)
    if not cfg.velocity_loop.max_tilt_deg < 80:
        raise ConfigError(f"{src}: velocity_loop.max_tilt_deg must be below 80, got {cfg.velocity_loop.max_tilt_deg}")
    if not cfg.velocity_loop.max_accel_down < GRAVITY:
        # The thrust vector's vertical part is g - max_accel_down: at g or more it points nowhere (or down), and the
        # attitude it asks for is undefined.
        raise ConfigError(
            f"{src}: velocity_loop.max_accel_down must be below g ({GRAVITY} m/s^2), got {cfg.velocity_loop.max_accel_down}"
        )
    positive("physics.step", cfg.physics.step)
    if cfg.physics.step > 0.01:
        raise ConfigError(f"{src}: physics.step {cfg.physics.step} s is too coarse for the rate loop (at most 0.01)")
    if cfg.camera_mount.mount not in ("body", "gimbal"):
        raise ConfigError(f"{src}: camera_mount.mount must be 'body' or 'gimbal', got {cfg.camera_mount.mount!r}")
    if not -90 < cfg.camera_mount.pitch_deg < 90:
        raise ConfigError(f"{src}: camera_mount.pitch_deg must be in (-90, 90), got {cfg.camera_mount.pitch_deg!r}")
    lo, hi = cfg.wind.speed
    nonneg("wind.speed", lo)
    if hi < lo:
        raise ConfigError(f"{src}: wind.speed range is reversed: {list(cfg.wind.speed)}")
    nonneg("wind.gust_std", cfg.wind.gust_std)
    positive("wind.gust_time_constant", cfg.wind.gust_time_constant)
    validate_randomization(cfg)


def validate_randomization(cfg: DynamicsConfig) -> None:
    src, r = cfg.source, cfg.randomization
    for f in fields(r):
        lo, hi = getattr(r, f.name)
        where = f"randomization.{f.name}"
        if not (math.isfinite(lo) and math.isfinite(hi)):
            raise ConfigError(f"{src}: {where} must be finite, got {[lo, hi]}")
        if hi < lo:
            raise ConfigError(f"{src}: {where} range is reversed: {[lo, hi]}")
        if f.name.endswith("_scale") and lo <= 0:
            raise ConfigError(f"{src}: {where} must be positive, got {[lo, hi]}")
        if f.name in ("gust_std", "depth_noise_std", "act_delay_ms") and lo < 0:
            raise ConfigError(f"{src}: {where} must be >= 0, got {[lo, hi]}")
    low_pitch = cfg.camera_mount.pitch_deg + r.camera_pitch_deg[0]
    high_pitch = cfg.camera_mount.pitch_deg + r.camera_pitch_deg[1]
    if not (-90 < low_pitch and high_pitch < 90):
        raise ConfigError(
            f"{src}: camera_mount.pitch_deg + randomization.camera_pitch_deg must stay in (-90, 90), "
            f"got {[low_pitch, high_pitch]}"
        )
    lightest_thrust = 4 * cfg.motors.max_thrust * r.motor_constant_scale[0]
    heaviest = cfg.hover_thrust * r.mass_scale[1]
    if lightest_thrust <= heaviest:
        raise ConfigError(
            f"{src}: with randomization the weakest motors ({lightest_thrust:.1f} N) cannot lift the heaviest "
            f"airframe ({heaviest:.1f} N)"
        )
