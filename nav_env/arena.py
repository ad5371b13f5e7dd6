"""Episode generation: obstacles, start pose and goal, with a solvability check.

An episode is a pure function of its random generator: the single env and the vector env call the
same code with the same per-env generator, so equal seeds give equal episodes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from nav_env.config import NavConfig

FAR = 1.0e4  # where unused obstacle slots are parked: beyond any camera range
GRID_RES = 0.5  # m, the planner grid used to prove an episode solvable
MAX_ATTEMPTS = 200


class GenerationError(RuntimeError):
    """No solvable episode could be drawn: the level is too dense for its arena."""


@dataclass
class Episode:
    """Everything that defines one episode; obstacle arrays are padded to the level's slot counts."""

    start: np.ndarray  # (3,) x, y, z
    yaw: float
    goal: np.ndarray  # (3,)
    zone: int
    cyl: np.ndarray  # (Kc, 5) x, y, radius, vx, vy; moving cylinders come after static ones
    box: np.ndarray  # (Kb, 4) x0, y0, x1, y1
    noise_key: int  # seeds the counter-based depth noise


def slot_counts(cfg: NavConfig) -> tuple[int, int]:
    o = cfg.obstacles
    return o.cylinders[1] + o.moving[1], o.boxes[1]


def sample_episode(rng: np.random.Generator, cfg: NavConfig, zone: int | None = None) -> Episode:
    """Draw episodes from ``rng`` until one is solvable."""
    for _ in range(MAX_ATTEMPTS):
        ep = _draw(rng, cfg, zone)
        if solvable(ep, cfg):
            return ep
    raise GenerationError(
        f"level {cfg.level!r}: no solvable episode in {MAX_ATTEMPTS} draws; lower the obstacle counts"
    )


def _draw(rng: np.random.Generator, cfg: NavConfig, zone: int | None) -> Episode:
    a, o, t = cfg.arena, cfg.obstacles, cfg.task
    if zone is None:
        zone = int(rng.integers(len(t.goal_zones)))
    lo, hi = t.goal_zones[zone]
    m = a.spawn_margin
    for _ in range(10_000):
        sx, sy = rng.uniform(m, a.size_x - m), rng.uniform(m, a.size_y - m)
        d, th = rng.uniform(lo, hi), rng.uniform(-math.pi, math.pi)
        gx, gy = sx + d * math.cos(th), sy + d * math.sin(th)
        if m <= gx <= a.size_x - m and m <= gy <= a.size_y - m:
            break
    else:
        raise GenerationError(f"goal zone {zone} ({lo}-{hi} m) does not fit the arena")
    start = np.array([sx, sy, a.altitude])
    goal = np.array([gx, gy, a.altitude])
    yaw = float(rng.uniform(-math.pi, math.pi))
    keep_out = np.array([[sx, sy], [gx, gy]])

    kc, kb = slot_counts(cfg)
    cyl = np.zeros((kc, 5))
    cyl[:, 0:2] = FAR
    n_static = int(rng.integers(o.cylinders[0], o.cylinders[1] + 1))
    n_moving = int(rng.integers(o.moving[0], o.moving[1] + 1))
    cyl[:n_static, :3] = _place_cylinders(rng, n_static, o.cylinder_radius, keep_out, o.clearance, cfg)
    if n_moving:
        off = o.cylinders[1]
        cyl[off : off + n_moving, :3] = _place_cylinders(rng, n_moving, o.moving_radius, keep_out, o.clearance, cfg)
        speed = rng.uniform(*o.moving_speed, size=n_moving)
        heading = rng.uniform(-math.pi, math.pi, size=n_moving)
        cyl[off : off + n_moving, 3] = speed * np.cos(heading)
        cyl[off : off + n_moving, 4] = speed * np.sin(heading)

    box = np.full((kb, 4), FAR)
    n_box = int(rng.integers(o.boxes[0], o.boxes[1] + 1))
    box[:n_box] = _place_boxes(rng, n_box, o.box_side, keep_out, o.clearance, cfg)
    noise_key = int(rng.integers(0, 2**32))
    return Episode(start, yaw, goal, zone, cyl, box, noise_key)


def _place_cylinders(
    rng: np.random.Generator, n: int, radius_range: tuple[float, float], keep_out: np.ndarray, clearance: float,
    cfg: NavConfig,
) -> np.ndarray:  # fmt: skip
    out = np.zeros((n, 3))
    for i in range(n):
        for _ in range(1000):
            r = rng.uniform(*radius_range)
            x, y = rng.uniform(0, cfg.arena.size_x), rng.uniform(0, cfg.arena.size_y)
            if np.all(np.hypot(keep_out[:, 0] - x, keep_out[:, 1] - y) >= r + clearance):
                out[i] = x, y, r
                break
        else:
            raise GenerationError(f"level {cfg.level!r}: cannot place obstacle {i} clear of start and goal")
    return out


def _place_boxes(
    rng: np.random.Generator, n: int, side_range: tuple[float, float], keep_out: np.ndarray, clearance: float,
    cfg: NavConfig,
) -> np.ndarray:  # fmt: skip
    out = np.zeros((n, 4))
    for i in range(n):
        for _ in range(1000):
            w, h = rng.uniform(*side_range), rng.uniform(*side_range)
            x, y = rng.uniform(0, cfg.arena.size_x - w), rng.uniform(0, cfg.arena.size_y - h)
            if np.all(_point_box_distance(keep_out, np.array([x, y, x + w, y + h])) >= clearance):
                out[i] = x, y, x + w, y + h
                break
        else:
            raise GenerationError(f"level {cfg.level!r}: cannot place box {i} clear of start and goal")
    return out


def _point_box_distance(points: np.ndarray, box: np.ndarray) -> np.ndarray:
    dx = np.maximum(np.maximum(box[0] - points[:, 0], 0.0), points[:, 0] - box[2])
    dy = np.maximum(np.maximum(box[1] - points[:, 1], 0.0), points[:, 1] - box[3])
    return np.hypot(dx, dy)


def clearance_grid(ep: Episode, cfg: NavConfig, res: float = GRID_RES) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Distance from each grid-cell centre to the nearest static obstacle or wall: (dist, xs, ys)."""
    xs = (np.arange(int(math.ceil(cfg.arena.size_x / res))) + 0.5) * res
    ys = (np.arange(int(math.ceil(cfg.arena.size_y / res))) + 0.5) * res
    gx, gy = xs[:, None], ys[None, :]
    dist = np.minimum(np.minimum(gx, cfg.arena.size_x - gx), np.minimum(gy, cfg.arena.size_y - gy))
    static = ep.cyl[(ep.cyl[:, 3] == 0) & (ep.cyl[:, 4] == 0) & (ep.cyl[:, 0] < FAR)]
    for x, y, r, _, _ in static:
        dist = np.minimum(dist, np.hypot(gx - x, gy - y) - r)
    for x0, y0, x1, y1 in ep.box[ep.box[:, 0] < FAR]:
        dx = np.maximum(np.maximum(x0 - gx, 0.0), gx - x1)
        dy = np.maximum(np.maximum(y0 - gy, 0.0), gy - y1)
        dist = np.minimum(dist, np.hypot(dx, dy))
    return dist, xs, ys


def solvable(ep: Episode, cfg: NavConfig, res: float = GRID_RES) -> bool:
    """True if a 4-connected grid path links start and goal with room for the vehicle.

    A cell is free when its centre is at least ``radius + res/2`` from every static obstacle, so the
    straight segment between two free neighbouring centres is collision-free: a grid path is a real
    path. Moving obstacles are ignored (they can wait out).
    """
    dist, xs, ys = clearance_grid(ep, cfg, res)
    free = dist >= cfg.vehicle.radius + res / 2

    def cell(p: np.ndarray) -> tuple[int, int]:
        return min(int(p[0] / res), len(xs) - 1), min(int(p[1] / res), len(ys) - 1)

    s, g = cell(ep.start), cell(ep.goal)
    if not (free[s] and free[g]):
        return False
    return _connected(free, s, g)


def _connected(free: np.ndarray, s: tuple[int, int], g: tuple[int, int]) -> bool:
    """Flood fill by whole free runs: each pass spreads reach along every row run, then column run,
    so the passes needed are the turns of the path, not its length."""
    row_runs = _run_labels(free)
    col_runs = _run_labels(free.T).T
    reach = np.zeros_like(free)
    reach[s] = True
    n_reached = 1
    while True:
        reach = _spread(reach, row_runs)
        reach = _spread(reach, col_runs)
        if reach[g]:
            return True
        n = int(reach.sum())
        if n == n_reached:
            return False
        n_reached = n


def _run_labels(free: np.ndarray) -> np.ndarray:
    """Label each maximal run of free cells along axis 1 with a unique id; blocked cells get 0."""
    starts = free & ~np.pad(free, ((0, 0), (1, 0)))[:, :-1]
    labels = np.cumsum(starts.ravel()).reshape(free.shape)
    return np.where(free, labels, 0)


def _spread(reach: np.ndarray, labels: np.ndarray) -> np.ndarray:
    hit = np.zeros(labels.max() + 1, dtype=bool)
    hit[labels[reach]] = True
    hit[0] = False
    return hit[labels]


def make_episode(
    cfg: NavConfig,
    start: tuple[float, float],
    goal: tuple[float, float],
    yaw: float = 0.0,
    cylinders: Sequence[tuple[float, float, float]] = (),
    boxes: Sequence[tuple[float, float, float, float]] = (),
    moving: Sequence[tuple[float, float, float, float, float]] = (),
    zone: int = 0,
    noise_key: int = 0,
) -> Episode:
    """A hand-built scene, padded to the level's obstacle slots: cylinders (x, y, r), boxes
    (x0, y0, x1, y1), moving cylinders (x, y, r, vx, vy). Play it with
    ``env.reset(options={"episode": ep})``."""
    kc, kb = slot_counts(cfg)
    n_static_slots = cfg.obstacles.cylinders[1]
    if len(cylinders) > n_static_slots or len(moving) > kc - n_static_slots or len(boxes) > kb:
        raise ValueError(
            f"scene has {len(cylinders)} cylinders, {len(moving)} moving, {len(boxes)} boxes; level "
            f"{cfg.level!r} has slots for {n_static_slots}, {kc - n_static_slots}, {kb}"
        )
    cyl = np.zeros((kc, 5))
    cyl[:, 0:2] = FAR
    for i, c in enumerate(cylinders):
        cyl[i, :3] = c
    for i, m in enumerate(moving):
        cyl[n_static_slots + i] = m
    box = np.full((kb, 4), FAR)
    for i, b in enumerate(boxes):
        box[i] = b
    z = cfg.arena.altitude
    return Episode(np.array([*start, z], float), float(yaw), np.array([*goal, z], float), zone, cyl, box, noise_key)
