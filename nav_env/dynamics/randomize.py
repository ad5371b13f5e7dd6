"""Per-episode physics of the ``mujoco`` backend: the dynamics TOML's ``[randomization]`` ranges drawn from the episode.

Each parameter is uniform over its range, drawn by :func:`nav_env.sim.hash_uniform` from the episode's noise key (set by
the episode's seed), so an episode flies the same airframe whatever batch it runs in and on every machine. The flight
controller keeps the nominal airframe (mass, inertia, motor constant): it does not know what it flies, as an autopilot
tuned for one airframe does not know the payload or the propellers it was given.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np

from nav_env.dynamics.config import GRAVITY, DynamicsConfig
from nav_env.sim import hash_uniform

_SALT = 0x2545F491  # the stream of these draws (the camera noise and the wind have their own)
# the order of the draws: a parameter's index into the episode's stream, never reused
_DRAWS = (
    "mass_scale",
    "inertia_scale",
    "motor_constant_scale",
    "motor_time_constant_scale",
    "rotor_drag_scale",
    "gust_std",
    "camera_pitch_deg",
    "depth_noise_std",
    "act_delay_ms",
)


@dataclass
class EpisodePhysics:
    """The physics each of N envs flies in its current episode, in SI units (each array (N,))."""

    mass: np.ndarray  # kg
    inertia_x: np.ndarray  # kg m^2
    inertia_y: np.ndarray
    inertia_z: np.ndarray
    motor_constant: np.ndarray  # N / (rad/s)^2
    motor_time_constant_up: np.ndarray  # s
    motor_time_constant_down: np.ndarray  # s
    rotor_drag: np.ndarray  # N s / m per rad/s
    wind_speed: np.ndarray  # m/s, the steady wind ([wind] speed, drawn by the simulator)
    gust_std: np.ndarray  # m/s
    camera_pitch_deg: np.ndarray  # the mount's up-tilt
    depth_noise_std: np.ndarray  # normalised depth, the level's noise included
    act_delay_s: np.ndarray  # s

    @classmethod
    def nominal(cls, dyn: DynamicsConfig, n: int, level_noise_std: float) -> EpisodePhysics:
        a, m = dyn.airframe, dyn.motors
        values = (
            a.mass,
            *a.inertia,
            m.motor_constant,
            m.time_constant_up,
            m.time_constant_down,
            m.rotor_drag,
            0.0,
            dyn.wind.gust_std,
            dyn.camera_mount.pitch_deg,
            level_noise_std,
            0.0,
        )
        return cls(*(np.full(n, v, dtype=np.float64) for v in values))

    def draw(self, i: int, dyn: DynamicsConfig, noise_key: int, level_noise_std: float) -> None:
        """Env ``i``'s parameters for the episode whose noise key is ``noise_key``."""
        r, a, m = dyn.randomization, dyn.airframe, dyn.motors
        u = hash_uniform(
            np.full((1, 1), noise_key, np.uint32),
            np.zeros((1, 1), np.uint32),
            np.arange(len(_DRAWS), dtype=np.uint32),
            _SALT,
        )[0].astype(np.float64)
        x = {name: lo + (hi - lo) * float(u[k]) for k, name in enumerate(_DRAWS) for lo, hi in [getattr(r, name)]}
        self.mass[i] = a.mass * x["mass_scale"]
        self.inertia_x[i], self.inertia_y[i], self.inertia_z[i] = (j * x["inertia_scale"] for j in a.inertia)
        self.motor_constant[i] = m.motor_constant * x["motor_constant_scale"]
        self.motor_time_constant_up[i] = m.time_constant_up * x["motor_time_constant_scale"]
        self.motor_time_constant_down[i] = m.time_constant_down * x["motor_time_constant_scale"]
        self.rotor_drag[i] = m.rotor_drag * x["rotor_drag_scale"]
        self.gust_std[i] = dyn.wind.gust_std + x["gust_std"]
        self.camera_pitch_deg[i] = dyn.camera_mount.pitch_deg + x["camera_pitch_deg"]
        self.depth_noise_std[i] = level_noise_std + x["depth_noise_std"]
        self.act_delay_s[i] = x["act_delay_ms"] / 1000.0

    def hover_rotor_speed(self, idx: np.ndarray) -> np.ndarray:
        """rad/s of each rotor in a hover, for envs ``idx``."""
        return np.sqrt(self.mass[idx] * GRAVITY / 4 / self.motor_constant[idx])

    def record(self, i: int) -> dict[str, float]:
        """Env ``i``'s parameters by name (``info["physics"]`` and the run log)."""
        return {f.name: float(getattr(self, f.name)[i]) for f in fields(self)}

    def arrays(self) -> dict[str, np.ndarray]:
        """Every env's parameters by name (a vector env's ``info["physics"]``): copies."""
        return {f.name: getattr(self, f.name).copy() for f in fields(self)}


def mount_rotation(pitch_deg: float) -> np.ndarray:
    """The camera mount's rotation for an up-tilt of ``pitch_deg`` (a rotation about the camera's y by -pitch)."""
    p = math.radians(pitch_deg)
    return np.array([[math.cos(p), 0, -math.sin(p)], [0, 1, 0], [math.sin(p), 0, math.cos(p)]])
