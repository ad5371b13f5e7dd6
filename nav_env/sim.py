"""Batched 2.5D multirotor simulator: N independent episodes stepped together in numpy.

Obstacles are vertical prisms from floor to ceiling (cylinders and axis-aligned boxes), so one
horizontal ray per image column gives the obstacle depth for the whole column; floor and ceiling add
a per-row term. Every array has the batch as its first axis and there is no Python loop over envs in
``step`` or ``observe``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from nav_env.arena import Episode, slot_counts
from nav_env.config import N_STATE_FEATURES, NavConfig

INF32 = np.float32(np.inf)


class BatchSim:
    def __init__(self, cfg: NavConfig, n: int):
        self.cfg, self.n = cfg, n
        c, v = cfg.camera, cfg.vehicle
        kc, kb = slot_counts(cfg)
        self.has_moving = cfg.obstacles.moving[1] > 0
        self.alpha = 1.0 - math.exp(-v.dt / v.tau)  # first-order response per step
        self.dist_scale = math.hypot(cfg.arena.size_x, cfg.arena.size_y)

        # camera geometry: column bearings (left is positive) and per-row tangents (down is positive)
        f = (c.width / 2) / math.tan(math.radians(c.fov_deg) / 2)
        u = (c.width / 2 - (np.arange(c.width) + 0.5)) / f
        self.col_angle = np.arctan(u).astype(np.float32)
        self.col_cos = np.cos(self.col_angle).astype(np.float32)
        # square pixels unless camera.vfov_deg sets the vertical view (then rows have their own focal length)
        f_row = f if c.vfov_deg == 0 else (c.height / 2) / math.tan(math.radians(c.vfov_deg) / 2)
        self.row_tan = ((np.arange(c.height) + 0.5 - c.height / 2) / f_row).astype(np.float32)
        self.pixel_index = np.arange(c.width * c.height, dtype=np.uint32)

        # vehicle state (float64) and episode bookkeeping
        self.pos = np.zeros((n, 3))
        self.vel = np.zeros((n, 3))  # world frame
        self.yaw = np.zeros(n)
        self.yaw_rate = np.zeros(n)
        self.goal = np.zeros((n, 3))
        self.prev_dist = np.zeros(n)
        self.path_length = np.zeros(n)
        self.steps = np.zeros(n, dtype=np.int64)
        self.zone = np.zeros(n, dtype=np.int64)
        self.noise_key = np.zeros(n, dtype=np.uint32)
        self.start_dist = np.zeros(n)
        self.flight_time = np.zeros(n)  # simulated seconds since the episode started
        # the flight controller's side of a delayed control link: the setpoint it holds, and commands sent
        # but not yet arrived (per env: (seconds from the start of the next period, setpoint) in send order)
        self.held = np.zeros((n, 4))
        self.in_flight: list[list[tuple[float, np.ndarray]]] = [[] for _ in range(n)]
        # obstacles (float32: they only feed ray casting and collision)
        self.cyl = np.zeros((n, kc, 5), dtype=np.float32)
        self.box = np.zeros((n, kb, 4), dtype=np.float32)
        self._ws: _Workspace | None = None

    # ------------------------------------------------------------------ episodes
    def load(self, idx: Sequence[int] | np.ndarray, episodes: Sequence[Episode]) -> None:
        for i, ep in zip(idx, episodes):
            self.pos[i] = ep.start
            self.vel[i] = 0.0
            self.yaw[i] = ep.yaw
            self.yaw_rate[i] = 0.0
            self.goal[i] = ep.goal
            self.prev_dist[i] = self.start_dist[i] = float(np.linalg.norm(ep.goal - ep.start))
            self.path_length[i] = 0.0
            self.steps[i] = 0
            self.flight_time[i] = 0.0
            self.held[i] = 0.0  # hover
            self.in_flight[i] = []
            self.zone[i] = ep.zone
            self.noise_key[i] = ep.noise_key
            self.cyl[i] = ep.cyl
            self.box[i] = ep.box

    # ------------------------------------------------------------------ dynamics
    def step(self, cmd: np.ndarray, delay: np.ndarray | None = None, period: np.ndarray | None = None):
        """Advance every env by one control period under body-frame setpoints ``cmd`` (N, 4).

        ``delay`` (N,) seconds: when each env's ``cmd`` reaches its flight controller, counted from the
        start of the period (the observation it answers). Until then the vehicle follows the setpoint
        the controller holds; a delay of a whole period or more lands the command in a later period.
        ``period`` (N,) seconds: each env's period (default ``vehicle.dt``). Without either, or with
        zero delays, fixed periods and nothing in flight, this is the lockstep step, bit for bit.

        Returns reward, terminated, truncated, collision, success (arrays of length N).
        """
        if delay is None and period is None or self._lockstep(delay, period):
            return self._lockstep_step(cmd)
        dt = self.cfg.vehicle.dt
        delay = np.zeros(self.n) if delay is None else np.broadcast_to(np.asarray(delay, dtype=np.float64), (self.n,))
        period = np.full(self.n, dt) if period is None else np.broadcast_to(np.asarray(period, np.float64), (self.n,))
        segments, setpoints = self._schedule(np.asarray(cmd, dtype=np.float64), delay, period)
        moved = np.zeros((self.n, 3))
        for k in range(segments.shape[0]):
            moved += self._follow(setpoints[k], segments[k])
        self.track(moved, period)
        if self.has_moving:
            self._move_obstacles(period.astype(np.float32)[:, None, None])
        return self.score(self.collided(), period / dt)

    def _lockstep(self, delay: np.ndarray | None, period: np.ndarray | None) -> bool:
        return (
            (period is None or bool(np.all(np.asarray(period) == self.cfg.vehicle.dt)))
            and (delay is None or not np.any(delay))
            and not any(self.in_flight)
        )

    def _lockstep_step(self, cmd: np.ndarray):
        v = self.cfg.vehicle
        a, dt = self.alpha, v.dt
        self.held[:] = cmd
        self.yaw_rate += a * (cmd[:, 3] - self.yaw_rate)
        self.yaw = np.remainder(self.yaw + self.yaw_rate * dt + math.pi, 2 * math.pi) - math.pi
        c, s = np.cos(self.yaw), np.sin(self.yaw)
        target = np.stack([c * cmd[:, 0] - s * cmd[:, 1], s * cmd[:, 0] + c * cmd[:, 1], cmd[:, 2]], axis=1)
        self.vel += a * (target - self.vel)
        self.track(self.vel * dt)
        if self.has_moving:
            self._move_obstacles(dt)
        return self.score(self.collided())

    def _schedule(self, cmd: np.ndarray, delay: np.ndarray, period: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """This period as segments: (K, N) durations and (K, N, 4) setpoints followed during them, K the
        most segments any env has (shorter envs padded with zero-length segments). Commands landing
        in this period switch the setpoint in landing order (ties: send order); later ones wait."""
        plans: list[list[tuple[float, np.ndarray]]] = []
        for i in range(self.n):
            queue = [*self.in_flight[i], (float(delay[i]), cmd[i])]
            queue.sort(key=lambda e: e[0])  # stable: ties keep the send order
            now, held, plan = 0.0, self.held[i].copy(), []  # a copy: self.held[i] is rewritten below
            landed = [e for e in queue if e[0] < period[i]]
            self.in_flight[i] = [(t - float(period[i]), c) for t, c in queue if t >= period[i]]
            for t, setpoint in landed:
                plan.append((t - now, held))
                now, held = t, setpoint
            plan.append((float(period[i]) - now, held))
            self.held[i] = held
            plans.append(plan)
        k = max(len(p) for p in plans)
        durations, setpoints = np.zeros((k, self.n)), np.zeros((k, self.n, 4))
        for i, plan in enumerate(plans):
            for j, (h, setpoint) in enumerate(plan):
                durations[j, i], setpoints[j, i] = h, setpoint
        return durations, setpoints

    def _follow(self, cmd: np.ndarray, h: np.ndarray) -> np.ndarray:
        """Follow setpoints ``cmd`` (N, 4) for ``h`` (N,) seconds (zero: untouched); the displacement."""
        v = self.cfg.vehicle
        on = h > 0
        # a whole period uses the lockstep step's own coefficient, so an undelayed env matches it bit for bit
        a = np.where(h == v.dt, self.alpha, -np.expm1(-h / v.tau))
        yaw_rate = self.yaw_rate + a * (cmd[:, 3] - self.yaw_rate)
        yaw = np.remainder(self.yaw + yaw_rate * h + math.pi, 2 * math.pi) - math.pi
        c, s = np.cos(yaw), np.sin(yaw)
        target = np.stack([c * cmd[:, 0] - s * cmd[:, 1], s * cmd[:, 0] + c * cmd[:, 1], cmd[:, 2]], axis=1)
        vel = self.vel + a[:, None] * (target - self.vel)
        self.yaw_rate = np.where(on, yaw_rate, self.yaw_rate)
        self.yaw = np.where(on, yaw, self.yaw)
        self.vel = np.where(on[:, None], vel, self.vel)
        return np.where(on[:, None], vel * h[:, None], 0.0)

    def track(self, delta: np.ndarray, period: np.ndarray | float | None = None) -> None:
        """Count one control step that moved every env by ``delta`` (N, 3) over ``period`` seconds
        (default ``vehicle.dt``); the AirSim backend calls it with the displacement its simulator reports."""
        self.pos += delta
        self.path_length += np.sqrt(np.einsum("ij,ij->i", delta, delta))
        self.steps += 1
        self.flight_time += self.cfg.vehicle.dt if period is None else period

    def score(self, collision: np.ndarray, step_share: np.ndarray | float = 1.0):
        """Reward and episode end for the current positions given this step's ``collision`` flags
        (shared with the AirSim backend). ``step_share``: each env's period over ``vehicle.dt`` (the step
        cost is per ``vehicle.dt`` of flight). Returns reward, terminated, truncated, collision, success."""
        cfg = self.cfg
        dist = np.linalg.norm(self.goal - self.pos, axis=1)
        success = (dist < cfg.task.success_radius) & ~collision
        r = cfg.reward
        step_cost = r.step if isinstance(step_share, float) and step_share == 1.0 else r.step * step_share
        reward = step_cost + r.progress * (self.prev_dist - dist) + r.success * success + r.collision * collision
        self.prev_dist = dist
        terminated = success | collision
        # the time limit is task.max_steps periods of vehicle.dt of flight (periods may vary); the margin
        # absorbs the rounding of summing 0.1 s periods, far below any period
        out_of_time = self.flight_time >= cfg.task.max_steps * cfg.vehicle.dt - 1e-6
        truncated = out_of_time & ~terminated
        return reward, terminated, truncated, collision, success

    def _move_obstacles(self, dt: float | np.ndarray) -> None:
        a = self.cfg.arena
        cyl = self.cyl
        cyl[:, :, 0:2] += cyl[:, :, 3:5] * np.float32(dt)
        # bounce off the walls; parked slots have zero velocity and never move
        for axis, size in ((0, a.size_x), (1, a.size_y)):
            p, vel, r = cyl[:, :, axis], cyl[:, :, 3 + axis], cyl[:, :, 2]
            out = ((p - r < 0) & (vel < 0)) | ((p + r > size) & (vel > 0))
            vel[out] = -vel[out]

    def collided(self) -> np.ndarray:
        rv = self.cfg.vehicle.radius
        x, y = self.pos[:, 0:1], self.pos[:, 1:2]
        hit = self.out_of_bounds()
        cyl = self.cyl
        d2 = (cyl[:, :, 0] - x) ** 2 + (cyl[:, :, 1] - y) ** 2
        hit |= np.any(d2 < (cyl[:, :, 2] + rv) ** 2, axis=1)
        box = self.box
        dx = np.maximum(np.maximum(box[:, :, 0] - x, 0.0), x - box[:, :, 2])
        dy = np.maximum(np.maximum(box[:, :, 1] - y, 0.0), y - box[:, :, 3])
        hit |= np.any(dx * dx + dy * dy < rv * rv, axis=1)
        return hit

    def out_of_bounds(self) -> np.ndarray:
        """True where the vehicle touches a wall, the floor or the ceiling."""
        cfg = self.cfg
        rv = cfg.vehicle.radius
        x, y, z = self.pos[:, 0], self.pos[:, 1], self.pos[:, 2]
        hit = (x < rv) | (x > cfg.arena.size_x - rv)
        hit |= (y < rv) | (y > cfg.arena.size_y - rv)
        hit |= (z < rv) | (z > cfg.arena.ceiling - rv)
        return hit

    def info(self, i: int, collision: bool, success: bool) -> dict:
        """The Gymnasium ``info`` of env ``i`` (see NavEnv's docstring)."""
        return {
            "is_success": success,
            "collision": collision,
            "distance_to_goal": float(self.prev_dist[i]),
            "start_distance": float(self.start_dist[i]),
            "path_length": float(self.path_length[i]),
            "steps": int(self.steps[i]),
            "flight_time": float(self.flight_time[i]),
            "zone": int(self.zone[i]),
        }

    # ------------------------------------------------------------------ sensing
    def observe(self, idx: np.ndarray | slice = slice(None), depth: np.ndarray | None = None) -> np.ndarray:
        """Flat float32 observations for the envs in ``idx``: depth image rows, then 8 state features.

        ``depth`` (n, H, W), normalised planar depth from another simulator (the AirSim backend),
        replaces the ray-cast image; the level's camera noise is applied to it as to the ray-cast one.
        """
        if depth is None:
            depth = self.depth(idx)
        else:
            depth = np.array(depth, dtype=np.float32)  # a copy: the noise is applied in place
            cam = self.cfg.camera
            if cam.noise_std > 0 or cam.dropout > 0:
                self._corrupt(depth, idx)
        n = depth.shape[0]
        out = np.empty((n, self.cfg.obs_dim), dtype=np.float32)
        out[:, : depth[0].size] = depth.reshape(n, -1)  # copies out of the reused buffer
        out[:, depth[0].size :] = self.state_features(idx)
        return out

    def state_features(self, idx: np.ndarray | slice = slice(None)) -> np.ndarray:
        v = self.cfg.vehicle
        pos, yaw, vel = self.pos[idx], self.yaw[idx], self.vel[idx]
        rel = self.goal[idx] - pos
        dist = np.linalg.norm(rel, axis=1)
        bearing = np.arctan2(rel[:, 1], rel[:, 0]) - yaw
        c, s = np.cos(yaw), np.sin(yaw)
        feats = np.empty((len(yaw), N_STATE_FEATURES), dtype=np.float32)
        feats[:, 0] = np.minimum(dist / self.dist_scale, 1.0)
        feats[:, 1] = np.sin(bearing)
        feats[:, 2] = np.cos(bearing)
        feats[:, 3] = np.clip((c * vel[:, 0] + s * vel[:, 1]) / v.max_speed, -1, 1)
        feats[:, 4] = np.clip((-s * vel[:, 0] + c * vel[:, 1]) / v.max_speed, -1, 1)
        feats[:, 5] = np.clip(vel[:, 2] / v.max_speed, -1, 1)
        feats[:, 6] = np.clip(self.yaw_rate[idx] / v.max_yaw_rate, -1, 1)
        feats[:, 7] = np.clip(pos[:, 2] / self.cfg.arena.ceiling, 0, 1)
        return feats

    def depth(self, idx: np.ndarray | slice = slice(None)) -> np.ndarray:
        """Normalised planar depth images (n, H, W) in [0, 1].

        For the whole batch the result lives in a reused buffer: copy it before the next call.
        """
        cam, a = self.cfg.camera, self.cfg.arena
        ox = self.pos[idx, 0].astype(np.float32)
        oy = self.pos[idx, 1].astype(np.float32)
        z = self.pos[idx, 2].astype(np.float32)
        ws = self._workspace(len(ox))
        ang = self.yaw[idx].astype(np.float32)[:, None] + self.col_angle[None, :]
        dx, dy = np.cos(ang), np.sin(ang)
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            t = self._cast(ox, oy, dx, dy, self.cyl[idx], self.box[idx], ws)
            planar = t * self.col_cos  # along-ray distance -> distance along the optical axis
            # floor (rows below the horizon) and ceiling (rows above), per env and row
            surf = np.where(
                self.row_tan > 0, z[:, None] / self.row_tan, (np.float32(a.ceiling) - z)[:, None] / -self.row_tan
            )
        depth = np.minimum(planar[:, None, :], surf[:, :, None], out=ws.depth)
        # clip both ends: a vehicle stepped on past a wall after its episode ended sees negative ranges
        np.clip(depth, np.float32(0.0), np.float32(cam.max_range), out=depth)
        depth *= np.float32(1.0 / cam.max_range)
        if cam.noise_std > 0 or cam.dropout > 0:
            self._corrupt(depth, idx)
        return depth

    def _workspace(self, n: int) -> _Workspace:
        # Reused buffers for the full batch: fresh large temporaries each step made glibc return
        # and re-fault their pages (a third of the step time once the heap had grown).
        if n == self.n:
            if self._ws is None:
                self._ws = _Workspace(n, self.cfg, self.cyl.shape[1], self.box.shape[1])
            return self._ws
        return _Workspace(n, self.cfg, self.cyl.shape[1], self.box.shape[1])

    def _cast(self, ox, oy, dx, dy, cyl, box, ws: _Workspace) -> np.ndarray:
        """Distance along each (env, column) ray to the first wall, cylinder or box: (n, C)."""
        a = self.cfg.arena
        inv_x, inv_y = 1.0 / dx, 1.0 / dy
        ox2, oy2 = ox[:, None], oy[:, None]
        # walls: the arena is a box seen from inside, so take the exit distance
        t = np.minimum(
            np.maximum((a.size_x - ox2) * inv_x, -ox2 * inv_x), np.maximum((a.size_y - oy2) * inv_y, -oy2 * inv_y)
        )
        if cyl.shape[1]:
            rx = (cyl[:, :, 0] - ox2)[:, None, :]
            ry = (cyl[:, :, 1] - oy2)[:, None, :]
            cc = rx * rx + ry * ry - (cyl[:, :, 2] ** 2)[:, None, :]
            b, hit, miss = ws.cb, ws.ct, ws.cm
            np.multiply(dx[:, :, None], rx, out=b)
            np.multiply(dy[:, :, None], ry, out=hit)
            b += hit
            np.multiply(b, b, out=hit)
            hit -= cc
            np.sqrt(hit, out=hit)
            np.subtract(b, hit, out=hit)  # NaN where the ray misses; <= 0 when behind
            np.greater(hit, 0, out=miss)
            np.logical_not(miss, out=miss)
            np.copyto(hit, INF32, where=miss)
            np.minimum(t, hit.min(axis=2), out=t)
        if box.shape[1]:
            ix, iy = inv_x[:, :, None], inv_y[:, :, None]
            lo_x, hi_x, lo_y, hi_y = ws.b1, ws.b2, ws.b3, ws.b4
            np.multiply((box[:, :, 0] - ox2)[:, None, :], ix, out=lo_x)
            np.multiply((box[:, :, 2] - ox2)[:, None, :], ix, out=hi_x)
            np.multiply((box[:, :, 1] - oy2)[:, None, :], iy, out=lo_y)
            np.multiply((box[:, :, 3] - oy2)[:, None, :], iy, out=hi_y)
            near, far = ws.b5, lo_x
            np.minimum(lo_x, hi_x, out=near)
            np.maximum(lo_x, hi_x, out=far)
            np.maximum(near, np.minimum(lo_y, hi_y, out=hi_x), out=near)
            np.minimum(far, np.maximum(lo_y, hi_y, out=lo_y), out=far)
            ok, in_front = ws.bm1, ws.bm2
            np.less_equal(near, far, out=ok)
            np.greater(near, 0, out=in_front)
            ok &= in_front
            np.logical_not(ok, out=ok)
            np.copyto(near, INF32, where=ok)
            np.minimum(t, near.min(axis=2), out=t)
        return t

    def _corrupt(self, depth: np.ndarray, idx) -> None:
        """Depth noise and dropout from a counter-based hash of (episode key, step, pixel), so the
        noise is the same whichever batch an episode runs in."""
        cam = self.cfg.camera
        n = depth.shape[0]
        flat = depth.reshape(n, -1)
        key = self.noise_key[idx].astype(np.uint32)[:, None]
        step = self.steps[idx].astype(np.uint32)[:, None]
        u1 = _hash_uniform(key, step, self.pixel_index, 0x68E31DA4)
        if cam.noise_std > 0:
            u2 = _hash_uniform(key, step, self.pixel_index, 0xB5297A4D)
            gauss = np.sqrt(-2.0 * np.log(u2)) * np.cos(np.float32(2 * math.pi) * u1)
            flat += np.float32(cam.noise_std) * gauss
            np.clip(flat, 0.0, 1.0, out=flat)
        if cam.dropout > 0:
            u3 = _hash_uniform(key, step, self.pixel_index, 0x1B56C4E9)
            flat[u3 < cam.dropout] = 0.0


def _hash_uniform(key: np.ndarray, step: np.ndarray, pixel: np.ndarray, salt: int) -> np.ndarray:
    """Uniform floats in (0, 1] from a murmur3-style mix of three counters (uint32 arithmetic)."""
    h = (
        (key * np.uint32(0x9E3779B1))
        ^ (step * np.uint32(0x85EBCA77))
        ^ (pixel * np.uint32(0xC2B2AE3D))
        ^ np.uint32(salt)
    )
    h ^= h >> np.uint32(16)
    h *= np.uint32(0x85EBCA6B)
    h ^= h >> np.uint32(13)
    h *= np.uint32(0xC2B2AE35)
    h ^= h >> np.uint32(16)
    return ((h >> np.uint32(8)).astype(np.float32) + np.float32(1.0)) * np.float32(1.0 / (1 << 24))


class _Workspace:
    """Scratch arrays for one batch size: ray/obstacle products and the depth image."""

    def __init__(self, n: int, cfg: NavConfig, kc: int, kb: int):
        w, h = cfg.camera.width, cfg.camera.height
        self.cb, self.ct = (np.empty((n, w, kc), np.float32) for _ in range(2))
        self.cm = np.empty((n, w, kc), bool)
        self.b1, self.b2, self.b3, self.b4, self.b5 = (np.empty((n, w, kb), np.float32) for _ in range(5))
        self.bm1, self.bm2 = (np.empty((n, w, kb), bool) for _ in range(2))
        self.depth = np.empty((n, h, w), np.float32)
