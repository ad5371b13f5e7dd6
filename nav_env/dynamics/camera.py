"""Which obstacles a depth camera can see, so that MuJoCo's ray cast tests only those (the rest it would
reject per ray: about 7 ns per obstacle and ray, most of a cast's cost).

Every obstacle is a vertical prism between floor and ceiling, so a ray can only reach it if the ray's
horizontal direction (azimuth) lies within the angle the obstacle's footprint subtends from the camera. All
rays of a pinhole camera lie in the convex pyramid of its four corner rays, whose horizontal projection is
the wedge between the corners' azimuths, unless the pyramid contains the vertical (then every azimuth is
possible and nothing is culled). An obstacle is kept when its angle (its bounding circle's) meets the wedge
and it is within ``cutoff``: exact culling, the ray cast's result is the same with or without it.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

_WIDE = math.radians(85.0)  # a wedge reaching past this either side of its centre: no culling


@njit(cache=True)
def _wrap(a: float) -> float:
    return (a + math.pi) % (2 * math.pi) - math.pi


@njit(cache=True)
def visible_obstacles(
    pos: np.ndarray,  # (N, 3) camera positions
    rot: np.ndarray,  # (N, 3, 3) camera-to-world rotations (camera x forward, y left, z up)
    corners: np.ndarray,  # (4, 3) unit directions of the corner pixels' rays, camera frame
    tan_half: np.ndarray,  # (2,) tangents of the half fields of view through the corner pixels: horizontal, vertical
    cyl: np.ndarray,  # (N, Kc, >=3) x, y, radius
    box: np.ndarray,  # (N, Kb, 4) x0, y0, x1, y1
    cutoff: float,
    keep_cyl: np.ndarray,  # (N, Kc) bool, out
    keep_box: np.ndarray,  # (N, Kb) bool, out
) -> None:
    for i in range(pos.shape[0]):
        # the vertical (up or down) inside the pyramid: every azimuth is seen
        everything = False
        centre = 0.0
        for sign in (-1.0, 1.0):  # world up and down in camera axes: the rotation's third row
            vx, vy, vz = sign * rot[i, 2, 0], sign * rot[i, 2, 1], sign * rot[i, 2, 2]
            if vx > 0 and abs(vy) <= tan_half[0] * vx and abs(vz) <= tan_half[1] * vx:
                everything = True
        lo, hi = 0.0, 0.0
        if not everything:
            cx, cy = rot[i, 0, 0], rot[i, 1, 0]
            centre = math.atan2(cy, cx) if cx * cx + cy * cy > 1e-12 else 0.0
            lo, hi = 1e9, -1e9
            for c in range(4):
                dx = rot[i, 0, 0] * corners[c, 0] + rot[i, 0, 1] * corners[c, 1] + rot[i, 0, 2] * corners[c, 2]
                dy = rot[i, 1, 0] * corners[c, 0] + rot[i, 1, 1] * corners[c, 1] + rot[i, 1, 2] * corners[c, 2]
                if dx * dx + dy * dy < 1e-12:
                    everything = True
                    break
                a = _wrap(math.atan2(dy, dx) - centre)
                lo, hi = min(lo, a), max(hi, a)
            if hi > _WIDE or lo < -_WIDE:
                everything = True
        px, py = pos[i, 0], pos[i, 1]
        for k in range(cyl.shape[1]):
            keep_cyl[i, k] = _seen(everything, lo, hi, centre, px, py, cyl[i, k, 0], cyl[i, k, 1], cyl[i, k, 2], cutoff)
        for k in range(box.shape[1]):
            x0, y0, x1, y1 = box[i, k, 0], box[i, k, 1], box[i, k, 2], box[i, k, 3]
            r = 0.5 * math.hypot(x1 - x0, y1 - y0)
            keep_box[i, k] = _seen(everything, lo, hi, centre, px, py, 0.5 * (x0 + x1), 0.5 * (y0 + y1), r, cutoff)


@njit(cache=True)
def _seen(
    everything: bool,
    lo: float,
    hi: float,
    centre: float,
    px: float,
    py: float,
    x: float,
    y: float,
    r: float,
    cutoff: float,
) -> bool:
    d = math.hypot(x - px, y - py)
    if d - r > cutoff:
        return False
    if everything or d <= r * 1.000001 + 1e-9:
        return True
    half = math.asin(min(1.0, r / d)) + 1e-6
    a = _wrap(math.atan2(y - py, x - px) - centre)
    return a + half >= lo and a - half <= hi


@njit(cache=True)
def cast_depth(
    pos: np.ndarray,  # (N, 3) camera positions, arena coordinates
    rays: np.ndarray,  # (N, 3, P) unit world directions of each env's pixels
    cyl: np.ndarray,  # (N, Kc, >=3) x, y, radius: vertical cylinders from floor to ceiling
    box: np.ndarray,  # (N, Kb, 4) x0, y0, x1, y1: axis-aligned boxes from floor to ceiling
    keep_cyl: np.ndarray,  # (N, Kc) bool: the obstacles to test (visible_obstacles)
    keep_box: np.ndarray,  # (N, Kb) bool
    size_x: float,
    size_y: float,
    ceiling: float,
    cutoff: float,
    dist: np.ndarray,  # (N, P) out: distance along each ray to the first surface, -1 beyond ``cutoff``
) -> None:
    """Each pixel's ray against the arena (floor, ceiling and walls: a box seen from inside, so the distance to
    where the ray leaves it) and the obstacles, which are vertical prisms between floor and ceiling: a ray meets
    one where its horizontal part meets the footprint, before it leaves the arena (so within the prism's height)."""
    for i in range(pos.shape[0]):
        px, py, pz = pos[i, 0], pos[i, 1], pos[i, 2]
        for p in range(rays.shape[2]):
            dx, dy, dz = rays[i, 0, p], rays[i, 1, p], rays[i, 2, p]
            t = math.inf
            if dx > 0:
                t = min(t, (size_x - px) / dx)
            elif dx < 0:
                t = min(t, -px / dx)
            if dy > 0:
                t = min(t, (size_y - py) / dy)
            elif dy < 0:
                t = min(t, -py / dy)
            if dz > 0:
                t = min(t, (ceiling - pz) / dz)
            elif dz < 0:
                t = min(t, -pz / dz)
            a = dx * dx + dy * dy
            if a > 0.0:
                for k in range(cyl.shape[1]):
                    if keep_cyl[i, k]:
                        ox, oy, r = px - cyl[i, k, 0], py - cyl[i, k, 1], cyl[i, k, 2]
                        b = ox * dx + oy * dy
                        disc = b * b - a * (ox * ox + oy * oy - r * r)
                        if disc >= 0.0:
                            hit = (-b - math.sqrt(disc)) / a
                            if 0.0 <= hit < t:
                                t = hit
                for k in range(box.shape[1]):
                    if keep_box[i, k]:
                        hit = _slab_entry(px, py, dx, dy, box[i, k, 0], box[i, k, 1], box[i, k, 2], box[i, k, 3])
                        if 0.0 <= hit < t:
                            t = hit
            dist[i, p] = t if t <= cutoff else -1.0


@njit(cache=True)
def _slab_entry(px: float, py: float, dx: float, dy: float, x0: float, y0: float, x1: float, y1: float) -> float:
    """Where a horizontal ray enters the rectangle [x0, x1] x [y0, y1] (-1: it misses it, or starts inside)."""
    enter, leave = -math.inf, math.inf
    for o, d, lo, hi in ((px, dx, x0, x1), (py, dy, y0, y1)):
        if d != 0.0:
            t1, t2 = (lo - o) / d, (hi - o) / d
            enter, leave = max(enter, min(t1, t2)), min(leave, max(t1, t2))
        elif o < lo or o > hi:
            return -1.0
    return enter if enter <= leave else -1.0
