"""Conversions between the env's arena frame and AirSim's NED frame, and AirSim depth frames to the
env's depth image. Pure numpy: no client library needed.

Arena frame (nav_env): x forward/north, y left/west, z up; yaw counter-clockwise from +x seen from
above. AirSim world frame: NED, x north, y east, z down; yaw clockwise from north seen from above.
The arena origin (its south-east-floor corner, x = y = z = 0) sits at ``origin`` in AirSim's NED
coordinates, so ``ned = origin + (x, -y, -z)`` and ``yaw_ned = -yaw``: a 180-degree rotation about
the north axis (a proper rotation, so handedness is preserved).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TypeAlias

import numpy as np

from nav_env.config import NavConfig

FLIP = np.array([1.0, -1.0, -1.0])  # arena <-> NED axes (its own inverse)

Vector: TypeAlias = Sequence[float] | np.ndarray  # a point or velocity: a list, a tuple or an array of 3


def arena_to_ned(p: Vector, origin: Vector) -> np.ndarray:
    return np.asarray(origin, float) + FLIP * np.asarray(p, float)


def ned_to_arena(p: Vector, origin: Vector) -> np.ndarray:
    return FLIP * (np.asarray(p, float) - np.asarray(origin, float))


def vel_arena_to_ned(v: Vector) -> np.ndarray:
    return FLIP * np.asarray(v, float)


vel_ned_to_arena = vel_arena_to_ned


def yaw_quaternion_ned(yaw_arena: float) -> tuple[float, float, float, float]:
    """(w, x, y, z) of a level attitude with the arena yaw ``yaw_arena``, in NED."""
    h = -yaw_arena / 2
    return math.cos(h), 0.0, 0.0, math.sin(h)


def arena_yaw_from_ned_quaternion(w: float, x: float, y: float, z: float) -> float:
    """The arena yaw (counter-clockwise, rad, in [-pi, pi)) of an NED attitude quaternion."""
    yaw_ned = math.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))
    return math.remainder(-yaw_ned, 2 * math.pi)


def body_to_world(cmd: Vector, yaw: float) -> np.ndarray:
    """Body-frame [vx, vy, vz] (forward, left, up) at arena yaw ``yaw`` -> arena-frame velocity;
    the same rotation as ``BatchSim.step``."""
    c, s = math.cos(yaw), math.sin(yaw)
    return np.array([c * cmd[0] - s * cmd[1], s * cmd[0] + c * cmd[1], cmd[2]])


def world_to_body(v: Vector, yaw: float) -> np.ndarray:
    c, s = math.cos(yaw), math.sin(yaw)
    return np.array([c * v[0] + s * v[1], -s * v[0] + c * v[1], v[2]])


class DepthResampler:
    """AirSim float depth frame (metres, ``src_h`` x ``src_w``, horizontal FOV ``src_fov_deg``) -> the
    env's normalised planar depth image (camera.height x camera.width).

    Each env pixel takes the source pixel its centre ray falls in (nearest neighbour on the ray
    directions, not an image rescale), so a source frame of the env's own size and FOV, or an odd
    multiple of it, is sampled at exactly the env's rays. ``DepthPerspective`` (distance from the
    camera centre) becomes planar depth (distance along the optical axis) by dividing by the ray's
    length per unit forward distance. Then, as on the embedded simulator: no return or beyond
    ``camera.max_range`` reads 1; the value is depth / ``max_range``.
    """

    def __init__(self, cfg: NavConfig, src_w: int, src_h: int, src_fov_deg: float, perspective: bool):
        c = cfg.camera
        if src_w <= 0 or src_h <= 0:
            raise ValueError(f"empty depth frame ({src_w} x {src_h})")
        self.src_shape = (src_h, src_w)
        self.max_range = float(c.max_range)
        f = (c.width / 2) / math.tan(math.radians(c.fov_deg) / 2)
        u = (c.width / 2 - (np.arange(c.width) + 0.5)) / f  # left positive, as BatchSim.col_angle
        v = (np.arange(c.height) + 0.5 - c.height / 2) / f  # down positive, as BatchSim.row_tan
        f0 = (src_w / 2) / math.tan(math.radians(src_fov_deg) / 2)
        col = src_w / 2 - u * f0 - 0.5  # source pixel-centre coordinates of the env's rays
        row = src_h / 2 + v * f0 - 0.5
        ci = np.floor(col + 0.5).astype(np.int64)
        ri = np.floor(row + 0.5).astype(np.int64)
        if ci.min() < 0 or ci.max() >= src_w:
            raise ValueError(
                f"the AirSim camera's horizontal FOV ({src_fov_deg:g} deg) is narrower than the env's ({c.fov_deg:g} deg)"
            )
        if ri.min() < 0 or ri.max() >= src_h:
            need = 2 * math.degrees(math.atan((c.height / 2) / f))
            have = 2 * math.degrees(math.atan((src_h / 2) / f0))
            raise ValueError(
                f"the AirSim camera's vertical FOV ({have:.1f} deg: {src_w} x {src_h} px at {src_fov_deg:g} deg "
                f"horizontal) is narrower than the env's ({need:.1f} deg); use a taller frame"
            )
        self.rows, self.cols = ri[:, None], ci[None, :]
        if perspective:
            u0 = (src_w / 2 - (ci + 0.5)) / f0
            v0 = (ri + 0.5 - src_h / 2) / f0
            self.scale = (1.0 / np.sqrt(1.0 + u0[None, :] ** 2 + v0[:, None] ** 2)).astype(np.float32)
        else:
            self.scale = None

    def __call__(self, frame: np.ndarray) -> np.ndarray:
        frame = np.asarray(frame, dtype=np.float32)
        if frame.shape != self.src_shape:
            raise ValueError(f"depth frame is {frame.shape}, expected {self.src_shape}")
        d = frame[self.rows, self.cols]
        if self.scale is not None:
            d = d * self.scale
        d = np.where(np.isfinite(d), d, np.float32(self.max_range))
        np.clip(d, 0.0, self.max_range, out=d)
        d *= np.float32(1.0 / self.max_range)
        return d.astype(np.float32, copy=False)
