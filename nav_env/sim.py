"""Batched 2.5D multirotor simulator: N independent episodes stepped together in numpy.

Obstacles are vertical prisms from floor to ceiling (cylinders and axis-aligned boxes), so one
horizontal ray per image column gives the obstacle depth for the whole column; floor and ceiling add
a per-row term. Every array has the batch as its first axis and there is no Python loop over envs in
``step`` or ``observe``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from nav_env.arena import Episode, slot_counts
from nav_env.config import ATTITUDE_SCALE_RAD, BODY_RATE_SCALE_RAD_S, N_STATE_FEATURES, NavConfig


class DrawnPhysics(Protocol):
    """What a simulator drew for each env's episode (nav_env.dynamics.randomize.EpisodePhysics)."""

    def record(self, i: int) -> dict[str, float]: ...

    def arrays(self) -> dict[str, np.ndarray]: ...


# a step's outcome per env: reward, terminated, truncated, collision, success (each (N,))
Scored = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]

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
        # roll, pitch (rad) and roll and pitch rates (rad/s) of a vehicle flown elsewhere (place_vehicle); the
        # kinematic vehicle flies level and leaves them at zero
        self.roll, self.pitch = np.zeros(n), np.zeros(n)
        self.roll_rate, self.pitch_rate = np.zeros(n), np.zeros(n)
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
            self.roll[i] = self.pitch[i] = self.roll_rate[i] = self.pitch_rate[i] = 0.0
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
    def step(self, cmd: np.ndarray, delay: np.ndarray | None = None, period: np.ndarray | None = None) -> Scored:
        """Advance every env by one control period under body-frame setpoints ``cmd`` (N, 4).

        ``delay`` (N,) seconds: when each env's ``cmd`` reaches its flight controller, counted from the
        start of the period (the observation it answers). Until then the vehicle follows the setpoint
        the controller holds; a delay of a whole period or more lands the command in a later period.
        ``period`` (N,) seconds: each env's period (default ``vehicle.dt``). Without either, or with
        zero delays, fixed periods and nothing in flight, this is the lockstep step, bit for bit.

        Returns reward, terminated, truncated, collision, success (arrays of length N).
        """
        if delay is None and period is None or self.is_lockstep(delay, period):
            return self._lockstep_step(cmd)
        dt = self.cfg.vehicle.dt
        delay = np.zeros(self.n) if delay is None else np.broadcast_to(np.asarray(delay, dtype=np.float64), (self.n,))
        period = np.full(self.n, dt) if period is None else np.broadcast_to(np.asarray(period, np.float64), (self.n,))
        segments, setpoints = self.setpoint_schedule(np.asarray(cmd, dtype=np.float64), delay, period)
        moved = np.zeros((self.n, 3))
        for k in range(segments.shape[0]):
            moved += self._follow(setpoints[k], segments[k])
        self.track(moved, period)
        if self.has_moving:
            self.move_obstacles(period.astype(np.float32)[:, None, None])
        return self.score(self.collided(), period / dt)

    def is_lockstep(self, delay: np.ndarray | None, period: np.ndarray | None) -> bool:
        """Whether a step with ``delay`` and ``period`` (as :meth:`step` takes them; None: zero delays, periods
        of ``vehicle.dt``) is the lockstep step: every period ``vehicle.dt``, no delay and no command in flight.
        Then each env's setpoint is ``cmd`` for the whole period and :meth:`setpoint_schedule` is not needed."""
        return (
            (period is None or bool(np.all(np.asarray(period) == self.cfg.vehicle.dt)))
            and (delay is None or not np.any(delay))
            and not any(self.in_flight)
        )

    def _lockstep_step(self, cmd: np.ndarray) -> Scored:
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
            self.move_obstacles(dt)
        return self.score(self.collided())

    def setpoint_schedule(
        self, cmd: np.ndarray, delay: np.ndarray, period: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """The delayed control link over one period: send ``cmd`` (N, 4), which reaches each env's flight
        controller ``delay`` (N,) seconds into the period, and return the period as segments: (K, N) durations
        and (K, N, 4) setpoints followed during them, K the most segments any env has (shorter envs padded with
        zero-length segments; each env's durations add up to its ``period`` (N,)). Commands landing in this
        period switch the setpoint in landing order (ties: send order); later ones stay in ``in_flight``, and
        ``held`` becomes the setpoint held at the period's end. Call it once per period: it advances the link."""
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

    def place_vehicle(
        self,
        i: int,
        pos: np.ndarray | None = None,
        vel: np.ndarray | None = None,
        yaw: float | None = None,
        yaw_rate: float | None = None,
        attitude: tuple[float, float, float, float] | None = None,
    ) -> None:
        """Set env ``i``'s vehicle state to what a vehicle flown elsewhere reports (an autopilot's telemetry), in
        the arena frame: position (3,) m, world-frame velocity (3,) m/s, yaw rad (counterclockwise from +x),
        yaw rate rad/s and ``attitude`` (roll, pitch rad, roll rate, pitch rate rad/s; body frame x forward, y left,
        z up: a roll to the right and a nose-down pitch positive); None leaves that part as it is. The camera, the
        state features, collisions and :meth:`score` read the state from here. It counts no step: :meth:`track`
        does that."""
        if pos is not None:
            self.pos[i] = pos
        if vel is not None:
            self.vel[i] = vel
        if yaw is not None:
            self.yaw[i] = yaw
        if yaw_rate is not None:
            self.yaw_rate[i] = yaw_rate
        if attitude is not None:
            self.roll[i], self.pitch[i], self.roll_rate[i], self.pitch_rate[i] = attitude

    def score(self, collision: np.ndarray, step_share: np.ndarray | float = 1.0) -> Scored:
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

    def move_obstacles(self, dt: float | np.floating | np.ndarray) -> None:
        """Move every cylinder on by its velocity for ``dt`` seconds (a scalar, or (N, 1, 1) per env), in
        float32, and reverse a velocity component where the cylinder reaches past a wall while moving toward it.
        Parked slots and static cylinders have zero velocity and stay (a -0.0 coordinate becomes +0.0), so
        callers skip the call when ``has_moving`` is False. A subclass that keeps its own copy of the obstacles
        (the MuJoCo world) overrides it to follow them."""
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
        info: dict[str, Any] = {
            "is_success": success,
            "collision": collision,
            "distance_to_goal": float(self.prev_dist[i]),
            "start_distance": float(self.start_dist[i]),
            "path_length": float(self.path_length[i]),
            "steps": int(self.steps[i]),
            "flight_time": float(self.flight_time[i]),
            "zone": int(self.zone[i]),
        }
        physics = self.episode_physics()
        if physics is not None:
            info["physics"] = physics.record(i)
        tilt = self.episode_tilt()
        if tilt is not None:
            info["tilt"] = {k: float(v[i]) for k, v in tilt.items()}
        return info

    def episode_physics(self) -> DrawnPhysics | None:
        """The physics each env's episode drew (a simulator whose dynamics randomize; None: nothing drawn)."""
        return None

    def episode_tilt(self) -> dict[str, np.ndarray] | None:
        """Each env's airframe tilt this episode, ``max_deg`` and ``mean_deg`` arrays (a simulator whose vehicle
        tilts; None: the point mass flies level)."""
        return None

    # ------------------------------------------------------------------ sensing
    def observe(self, idx: np.ndarray | slice = slice(None), depth: np.ndarray | None = None) -> np.ndarray:
        """Flat float32 observations for the envs in ``idx``: depth image rows, then 8 state features (then the
        attitude features with ``observation.attitude``).

        ``depth`` (n, H, W), normalised planar depth from another simulator (the AirSim backend),
        replaces the ray-cast image; the level's camera noise is applied to it as to the ray-cast one.
        """
        if depth is None:
            depth = self.depth(idx)
        else:
            depth = np.array(depth, dtype=np.float32)  # a copy: the noise is applied in place
            cam = self.cfg.camera
            if cam.noise_std > 0 or cam.dropout > 0:
                self.add_camera_noise(depth, idx)
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
        feats = np.empty((len(yaw), self.cfg.n_state), dtype=np.float32)
        feats[:, 0] = np.minimum(dist / self.dist_scale, 1.0)
        feats[:, 1] = np.sin(bearing)
        feats[:, 2] = np.cos(bearing)
        feats[:, 3] = np.clip((c * vel[:, 0] + s * vel[:, 1]) / v.max_speed, -1, 1)
        feats[:, 4] = np.clip((-s * vel[:, 0] + c * vel[:, 1]) / v.max_speed, -1, 1)
        feats[:, 5] = np.clip(vel[:, 2] / v.max_speed, -1, 1)
        feats[:, 6] = np.clip(self.yaw_rate[idx] / v.max_yaw_rate, -1, 1)
        feats[:, 7] = np.clip(pos[:, 2] / self.cfg.arena.ceiling, 0, 1)
        if self.cfg.observation.attitude:
            roll, pitch, rates = self.attitude(idx)
            k = N_STATE_FEATURES
            feats[:, k] = np.clip(roll / ATTITUDE_SCALE_RAD, -1, 1)
            feats[:, k + 1] = np.clip(pitch / ATTITUDE_SCALE_RAD, -1, 1)
            feats[:, k + 2 : k + 5] = np.clip(rates / BODY_RATE_SCALE_RAD_S, -1, 1)
        return feats

    def attitude(self, idx: np.ndarray | slice = slice(None)) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Roll and pitch (rad) and body rates p, q, r (rad/s, (n, 3)) of the envs in ``idx``: the kinematic vehicle
        flies level, turning about its vertical axis only; a vehicle flown elsewhere as :meth:`place_vehicle` set it."""
        rates = np.stack([self.roll_rate[idx], self.pitch_rate[idx], self.yaw_rate[idx]], axis=-1)
        return np.array(self.roll[idx], dtype=np.float64), np.array(self.pitch[idx], dtype=np.float64), rates

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
            self.add_camera_noise(depth, idx)
        return depth

    def _workspace(self, n: int) -> _Workspace:
        # Reused buffers for the full batch: fresh large temporaries each step made glibc return
        # and re-fault their pages (a third of the step time once the heap had grown).
        if n == self.n:
            if self._ws is None:
                self._ws = _Workspace(n, self.cfg, self.cyl.shape[1], self.box.shape[1])
            return self._ws
        return _Workspace(n, self.cfg, self.cyl.shape[1], self.box.shape[1])

    def _cast(
        self, ox: np.ndarray, oy: np.ndarray, dx: np.ndarray, dy: np.ndarray, cyl: np.ndarray, box: np.ndarray,
        ws: _Workspace,
    ) -> np.ndarray:  # fmt: skip
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

    def add_camera_noise(self, depth: np.ndarray, idx: np.ndarray | slice, noise_std: np.ndarray | None = None) -> None:
        """The level's camera noise (``camera.noise_std``) and dropout (``camera.dropout``), in place, on the
        normalised depth images ``depth`` (n, H, W) of the envs ``idx``: a counter-based hash of (episode key,
        step, pixel), so the noise is the same whichever batch an episode runs in and whichever simulator cast
        the image. ``noise_std`` (n,): each env's own standard deviation instead of the level's (an episode's
        drawn physics). Callers skip it when there is neither noise nor dropout."""
        cam = self.cfg.camera
        n = depth.shape[0]
        flat = depth.reshape(n, -1)
        key = self.noise_key[idx].astype(np.uint32)[:, None]
        step = self.steps[idx].astype(np.uint32)[:, None]
        u1 = hash_uniform(key, step, self.pixel_index, 0x68E31DA4)
        if noise_std is not None and noise_std.any() or noise_std is None and cam.noise_std > 0:
            u2 = hash_uniform(key, step, self.pixel_index, 0xB5297A4D)
            gauss = np.sqrt(-2.0 * np.log(u2)) * np.cos(np.float32(2 * math.pi) * u1)
            flat += (np.float32(cam.noise_std) if noise_std is None else noise_std.astype(np.float32)[:, None]) * gauss
            np.clip(flat, 0.0, 1.0, out=flat)
        if cam.dropout > 0:
            u3 = hash_uniform(key, step, self.pixel_index, 0x1B56C4E9)
            flat[u3 < cam.dropout] = 0.0


def hash_uniform(key: np.ndarray, step: np.ndarray, pixel: np.ndarray, salt: int) -> np.ndarray:
    """Uniform float32 numbers in (0, 1] from a murmur3-style mix of three uint32 counters and a ``salt``:
    ``key``, ``step`` and ``pixel`` broadcast against each other (uint32 arrays) and the result has their shape.
    The same inputs give the same numbers on every machine and in every batch; a different salt gives an
    independent stream (the camera noise and the MuJoCo world's wind each use their own)."""
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


class SingleSim(BatchSim):
    """:class:`BatchSim` for one env (``n = 1``) with a fast path for the single env's step and observation.

    ``NavEnv`` steps one vehicle per call, where the batch code's ~100 numpy calls on arrays of one row
    cost far more than their arithmetic. Here the float64 state is advanced in Python floats, and the
    camera is ray cast in about 30 numpy calls on arrays laid out per episode: every wall, box and
    cylinder term of every column in a few flat rows, so that one call does one operation for all of
    them. Every result equals the batch code's bit for bit (``tests/nav_env/
    test_single_env_speed_equivalence.py`` compares them): the same IEEE operations on the same
    values in the same order, float32 where the batch code works in float32, and numpy itself, on
    arrays shaped as in the batch code, wherever a library routine decides the bits (trigonometry,
    logarithms). The state lives in the batch arrays as before, so the batch methods (the latency
    path, the renderer) work on the same env; obstacles are read in by :meth:`load`.

    Two float64 sums of squares follow numpy's own order: ``np.linalg.norm(axis=1)`` adds the three
    squares left to right; ``np.einsum`` (the path length) may order them by SIMD lane, so its Python
    form is used only for a step without vertical motion and only when a probe at import finds it
    equal to ``np.einsum`` on this numpy (else ``np.einsum`` itself is called), and likewise the norm.
    """

    def __init__(self, cfg: NavConfig):
        super().__init__(cfg, 1)
        self._batch_keys = frozenset(self.__dict__)  # the batch state; the rest is derived from it
        self._build()

    # Many attributes below are views of others (and of self.cyl): a copy or a pickle carries the batch state
    # only and derives the rest again, so that the views stay views.
    def __getstate__(self) -> dict:
        return {k: self.__dict__[k] for k in (*self._batch_keys, "_batch_keys")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._build()
        self._prepare_episode()

    def _build(self) -> None:
        """Constants and scratch arrays of the fast path, for the configuration and the batch arrays."""
        cfg = self.cfg
        c, v, a, r = cfg.camera, cfg.vehicle, cfg.arena, cfg.reward
        w, h = c.width, c.height
        kc, kb = self.cyl.shape[1], self.box.shape[1]
        self._kc, self._kb, self._w, self._hw, self._shape = kc, kb, w, w * h, (h, w)
        self._obs_dim = cfg.obs_dim
        self._dt, self._rv, self._dist_scale = v.dt, v.radius, self.dist_scale
        self._bounds = (v.radius, a.size_x - v.radius, a.size_y - v.radius, a.ceiling - v.radius)
        self._reward = (float(r.step), float(r.progress), float(r.success), float(r.collision))
        self._success_radius = cfg.task.success_radius
        self._time_limit = cfg.task.max_steps * v.dt - 1e-6  # as in BatchSim.score
        self._max_speed, self._max_yaw_rate, self._ceiling = v.max_speed, v.max_yaw_rate, a.ceiling
        self._noise = c.noise_std > 0 or c.dropout > 0
        self._range_lo, self._range_hi = np.float32(0.0), np.float32(c.max_range)
        self._range_scale = np.float32(1.0 / c.max_range)

        # float64 scratch shaped as the batch code's operands of numpy's transcendental functions
        self._cos_yaw, self._sin_yaw = np.empty(1), np.empty(1)
        self._trig_yaw: float | None = None  # the yaw _cos_yaw and _sin_yaw hold
        self._rel = np.empty((1, 3))  # goal - pos; arctan2 reads its strided columns, as state_features
        self._rel_y, self._rel_x = self._rel[:, 1], self._rel[:, 0]
        self._bearing, self._b_sin, self._b_cos = np.empty(1), np.empty(1), np.empty(1)
        self._delta = np.empty((1, 3))

        # The camera: every term of BatchSim._cast as one float32 value per (obstacle, image column), in
        # blocks laid out so that each operation below is one numpy call on contiguous memory:
        #   [far y | far x | near y | near x | cx | cy],  far = [wall (size) | box lo, per box] and
        #   near = [wall (-0.0, as -0.0 - o is -o exactly) | box hi, per box],
        # every value repeated per column. Geometry minus the vehicle's position (five runs of x or y) gives
        # each "coordinate - o"; times the per-yaw factors [1/dy | 1/dx | 1/dy | 1/dx | dx | dy] it gives
        # the walls' and the slabs' ends and the cylinders' dx * rx, dy * ry.
        kcw, half = kc * w, (1 + kb) * w
        n = 4 * half + 2 * kcw
        self._kcw, self._half, self._n = kcw, half, n
        self._geometry = np.zeros(n, np.float32)
        g = self._geometry
        g[:w], g[half : half + w], g[2 * half : 2 * half + w], g[3 * half : 3 * half + w] = (
            a.size_y,
            a.size_x,
            -0.0,
            -0.0,
        )
        self._box_blocks = g[: 4 * half].reshape(4, 1 + kb, w)[:, 1:, :]
        self._cyl_block = g[4 * half :].reshape(2, kc, w)  # centres, repeated per column
        self._cyl_xy = self.cyl[0, :, 0:2].T[:, :, None]  # a view: moving cylinders are read as they move
        self._moving = False  # whether this episode's cylinders move (their block is refreshed per observation)
        self._position = np.empty(n, np.float32)
        pos = self._position
        self._pos_runs_x = (pos[half : 2 * half], pos[3 * half : 4 * half + kcw])
        self._pos_runs_y = (pos[:half], pos[2 * half : 3 * half], pos[4 * half + kcw :])
        # the offsets, then each cylinder's b = dx * rx + dy * ry (so that rx, ry and b are squared in one call)
        self._offset = np.empty(n + kcw, np.float32)
        self._offset_all = self._offset[:n]
        # per-yaw ray data: the columns' directions, their inverses, and the factors above
        self._yaw_rep = np.empty(w, np.float32)  # the yaw once per column
        self._ray_yaw: float | None = None  # the float32 yaw the ray data were computed for
        self._ang = np.empty(w, np.float32)
        self._ray = np.empty((6, w), np.float32)  # 1/dy, 1/dx, 1/dy, 1/dx, dx (cos), dy (sin)
        self._ray_dir = self._ray[4:]
        self._ray_inv = self._ray[:4].reshape(2, 2, w)
        self._ones = np.ones(w, np.float32)
        self._ray_counts = [1 + kb] * 4 + [kc] * 2
        self._factor = np.empty(n, np.float32)
        self._scaled = np.empty(n, np.float32)  # offsets times factors
        self._scaled_far, self._scaled_near = self._scaled[: 2 * half], self._scaled[2 * half : 4 * half]
        # walls and boxes: max and min of far and near
        self._max = np.empty(2 * half, np.float32)  # [wall y, box far y | wall x, box far x]
        self._min = np.empty(2 * half, np.float32)  # [(unused), box near y | (unused), box near x]
        self._wall_y, self._wall_x = self._max[:w], self._max[half : half + w]
        self._far_y, self._far_x = self._max[w:half], self._max[half + w :]
        self._near_y, self._near_x = self._min[w:half], self._min[half + w :]
        self._box_far = np.empty(kb * w, np.float32)
        self._box_ok = np.empty(kb * w, bool)
        # cylinders
        self._cyl_prod_x, self._cyl_prod_y = self._scaled[4 * half : 4 * half + kcw], self._scaled[4 * half + kcw :]
        self._cyl_b = self._offset[n:]
        self._cyl_terms = self._offset[4 * half :]  # rx, ry, b
        self._cyl_sq = np.empty(3 * kcw, np.float32)  # rx * rx, ry * ry, b * b
        self._cyl_sq_x, self._cyl_sq_y, self._cyl_sq_b = (
            self._cyl_sq[:kcw],
            self._cyl_sq[kcw : 2 * kcw],
            self._cyl_sq[2 * kcw :],
        )
        self._cyl_c = np.empty(kcw, np.float32)
        self._cyl_r2 = np.empty(kcw, np.float32)  # radius ** 2, repeated per column
        self._cyl_r2_blocks = self._cyl_r2.reshape(kc, w)
        # hit distance per (row, column): row 0 the walls, then each cylinder, then each box; valid where
        # in front (misses are masked to infinity, as BatchSim._cast's copyto)
        self._hit = np.empty((1 + kc + kb, w), np.float32)
        self._hit_walls = self._hit[0]
        self._hit_c, self._hit_b = self._hit[1 : 1 + kc].reshape(-1), self._hit[1 + kc :].reshape(-1)
        self._hit_obstacles = self._hit[1:]
        self._valid = np.ones((1 + kc + kb, w), bool)
        self._valid_obstacles, self._valid_b = self._valid[1:], self._valid[1 + kc :].reshape(-1)
        self._zero = np.zeros((kc + kb, w), np.float32)
        self._inf = np.full((1 + kc + kb, w), np.inf, np.float32)
        # the arrays each part of _cast_one uses, read in one attribute access
        self._cast_walls = (
            self._offset_all,
            self._scaled,
            self._scaled_far,
            self._scaled_near,
            self._max,
            self._wall_x,
            self._wall_y,
            self._hit_walls,
        )
        self._cast_cylinders = (
            self._cyl_prod_x,
            self._cyl_prod_y,
            self._cyl_b,
            self._cyl_terms,
            self._cyl_sq,
            self._cyl_sq_x,
            self._cyl_sq_y,
            self._cyl_sq_b,
            self._cyl_c,
            self._cyl_r2,
            self._hit_c,
        )
        self._cast_boxes = (
            self._min,
            self._near_x,
            self._near_y,
            self._far_x,
            self._far_y,
            self._hit_b,
            self._box_far,
            self._box_ok,
            self._valid_b,
        )
        self._t = np.empty(w, np.float32)
        self._planar = np.empty(w, np.float32)
        self._z32 = np.empty(1, np.float32)
        self._surf_z: float | None = None  # the float32 altitude _surf was computed for
        self._surf = np.empty((h, 1), np.float32)
        self._surf_scaled = np.empty((h, 1), np.float32)  # clip(surf) * scale
        self._surf_plain = False  # whether _surf holds no -0.0 and no NaN

        # per-episode collision data (see load): the static obstacles that can touch a vehicle in each cell
        # of a grid over the arena, as cylinders (x, y, threshold) and boxes (x0, y0, x1, y1); the moving
        # cylinders (slots, thresholds, and their rows of self.cyl when those are contiguous)
        self._cells_x = max(1, math.ceil(a.size_x / _GRID_CELL))
        self._cells_y = max(1, math.ceil(a.size_y / _GRID_CELL))
        self._cell_cyl: dict[int, list] = {}
        self._cell_box: dict[int, list] = {}
        self._cyl_moving = np.zeros(0, dtype=np.intp)
        self._cyl_moving_thr: list[float] = []
        self._moving_rows: np.ndarray | None = None
        self._dt32 = np.float32(v.dt)
        self._size32 = (float(np.float32(a.size_x)), float(np.float32(a.size_y)))

        # camera noise: the per-pixel term of the hash is the same every step
        self._salts = [s for s, on in ((0x68E31DA4, c.noise_std > 0), (0xB5297A4D, c.noise_std > 0)) if on] + (
            [0x1B56C4E9] if c.dropout > 0 else []
        )
        self._pixel_hash = self.pixel_index * np.uint32(0xC2B2AE3D)
        ns = len(self._salts)
        self._salt_key = np.empty((ns, 1), np.uint32)
        self._hash = np.empty((ns, w * h), np.uint32)
        self._hash_tmp = np.empty((ns, w * h), np.uint32)
        self._uniform = np.empty((ns, w * h), np.float32)
        self._gauss = np.empty(w * h, np.float32)
        self._gauss2 = np.empty(w * h, np.float32)
        self._dropped = np.empty(w * h, bool)

    # ------------------------------------------------------------------ episodes
    def load(self, idx: Sequence[int] | np.ndarray, episodes: Sequence[Episode]) -> None:
        super().load(idx, episodes)
        self._prepare_episode()

    def _prepare_episode(self) -> None:
        """The fast path's per-episode data, from the obstacles in self.cyl and self.box."""
        rv = self._rv
        cyl, box = self.cyl[0], self.box[0]
        # ray casting: the episode's obstacle coordinates, each repeated once per image column
        self._box_blocks[...] = box[:, [1, 0, 3, 2]].T[:, :, None]  # far y, far x, near y, near x
        self._cyl_block[...] = self._cyl_xy
        self._cyl_r2_blocks[...] = (cyl[:, 2] ** 2)[:, None]  # BatchSim._cast's (cyl[:, :, 2] ** 2)
        # collision: BatchSim.collided's thresholds (in float32, as there)
        thr = ((cyl[:, 2] + rv) ** 2).tolist()
        # The slots move_obstacles changes: those with a velocity (a zero one never changes) and, as it adds
        # zero to them, those at a -0.0 coordinate (they become +0.0). None without moving obstacles.
        if self.has_moving:
            xy = cyl[:, 0:2]
            moving = (cyl[:, 3] != 0) | (cyl[:, 4] != 0) | np.any((xy == 0) & np.signbit(xy), axis=1)
            rows = np.flatnonzero(moving)
        else:
            rows = np.zeros(0, dtype=np.intp)
        self._moving = len(rows) > 0
        self._cyl_moving = rows
        self._cyl_moving_thr = [thr[i] for i in rows.tolist()]
        contiguous = not len(rows) or rows[-1] - rows[0] + 1 == len(rows)
        self._moving_rows = self.cyl[0, rows[0] : rows[-1] + 1] if len(rows) and contiguous else None
        # Static obstacles by grid cell: every obstacle that a vehicle in the cell could touch (its box grown
        # by the vehicle's radius and a margin far above any rounding). _collided_one tests only those of the
        # vehicle's cell, once the vehicle is known to be inside the arena; nothing else can be hit there.
        nx, ny, cell, grow = self._cells_x, self._cells_y, _GRID_CELL, rv + 0.1
        moving_slots = set(rows.tolist())
        cells: list[dict[int, list]] = [{}, {}]
        obstacles: list[tuple[int, tuple[float, ...], tuple[float, ...]]] = [
            (0, (x - r, y - r, x + r, y + r), (x, y, t)) for (x, y, r), t in zip(cyl[:, 0:3].tolist(), thr)
        ]
        obstacles = [o for k, o in enumerate(obstacles) if k not in moving_slots]
        obstacles += [(1, (x0, y0, x1, y1), (x0, y0, x1, y1)) for x0, y0, x1, y1 in box.tolist()]
        for kind, (x0, y0, x1, y1), entry in obstacles:
            i0, i1 = max(0, math.floor((x0 - grow) / cell)), min(nx - 1, math.floor((x1 + grow) / cell))
            j0, j1 = max(0, math.floor((y0 - grow) / cell)), min(ny - 1, math.floor((y1 + grow) / cell))
            for i in range(i0, i1 + 1):
                for j in range(j0, j1 + 1):
                    cells[kind].setdefault(i * ny + j, []).append(entry)
        self._cell_cyl, self._cell_box = cells

    # ------------------------------------------------------------------ dynamics
    def step_one(
        self, cmd: np.ndarray, delay: np.ndarray | None = None, period: np.ndarray | None = None
    ) -> tuple[float, bool, bool, bool, bool]:
        """:meth:`BatchSim.step` for the one env with setpoint ``cmd`` (4,): reward, terminated,
        truncated, collision, success as Python scalars. A delayed step takes the batch code."""
        if delay is None and period is None or self.is_lockstep(delay, period):
            return self._lockstep_one(cmd)
        reward, terminated, truncated, collision, success = self.step(cmd[None], delay, period)
        return float(reward[0]), bool(terminated[0]), bool(truncated[0]), bool(collision[0]), bool(success[0])

    def _lockstep_one(self, cmd: np.ndarray) -> tuple[float, bool, bool, bool, bool]:
        """BatchSim._lockstep_step, operation for operation, in Python floats."""
        a, dt = self.alpha, self._dt
        self.held[0] = cmd
        c0, c1, c2, c3 = cmd.tolist()
        yaw_rate = self.yaw_rate.item()
        yaw_rate += a * (c3 - yaw_rate)
        yaw = (self.yaw.item() + yaw_rate * dt + math.pi) % _TWO_PI - math.pi  # np.remainder's result
        self.yaw_rate[0] = yaw_rate
        self.yaw[0] = yaw
        c, s = self._yaw_trig(yaw)
        vx, vy, vz = self.vel[0].tolist()
        vx += a * (c * c0 - s * c1 - vx)
        vy += a * (s * c0 + c * c1 - vy)
        vz += a * (c2 - vz)
        self.vel[0] = vx, vy, vz
        dx, dy, dz = vx * dt, vy * dt, vz * dt
        px, py, pz = self.pos[0].tolist()
        px, py, pz = px + dx, py + dy, pz + dz
        self.pos[0] = px, py, pz
        self.path_length[0] = self.path_length.item() + self._step_length(dx, dy, dz)
        self.steps[0] = self.steps.item() + 1
        self.flight_time[0] = self.flight_time.item() + dt
        moving_xy = self._move_obstacles_one() if self._moving else []
        return self._score_one(px, py, pz, self._collided_one(px, py, pz, moving_xy))

    def _move_obstacles_one(self) -> list[list[float]]:
        """BatchSim.move_obstacles(vehicle.dt) on the moving slots (the others it leaves as they are);
        returns their positions (x, y)."""
        rows = self._moving_rows
        if rows is None:  # moving slots not contiguous (a hand-built scene): the batch code
            self.move_obstacles(self._dt)
            return self.cyl[0, self._cyl_moving, 0:2].tolist()
        rows[:, 0:2] += rows[:, 3:5] * self._dt32
        reach = np.add(rows[:, 0:2], rows[:, 2:3]).tolist()  # p + r, in float32 as there
        xyr, vel = rows[:, 0:3].tolist(), rows[:, 3:5].tolist()
        size_x, size_y = self._size32
        # bounce: p - r < 0 is p < r (a float32 difference has the sign of the exact one); the velocity flips
        for i, ((x, y, r), (vx, vy), (x_r, y_r)) in enumerate(zip(xyr, vel, reach)):
            if (x < r and vx < 0) or (x_r > size_x and vx > 0):
                rows[i, 3] = -vx
            if (y < r and vy < 0) or (y_r > size_y and vy > 0):
                rows[i, 4] = -vy
        return [p[0:2] for p in xyr]

    def _yaw_trig(self, yaw: float) -> tuple[float, float]:
        """cos and sin of the current yaw (self.yaw[0] == yaw), by numpy on the (1,) state array."""
        if yaw != self._trig_yaw or yaw == 0.0:  # a cached 0.0 may be -0.0 and vice versa
            np.cos(self.yaw, out=self._cos_yaw)
            np.sin(self.yaw, out=self._sin_yaw)
            self._trig_yaw = yaw
        return self._cos_yaw.item(), self._sin_yaw.item()

    def _step_length(self, dx: float, dy: float, dz: float) -> float:
        if dz == 0.0 and _EINSUM_PLANAR_IS_PLAIN:
            return math.sqrt(dx * dx + dy * dy)
        d = self._delta
        d[0] = dx, dy, dz
        return math.sqrt(np.einsum("ij,ij->i", d, d).item())

    def _collided_one(self, x: float, y: float, z: float, moving_xy: list[list[float]]) -> bool:
        """BatchSim.collided for the one env (the same comparisons of the same float64 values) given the
        moving cylinders' positions."""
        rv, hi_x, hi_y, hi_z = self._bounds
        if x < rv or x > hi_x or y < rv or y > hi_y or z < rv or z > hi_z:
            return True
        for (cx, cy), thr in zip(moving_xy, self._cyl_moving_thr):
            ex, ey = cx - x, cy - y
            if ex * ex + ey * ey < thr:
                return True
        cell = min(int(x / _GRID_CELL), self._cells_x - 1) * self._cells_y + min(int(y / _GRID_CELL), self._cells_y - 1)
        for cx, cy, thr in self._cell_cyl.get(cell, ()):
            ex, ey = cx - x, cy - y
            if ex * ex + ey * ey < thr:
                return True
        rv2 = rv * rv
        for x0, y0, x1, y1 in self._cell_box.get(cell, ()):
            ex, ey = x0 - x, y0 - y
            ex = ex if ex >= 0.0 else 0.0
            ey = ey if ey >= 0.0 else 0.0
            fx, fy = x - x1, y - y1
            ex = ex if ex >= fx else fx
            ey = ey if ey >= fy else fy
            if ex * ex + ey * ey < rv2:
                return True
        return False

    def _score_one(self, x: float, y: float, z: float, collision: bool) -> tuple[float, bool, bool, bool, bool]:
        """BatchSim.score for the one env (lockstep: a step share of 1)."""
        dist = self._goal_distance(x, y, z)
        success = dist < self._success_radius and not collision
        step, progress, r_success, r_collision = self._reward
        reward = (
            step
            + progress * (self.prev_dist.item() - dist)
            + r_success * (1.0 if success else 0.0)
            + r_collision * (1.0 if collision else 0.0)
        )
        self.prev_dist[0] = dist
        terminated = success or collision
        truncated = self.flight_time.item() >= self._time_limit and not terminated
        return reward, terminated, truncated, collision, success

    def _goal_distance(self, x: float, y: float, z: float) -> float:
        """np.linalg.norm(goal - pos, axis=1)[0]; stores goal - pos in self._rel."""
        gx, gy, gz = self.goal[0].tolist()
        rx, ry, rz = gx - x, gy - y, gz - z
        self._rel[0] = rx, ry, rz
        if _NORM_IS_PLAIN:
            return math.sqrt(rx * rx + ry * ry + rz * rz)
        return float(np.linalg.norm(self._rel, axis=1)[0])

    def info_one(self, collision: bool, success: bool) -> dict:
        """BatchSim.info(0, collision, success)."""
        return {
            "is_success": success,
            "collision": collision,
            "distance_to_goal": self.prev_dist.item(),
            "start_distance": self.start_dist.item(),
            "path_length": self.path_length.item(),
            "steps": self.steps.item(),
            "flight_time": self.flight_time.item(),
            "zone": self.zone.item(),
        }

    # ------------------------------------------------------------------ sensing
    def observe_one(self) -> np.ndarray:
        """BatchSim.observe()[0]: a new flat float32 observation."""
        out = np.empty(self._obs_dim, dtype=np.float32)
        x, y, z = self.pos[0].tolist()
        yaw = self.yaw.item()
        image = out[: self._hw]
        self._depth_one(image.reshape(self._shape), x, y, z, yaw)
        if self._noise:
            self._corrupt_one(image)
        if self.cfg.observation.attitude:  # not the fast path: the batch code's attitude values after the 8
            out[self._hw : self._hw + N_STATE_FEATURES] = self._features_one(x, y, z, yaw)
            out[self._hw + N_STATE_FEATURES :] = self.state_features()[0, N_STATE_FEATURES:]
        else:
            out[self._hw :] = self._features_one(x, y, z, yaw)
        return out

    def _features_one(self, x: float, y: float, z: float, yaw: float) -> tuple[float, ...]:
        """BatchSim.state_features for the one env, as Python floats (rounded to float32 when stored)."""
        dist = self._goal_distance(x, y, z)
        b = self._bearing
        np.arctan2(self._rel_y, self._rel_x, out=b)
        b[0] = b.item() - yaw
        np.sin(b, out=self._b_sin)
        np.cos(b, out=self._b_cos)
        c, s = self._yaw_trig(yaw)
        vx, vy, vz = self.vel[0].tolist()
        ms = self._max_speed
        d = dist / self._dist_scale
        return (
            d if d < 1.0 or d != d else 1.0,  # np.minimum(d, 1.0)
            self._b_sin.item(),
            self._b_cos.item(),
            _clip((c * vx + s * vy) / ms, -1.0, 1.0),
            _clip((-s * vx + c * vy) / ms, -1.0, 1.0),
            _clip(vz / ms, -1.0, 1.0),
            _clip(self.yaw_rate.item() / self._max_yaw_rate, -1.0, 1.0),
            _clip(z / self._ceiling, 0.0, 1.0),
        )

    def _depth_one(self, image: np.ndarray, x: float, y: float, z: float, yaw: float) -> None:
        """BatchSim.depth for the one env, written into ``image`` (H, W)."""
        for run in self._pos_runs_x:
            run.fill(x)  # float64 -> float32, as astype
        for run in self._pos_runs_y:
            run.fill(y)
        self._yaw_rep.fill(yaw)
        self._z32[0] = z
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            yaw32 = self._yaw_rep.item(0)
            if yaw32 != self._ray_yaw or yaw32 == 0.0:  # rays depend on the float32 yaw only (and the sign of 0)
                np.add(self._yaw_rep, self.col_angle, out=self._ang)
                np.cos(self._ang, out=self._ray_dir[0])
                np.sin(self._ang, out=self._ray_dir[1])
                np.divide(self._ones, self._ray_dir[::-1], out=self._ray_inv)  # 1.0 / d: 1/dy, 1/dx, twice
                self._factor = np.repeat(self._ray, self._ray_counts, axis=0).reshape(-1)
                self._ray_yaw = yaw32
            planar = np.multiply(self._cast_one(), self.col_cos, out=self._planar)
            z32 = self._z32.item()
            if z32 != self._surf_z or z32 == 0.0:  # floor and ceiling depend on the float32 altitude only
                zz = self._z32[:, None]
                surf = np.where(
                    self.row_tan > 0, zz / self.row_tan, (np.float32(self.cfg.arena.ceiling) - zz) / -self.row_tan
                )
                self._surf[:, 0] = surf[0]
                self._surf_z = z32
                np.multiply(self._surf.clip(self._range_lo, self._range_hi), self._range_scale, out=self._surf_scaled)
                self._surf_plain = not np.any(np.isnan(surf) | ((surf == 0) & np.signbit(surf)))
        # With the camera strictly inside the arena (x and y in float32), every planar distance is >= +0.0:
        # per axis one wall term is (size - o) or -o, > 0, times 1 / d with |1 / d| >= 1 (so > 0, or +inf),
        # hits are > 0, and the column cosines > 0. Outside or on a wall's line (a zero wall term: -0.0 or
        # NaN possible) the batch order below.
        ox, oy = self._position.item(self._half), self._position.item(0)
        if self._surf_plain and 0.0 < ox < self._size32[0] and 0.0 < oy < self._size32[1]:
            # clip(min(p, q)) * s == min(clip(p) * s, clip(q) * s) bit for bit: clip and the positive scale are
            # non-decreasing, so they keep the minimum, and equal results have equal bits when no -0.0 meets
            # a +0.0: the planar distances hold none (above), the floor and ceiling rows none either (checked
            # when computed), and NaN stays NaN. For p >= +0.0, clip(p, 0, r) is minimum(p, r).
            np.minimum(planar, self._range_hi, out=planar)
            np.multiply(planar, self._range_scale, out=planar)
            np.minimum(planar[None, :], self._surf_scaled, out=image)
            return
        np.minimum(planar[None, :], self._surf, out=image)
        image.clip(self._range_lo, self._range_hi, out=image)
        np.multiply(image, self._range_scale, out=image)

    def _cast_one(self) -> np.ndarray:
        """BatchSim._cast for the one env: distance along each column's ray to the first wall or obstacle.

        The same float32 operations as there, on every (obstacle, column) pair at once: walls
        ``max((size - o) * (1 / d), -o * (1 / d))`` per axis and the nearer axis; cylinders ``b - sqrt(b*b - c)``;
        boxes by slabs; a miss (NaN, behind, or an empty slab) is infinitely far; the nearest of all wins.
        """
        if self._moving:
            self._cyl_block[...] = self._cyl_xy
        (offset, scaled, far, near, mx, wall_x, wall_y, walls) = self._cast_walls
        np.subtract(self._geometry, self._position, out=offset)
        np.multiply(offset, self._factor, out=scaled)
        np.maximum(far, near, out=mx)  # walls: max(far, near) per axis
        np.minimum(wall_x, wall_y, out=walls)
        if not (self._kc or self._kb):
            return walls
        if self._kc:
            (prod_x, prod_y, b, terms, sq, sq_x, sq_y, sq_b, cc, r2, h) = self._cast_cylinders
            np.add(prod_x, prod_y, out=b)  # dx * rx + dy * ry
            np.multiply(terms, terms, out=sq)  # rx * rx, ry * ry, b * b
            np.add(sq_x, sq_y, out=cc)
            np.subtract(cc, r2, out=cc)
            np.subtract(sq_b, cc, out=h)
            np.sqrt(h, out=h)
            np.subtract(b, h, out=h)  # NaN where the ray misses; <= 0 when behind
        if self._kb:
            (mn, near_x, near_y, far_x, far_y, box_near, box_far, box_ok, valid_b) = self._cast_boxes
            np.minimum(far, near, out=mn)  # per axis: min(lo, hi)
            np.maximum(near_x, near_y, out=box_near)
            np.minimum(far_x, far_y, out=box_far)
        hit, valid = self._hit, self._valid
        np.greater(self._hit_obstacles, self._zero, out=self._valid_obstacles)  # in front
        if self._kb:
            np.less_equal(box_near, box_far, out=box_ok)
            np.logical_and(valid_b, box_ok, out=valid_b)
        return np.minimum.reduce(np.where(valid, hit, self._inf), axis=0, out=self._t)

    def _corrupt_one(self, flat: np.ndarray) -> None:
        """BatchSim.add_camera_noise for the one env: the same hash, with its per-pixel term precomputed."""
        cam = self.cfg.camera
        mask = 0xFFFFFFFF
        key, step = self.noise_key.item(), self.steps.item() & mask
        head = ((key * 0x9E3779B1) & mask) ^ ((step * 0x85EBCA77) & mask)
        self._salt_key[:, 0] = [head ^ s for s in self._salts]
        h, tmp, u = self._hash, self._hash_tmp, self._uniform
        np.bitwise_xor(self._pixel_hash, self._salt_key, out=h)
        np.right_shift(h, _U16, out=tmp)
        h ^= tmp
        h *= _MIX1
        np.right_shift(h, _U13, out=tmp)
        h ^= tmp
        h *= _MIX2
        np.right_shift(h, _U16, out=tmp)
        h ^= tmp
        np.right_shift(h, _U8, out=tmp)
        np.copyto(u, tmp, casting="unsafe")
        u += np.float32(1.0)
        u *= np.float32(1.0 / (1 << 24))
        if cam.noise_std > 0:
            g, g2 = self._gauss, self._gauss2
            np.log(u[1], out=g)
            np.multiply(-2.0, g, out=g)
            np.sqrt(g, out=g)
            np.multiply(np.float32(2 * math.pi), u[0], out=g2)
            np.cos(g2, out=g2)
            g *= g2
            np.multiply(np.float32(cam.noise_std), g, out=g)
            flat += g
            np.clip(flat, 0.0, 1.0, out=flat)
        if cam.dropout > 0:
            np.less(u[-1], cam.dropout, out=self._dropped)
            flat[self._dropped] = 0.0


_TWO_PI = 2 * math.pi
_GRID_CELL = 2.0  # m, SingleSim's collision grid
_U8, _U13, _U16 = np.uint32(8), np.uint32(13), np.uint32(16)
_MIX1, _MIX2 = np.uint32(0x85EBCA6B), np.uint32(0xC2B2AE35)


def _clip(x: float, lo: float, hi: float) -> float:
    """np.clip of a float64 as numpy computes it: x itself unless below lo or above hi (so -0.0 stays -0.0
    at a bound of 0.0), NaN stays NaN."""
    return lo if x < lo else hi if x > hi else x


def _probe_sums() -> tuple[bool, bool]:
    """Whether, on this numpy, ``np.linalg.norm(v, axis=1)`` of a (1, 3) row is sqrt of the squares added
    left to right and ``np.einsum("ij,ij->i")`` of a row (x, y, 0) is x*x + y*y (no fused multiply-add)."""
    rng = np.random.default_rng(12345)
    rows = rng.standard_normal((256, 3)) * rng.choice([1e-3, 1.0, 30.0], (256, 3))
    norm_ok = einsum_ok = True
    for x, y, z in rows.tolist():
        v = np.array([[x, y, z]])
        norm_ok &= float(np.linalg.norm(v, axis=1)[0]) == math.sqrt(x * x + y * y + z * z)
        w = np.array([[x, y, 0.0]])
        einsum_ok &= np.einsum("ij,ij->i", w, w).item() == x * x + y * y
    return norm_ok, einsum_ok


_NORM_IS_PLAIN, _EINSUM_PLANAR_IS_PLAIN = _probe_sums()


def embedded_simulator(cfg: NavConfig, n: int, dynamics: object, single: bool) -> BatchSim:
    """The embedded backend's simulator (nav_env.backends): ``single`` with ``n`` 1 is :class:`SingleSim`, the
    batch code's fast path for one env (bit for bit the batch code's results)."""
    return SingleSim(cfg) if single and n == 1 else BatchSim(cfg, n)
