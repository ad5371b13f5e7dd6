"""``MujocoSim``: nav_env's batch simulator with the vehicle, its collisions and its camera in MuJoCo.

One MuJoCo model holds the ``N`` arenas side by side along x (each ``size_x + 10`` m from the last) and one
quadrotor per arena: a free rigid body with the airframe's mass and inertia and a collision sphere of
``vehicle.radius``. Each arena's pillars and boxes are MuJoCo geoms of the episode's sizes (unused slots are
parked out of the way); floor, ceiling and the walls at y = 0 and y = ``size_y`` are planes all arenas share, the
walls at x = 0 and x = ``size_x`` boxes of their own. Only vehicle-obstacle pairs can touch (contype /
conaffinity), so the worlds never interact. One ``mj_step`` advances every vehicle; between steps the flight
controller and motors (:mod:`nav_env.dynamics.controller`) run for all of them and push each body with its
rotors' force and torque (``xfrc_applied``).

The depth camera is ray cast from the vehicle's centre by :func:`nav_env.dynamics.camera.cast_depth` against
its own arena (a box seen from inside) and obstacles (vertical prisms between floor and ceiling), pixel for pixel
what MuJoCo's ``mj_multiRay`` casts on the same geoms (tested) at about a third of its cost; obstacles outside
the camera's view are left out of each cast (:mod:`nav_env.dynamics.camera`: exact, it only saves time). The
rays keep the embedded camera's pixel layout and planar depth; with ``camera_mount.mount = "body"`` they turn with
the airframe (a drone pitched forward looks toward the floor), with ``"gimbal"`` only with its heading. A collision is any
MuJoCo contact of the vehicle's sphere, checked at every physics step and at the end of the period.

Everything nav_env reads from a simulator (``pos``, ``vel``, ``yaw``, ``yaw_rate``, the obstacles) is kept in
:class:`~nav_env.sim.BatchSim`'s arrays, so observations, rewards, ``info``, the latency schedule and the
renderer are the embedded simulator's own code.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from nav_env.arena import FAR, Episode, slot_counts
from nav_env.config import NavConfig
from nav_env.dynamics.camera import cast_depth, visible_obstacles
from nav_env.dynamics.config import GRAVITY, DynamicsConfig, load_dynamics
from nav_env.dynamics.controller import Gains, control_step, motor_lag, quat_to_mat
from nav_env.dynamics.randomize import EpisodePhysics, mount_rotation
from nav_env.sim import BatchSim, Scored, hash_uniform

try:
    import mujoco
except ImportError as e:  # the optional extra
    raise ImportError(f"the mujoco backend needs MuJoCo: pip install 'airq[dynamics]' ({e})") from None

ARENA_GAP = 10.0  # m between neighbouring arenas in the physics model
_WALL = 0.5  # m, half thickness of the x walls
_VEHICLE, _OBSTACLE = 2, 1  # contype bits: a vehicle touches obstacles only, an obstacle vehicles only


class MujocoSim(BatchSim):
    """:class:`BatchSim` whose vehicles are MuJoCo rigid bodies under a cascaded flight controller.

    ``step(cmd, delay, period)`` flies each env's setpoints for its period (``vehicle.dt`` or ``period``):
    the flight controller holds the last setpoint it received; with a ``delay`` a setpoint reaches it that
    many seconds into the period (the embedded simulator's schedule, ``BatchSim.setpoint_schedule``) and takes over
    at the first physics step that starts at or after its arrival. Each env's physics clock stays within half
    a physics step of its flight time (a period that is not a whole number of steps alternates rounding).
    """

    def __init__(self, cfg: NavConfig, n: int, dynamics: DynamicsConfig | None = None):
        super().__init__(cfg, n)
        self.dyn = dynamics or load_dynamics()
        self.h = self.dyn.physics.step
        kc, kb = slot_counts(cfg)
        self.kc, self.kb = kc, kb
        a = cfg.arena
        self.offset = np.zeros((n, 3))
        self.offset[:, 0] = np.arange(n) * (a.size_x + ARENA_GAP)
        self.model = mujoco.MjModel.from_xml_string(self._physics_xml())
        self.data = mujoco.MjData(self.model)
        m = self.model
        self._qpos = self.data.qpos.reshape(n, 7)
        self._qvel = self.data.qvel.reshape(n, 6)
        body0 = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, "vehicle0")
        self._xfrc = self.data.xfrc_applied[body0 : body0 + n]
        self._bodies = slice(body0, body0 + n)

        def geom_ids(model: mujoco.MjModel, names: list[str]) -> np.ndarray:
            return np.array([mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, s) for s in names], dtype=int)

        self._cyl_geoms = np.stack([geom_ids(m, [f"cyl{i}_{k}" for k in range(kc)]) for i in range(n)]).reshape(n, kc)
        self._box_geoms = np.stack([geom_ids(m, [f"box{i}_{k}" for k in range(kb)]) for i in range(n)]).reshape(n, kb)
        self._obstacle_geoms = np.concatenate([self._cyl_geoms, self._box_geoms], axis=1)
        self._geom_env = np.full(m.ngeom, -1)
        self._geom_env[geom_ids(m, [f"vehicle{i}" for i in range(n)])] = np.arange(n)
        # what each env flies this episode: the nominal airframe, or one drawn from [randomization]
        self.randomized = self.dyn.randomization.enabled
        r = self.dyn.randomization
        self._masses_drawn = self.randomized and (r.mass_scale != (1.0, 1.0) or r.inertia_scale != (1.0, 1.0))
        self._scratch = mujoco.MjData(self.model) if self._masses_drawn else None
        self.physics = EpisodePhysics.nominal(self.dyn, n, cfg.camera.noise_std)
        self._camera_rays()
        self.gains = Gains.from_config(self.dyn)
        m = self.dyn.motors
        self.lag_up = np.full(n, motor_lag(self.h, m.time_constant_up))
        self.lag_down = np.full(n, motor_lag(self.h, m.time_constant_down))
        # the flight controller's state (velocity and rate integrators, yaw setpoint) and the rotors' speeds
        self.altitude_target = np.zeros(n)
        self.vel_integral = np.zeros((n, 3))
        self.rate_integral = np.zeros((n, 3))
        self.yaw_setpoint = np.zeros(n)
        self.rotor_speed = np.zeros((n, 4))
        self.clock_lead = np.zeros(n)  # physics time minus flight time, within +-h/2
        self.hit = np.zeros(n, dtype=bool)  # contact during the last step
        self.wind = np.zeros((n, 3))  # steady wind, world frame
        self.gust = np.zeros((n, 3))
        self.rot = np.tile(np.eye(3), (n, 1, 1))  # body-to-world rotations, current
        # the airframe's tilt (angle of its z axis from vertical) at the end of each control period this episode
        self.tilt_max_deg = np.zeros(n)
        self.tilt_sum_deg = np.zeros(n)
        self.tilt_samples = np.zeros(n, dtype=np.int64)
        self._all_active = np.ones(n, dtype=bool)
        self._wrench = np.zeros((n, 6))
        self._keep_cyl = np.ones((n, kc), dtype=bool)
        self._keep_box = np.ones((n, kb), dtype=bool)

    # ------------------------------------------------------------------ model
    def _obstacle_xml(self, prefix_cyl: str, prefix_box: str) -> list[str]:
        """Every obstacle slot as a geom in arena coordinates, placed and sized per episode (_place_obstacles)."""
        half_h = self.cfg.arena.ceiling / 2
        shapes = [(f"{prefix_cyl}{k}", f'type="cylinder" size="0.5 {half_h}"') for k in range(self.kc)]
        shapes += [(f"{prefix_box}{k}", f'type="box" size="0.5 0.5 {half_h}"') for k in range(self.kb)]
        return [f'<geom name="{name}" {shape} pos="{FAR} {FAR} {half_h}"/>' for name, shape in shapes]

    def _planes(self) -> list[str]:
        """Floor, ceiling and the walls at y = 0 and y = size_y as planes facing into the arena."""
        a = self.cfg.arena
        faces = [("0 0 0", "0 0 1"), (f"0 0 {a.ceiling}", "0 0 -1"), ("0 0 0", "0 1 0"), (f"0 {a.size_y} 0", "0 -1 0")]
        return [f'<geom type="plane" size="0 0 1" pos="{pos}" zaxis="{axis}"/>' for pos, axis in faces]

    def _physics_xml(self) -> str:
        """Floor, ceiling and the y walls: planes every arena shares. Each arena: a static body at its offset
        holding its x walls and obstacle slots in arena coordinates. MuJoCo's per-body collision volumes are
        compiled for the geoms' compiled places, and the obstacles move every episode, so that culling
        (midphase) is off: a vehicle is tested against each geom of the one arena body whose current
        bounding box it overlaps (the broadphase's, recomputed every step), about 20-50 bounding-sphere checks."""
        a, dyn = self.cfg.arena, self.dyn
        sx, sy, zc = a.size_x, a.size_y, a.ceiling
        planes = self._planes()
        arenas, vehicles = [], []  # the vehicles' bodies follow each other (self._xfrc is a slice of them)
        ixx, iyy, izz = dyn.airframe.inertia
        wall = f'size="{_WALL} {sy / 2 + 1} {zc / 2 + 1}"'
        for i in range(self.n):
            x0 = float(self.offset[i, 0])
            arenas.append(
                f'<body name="arena{i}" pos="{x0} 0 0">'
                f'<geom name="wall_x0_{i}" type="box" {wall} pos="{-_WALL} {sy / 2} {zc / 2}"/>'
                f'<geom name="wall_x1_{i}" type="box" {wall} pos="{sx + _WALL} {sy / 2} {zc / 2}"/>'
                f"{''.join(self._obstacle_xml(f'cyl{i}_', f'box{i}_'))}</body>"
            )
            vehicles.append(
                f'<body name="vehicle{i}" pos="{x0 + sx / 2} {sy / 2} {a.altitude}"><freejoint/>'
                f'<inertial pos="0 0 0" mass="{dyn.airframe.mass}" diaginertia="{ixx} {iyy} {izz}"/>'
                f'<geom name="vehicle{i}" type="sphere" size="{self.cfg.vehicle.radius}" mass="0" '
                f'contype="{_VEHICLE}" conaffinity="{_OBSTACLE}"/></body>'
            )
        return (
            '<mujoco model="airq-arenas">'
            f'<option timestep="{self.h}" gravity="0 0 {-GRAVITY}"><flag midphase="disable"/></option>'
            f'<default><geom contype="{_OBSTACLE}" conaffinity="{_VEHICLE}"/></default>'
            f"<worldbody>{''.join(planes)}{''.join(arenas)}{''.join(vehicles)}</worldbody></mujoco>"
        )

    def _camera_rays(self) -> None:
        """Unit ray directions of every pixel in the camera frame (x forward, y left, z up), row-major from the
        top-left pixel as the embedded camera, and each one's cosine to the optical axis (ray -> planar depth)."""
        u = np.tan(self.col_angle.astype(np.float64))  # left positive
        t = self.row_tan.astype(np.float64)  # down positive
        rays = np.stack(np.broadcast_arrays(1.0, u[None, :], -t[:, None]), axis=-1).reshape(-1, 3)
        norm = np.linalg.norm(rays, axis=1)
        self._rays_cam = rays / norm[:, None]
        self._ray_cos = 1.0 / norm
        h, w = self.cfg.camera.height, self.cfg.camera.width
        self._corners = np.ascontiguousarray(self._rays_cam[[0, w - 1, (h - 1) * w, h * w - 1]])
        self._tan_half = np.array([abs(u[0]), abs(t[0])])
        # no pixel's planar depth reaches beyond max_range: farther geoms are not tested
        self._cutoff = self.cfg.camera.max_range / float(self._ray_cos.min())
        self._mount = mount_rotation(self.dyn.camera_mount.pitch_deg)
        self._mounts = np.tile(self._mount, (self.n, 1, 1))  # per env, when randomization draws the pitch

    # ------------------------------------------------------------------ episodes
    def load(self, idx: Sequence[int] | np.ndarray, episodes: Sequence[Episode]) -> None:
        super().load(idx, episodes)
        idx = np.asarray(idx, dtype=int)
        for i, ep in zip(idx.tolist(), episodes):
            self._place_obstacles(i)
            yaw = float(ep.yaw)
            self._qpos[i, 0:3] = self.pos[i] + self.offset[i]
            self._qpos[i, 3:7] = (math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2))
            self._qvel[i] = 0.0
            if self.randomized:
                self._draw_physics(i)
            self._draw_wind(i)
        if self._masses_drawn:
            # MuJoCo keeps a free body's mass matrix (dof_M0) from the masses it was compiled with: recompute the
            # model's constants for the new ones, in a scratch MjData (it poses the model at qpos0)
            mujoco.mj_setConst(self.model, self._scratch)
        quat_to_mat(self._qpos[:, 3:7], self.rot)
        self.altitude_target[idx] = self.pos[idx, 2]
        self.vel_integral[idx] = 0.0
        self.rate_integral[idx] = 0.0
        self.yaw_setpoint[idx] = self.yaw[idx]
        # an episode starts in a hover (of the airframe it flies: the controller's integrators start at zero)
        self.rotor_speed[idx] = (
            self.physics.hover_rotor_speed(idx)[:, None] if self.randomized else self.dyn.hover_rotor_speed
        )
        self.clock_lead[idx] = 0.0
        self.hit[idx] = False
        self.tilt_max_deg[idx] = self.tilt_sum_deg[idx] = 0.0
        self.tilt_samples[idx] = 0
        mujoco.mj_kinematics(self.model, self.data)

    def _place_obstacles(self, i: int) -> None:
        """Env ``i``'s episode obstacles (self.cyl, self.box) as geoms of both models."""
        half_h = self.cfg.arena.ceiling / 2
        cyl, box = self.cyl[i].astype(np.float64), self.box[i].astype(np.float64)
        n_c, n_b = len(cyl), len(box)
        cyl_pos = np.column_stack([cyl[:, 0], cyl[:, 1], np.full(n_c, half_h)])
        cyl_size = np.column_stack([np.maximum(cyl[:, 2], 1e-3), np.full(n_c, half_h), np.zeros(n_c)])
        box_pos = np.column_stack([(box[:, 0] + box[:, 2]) / 2, (box[:, 1] + box[:, 3]) / 2, np.full(n_b, half_h)])
        box_size = np.column_stack(
            [
                np.maximum((box[:, 2] - box[:, 0]) / 2, 1e-3),
                np.maximum((box[:, 3] - box[:, 1]) / 2, 1e-3),
                np.full(n_b, half_h),
            ]
        )
        # unused slots: inside the arena (a geom far away would stretch the arena body's bounding box over the other
        # arenas), tiny and unable to touch anything; the camera casts against self.cyl and self.box
        parked = np.concatenate([cyl[:, 0] >= FAR / 2, box[:, 0] >= FAR / 2])
        pos, size = np.concatenate([cyl_pos, box_pos]), np.concatenate([cyl_size, box_size])
        physics = self.model
        a = self.cfg.arena
        pos[parked] = a.size_x / 2, a.size_y / 2, half_h
        size[parked, 0:2] = 1e-3
        physics.geom_pos[self._obstacle_geoms[i]] = pos
        _size_geoms(physics, self._obstacle_geoms[i], size, n_c)
        physics.geom_contype[self._obstacle_geoms[i]] = np.where(parked, 0, _OBSTACLE)
        physics.geom_conaffinity[self._obstacle_geoms[i]] = np.where(parked, 0, _VEHICLE)

    def move_obstacles(self, dt: float | np.floating | np.ndarray) -> None:
        """:meth:`BatchSim.move_obstacles`, and the moving cylinders' geoms after them in the physics model."""
        super().move_obstacles(dt)
        half_h = self.cfg.arena.ceiling / 2
        lo = self.cfg.obstacles.cylinders[1]  # moving cylinders take the slots after the static ones
        for i in range(self.n):
            c = self.cyl[i, lo:].astype(np.float64)
            pos = np.column_stack([c[:, 0], c[:, 1], np.full(len(c), half_h)])
            moving = c[:, 0] < FAR / 2
            self.model.geom_pos[self._cyl_geoms[i, lo:][moving]] = pos[moving]

    def _draw_physics(self, i: int) -> None:
        """Env ``i``'s airframe, motors, camera and delay for its episode (nav_env.dynamics.randomize), into the
        physics model and the arrays the motors, camera and schedule read."""
        p = self.physics
        p.draw(i, self.dyn, int(self.noise_key[i]), self.cfg.camera.noise_std)
        body = self._bodies.start + i
        self.model.body_mass[body] = p.mass[i]
        self.model.body_inertia[body] = p.inertia_x[i], p.inertia_y[i], p.inertia_z[i]
        self.lag_up[i] = motor_lag(self.h, float(p.motor_time_constant_up[i]))
        self.lag_down[i] = motor_lag(self.h, float(p.motor_time_constant_down[i]))
        self._mounts[i] = mount_rotation(float(p.camera_pitch_deg[i]))

    def _draw_wind(self, i: int) -> None:
        w = self.dyn.wind
        key, step = self.noise_key[i : i + 1, None].astype(np.uint32), np.zeros((1, 1), np.uint32)
        u = hash_uniform(key, step, np.arange(3, dtype=np.uint32), 0x57A1D0E5)[0]
        speed = w.speed[0] + (w.speed[1] - w.speed[0]) * float(u[0])
        heading = 2 * math.pi * float(u[1])
        self.wind[i] = speed * math.cos(heading), speed * math.sin(heading), 0.0
        self.physics.wind_speed[i] = speed
        self.gust[i] = 0.0

    def _update_gusts(self, period: np.ndarray) -> None:
        """One exact Ornstein-Uhlenbeck step per control period for each horizontal gust component; the
        normal draws are hashed from (episode, step), so an episode's gusts do not depend on its batch."""
        w = self.dyn.wind
        gust_std = self.physics.gust_std
        if not gust_std.any():
            return
        decay = np.exp(-period / w.gust_time_constant)
        u = hash_uniform(
            self.noise_key.astype(np.uint32)[:, None],
            self.steps.astype(np.uint32)[:, None],
            np.arange(4, dtype=np.uint32),
            0x3C6EF372,
        ).astype(np.float64)
        normal = np.sqrt(-2 * np.log(u[:, 0:2])) * np.cos(2 * math.pi * u[:, 2:4])  # Box-Muller
        self.gust[:, 0:2] = (
            self.gust[:, 0:2] * decay[:, None] + (gust_std[:, None] * np.sqrt(1 - decay**2)[:, None]) * normal
        )

    # ------------------------------------------------------------------ dynamics
    def step(self, cmd: np.ndarray, delay: np.ndarray | None = None, period: np.ndarray | None = None) -> Scored:
        dt = self.cfg.vehicle.dt
        cmd = np.asarray(cmd, dtype=np.float64)
        if self.randomized and self.physics.act_delay_s.any():  # the episode's own delay, on top of the caller's
            given = 0.0 if delay is None else np.broadcast_to(np.asarray(delay, np.float64), (self.n,))
            delay = given + self.physics.act_delay_s
        share: np.ndarray | float
        if delay is None and period is None or self.is_lockstep(delay, period):
            self.held[:] = cmd
            periods = np.full(self.n, dt)
            starts, setpoints = np.zeros((1, self.n)), cmd[None]
            share = 1.0
        else:
            delays = np.zeros(self.n) if delay is None else np.broadcast_to(np.asarray(delay, np.float64), (self.n,))
            periods = (
                np.full(self.n, dt) if period is None else np.broadcast_to(np.asarray(period, np.float64), (self.n,))
            )
            durations, setpoints = self.setpoint_schedule(cmd, delays, periods)
            starts = np.cumsum(durations, axis=0) - durations
            share = periods / dt
        self._fly(starts, setpoints, periods)
        self._read_state()
        tilt = np.degrees(np.arccos(np.clip(self.rot[:, 2, 2], -1.0, 1.0)))
        np.maximum(self.tilt_max_deg, tilt, out=self.tilt_max_deg)
        self.tilt_sum_deg += tilt
        self.tilt_samples += 1
        after = self._qpos[:, 0:3] - self.offset
        self.track(after - self.pos, None if isinstance(share, float) else periods)
        self.pos[:] = after  # exact, not the sum of the track's rounding
        if self.has_moving:
            self.move_obstacles(periods[:, None, None].astype(np.float32))
        self._update_gusts(periods)
        return self.score(self.hit.copy(), share)

    def _fly(self, starts: np.ndarray, setpoints: np.ndarray, periods: np.ndarray) -> None:
        """Physics steps until each env's physics clock reaches the end of its period; ``starts`` (K, N) are
        the times into the period at which setpoints ``setpoints`` (K, N, 4) take over."""
        h, m, d = self.h, self.model, self.data
        lead = self.clock_lead
        steps = np.maximum(np.rint((periods - lead) / h), 0).astype(int)
        self.clock_lead = lead + steps * h - periods
        rows = np.arange(self.n)
        self.hit[:] = False
        airflow = self.wind + self.gust
        q, v, g, wrench = self._qpos, self._qvel, self.gains, self._wrench
        for j in range(int(steps.max(initial=0))):
            active = self._all_active if steps.min() > j else j < steps
            if setpoints.shape[0] == 1:
                sp = setpoints[0]
            else:  # the last setpoint whose start is at or before this step's start (1 ns of slack for rounding)
                k = np.sum(starts <= (lead + j * h + 1e-9)[None, :], axis=0) - 1
                sp = np.ascontiguousarray(setpoints[np.maximum(k, 0), rows])
            control_step(
                g,
                q,
                v,
                sp,
                active,
                airflow,
                self.altitude_target,
                self.vel_integral,
                self.rate_integral,
                self.yaw_setpoint,
                self.rotor_speed,
                self.physics.motor_constant,
                self.lag_up,
                self.lag_down,
                self.physics.rotor_drag,
                wrench,
            )
            self._xfrc[:] = wrench
            if active is self._all_active:
                mujoco.mj_step(m, d)
            else:  # envs whose period has ended wait: their state is put back after the step
                frozen = ~active
                saved_q, saved_v = q[frozen], v[frozen]  # fancy indexing: copies
                mujoco.mj_step(m, d)
                q[frozen], v[frozen] = saved_q, saved_v
            if d.ncon:  # contacts at the state this step started from
                self._record_contacts()
        mujoco.mj_kinematics(m, d)
        mujoco.mj_collision(m, d)
        if d.ncon:
            self._record_contacts()

    def _record_contacts(self) -> None:
        geoms = self.data.contact.geom[: self.data.ncon]
        env = self._geom_env[geoms].max(axis=1)  # each contact has one vehicle (obstacles never touch)
        self.hit[env[env >= 0]] = True

    def _read_state(self) -> None:
        q, v = self._qpos, self._qvel
        quat_to_mat(q[:, 3:7], self.rot)
        self.vel[:] = v[:, 0:3]
        self.yaw[:] = np.arctan2(self.rot[:, 1, 0], self.rot[:, 0, 0])
        self.yaw_rate[:] = np.einsum("nj,nj->n", self.rot[:, 2, :], v[:, 3:6])  # world z of the body rates

    def collided(self) -> np.ndarray:
        return self.hit.copy()

    def attitude(self, idx: np.ndarray | slice = slice(None)) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Roll and pitch (rad, ZYX Euler angles of the body) and body rates p, q, r (rad/s, (n, 3): the free joint's
        angular velocity, which MuJoCo keeps in the body frame) of the envs in ``idx``."""
        rot = self.rot[idx]
        roll = np.arctan2(rot[:, 2, 1], rot[:, 2, 2])
        pitch = -np.arcsin(np.clip(rot[:, 2, 0], -1.0, 1.0))
        return roll, pitch, np.array(self._qvel[idx, 3:6])

    # ------------------------------------------------------------------ sensing
    def depth(self, idx: np.ndarray | slice = slice(None)) -> np.ndarray:
        envs = np.arange(self.n)[idx]
        cam = self.cfg.camera
        rot = self.camera_rotation(envs)
        rays = rot @ self._rays_cam.T  # world directions (n, 3, P)
        keep_cyl, keep_box = self._keep_cyl[: len(envs)], self._keep_box[: len(envs)]
        visible_obstacles(
            self.pos[envs],
            rot,
            self._corners,
            self._tan_half,
            self.cyl[envs],
            self.box[envs],
            self._cutoff,
            keep_cyl,
            keep_box,
        )
        dist = np.empty((len(envs), rays.shape[2]))
        a = self.cfg.arena
        # the obstacles in float64, as MuJoCo's geoms hold them: in float32 the kernel's products (r * r) would round
        cast_depth(
            self.pos[envs],
            rays,
            self.cyl[envs].astype(np.float64),
            self.box[envs].astype(np.float64),
            keep_cyl,
            keep_box,
            a.size_x,
            a.size_y,
            a.ceiling,
            self._cutoff,
            dist,
        )
        planar = np.where(dist >= 0, dist * self._ray_cos, cam.max_range)
        depth = (np.minimum(planar, cam.max_range) * (1.0 / cam.max_range)).astype(np.float32)
        depth = depth.reshape(len(envs), cam.height, cam.width)
        if self.randomized and (self.physics.depth_noise_std[envs].any() or cam.dropout > 0):
            self.add_camera_noise(depth, idx, self.physics.depth_noise_std[envs])
        elif not self.randomized and (cam.noise_std > 0 or cam.dropout > 0):
            self.add_camera_noise(depth, idx)
        return depth

    def episode_tilt(self) -> dict[str, np.ndarray]:
        """Each env's tilt this episode so far: the largest and the mean over the ends of its control periods (deg)."""
        return {
            "max_deg": self.tilt_max_deg.copy(),
            "mean_deg": self.tilt_sum_deg / np.maximum(self.tilt_samples, 1),
        }

    def episode_physics(self) -> EpisodePhysics | None:
        """What each env flies this episode when the dynamics randomize it (None: the nominal airframe)."""
        return self.physics if self.randomized else None

    def camera_rotation(self, envs: np.ndarray) -> np.ndarray:
        """Camera-to-world rotations (n, 3, 3) of envs ``envs`` (camera x forward, y left, z up)."""
        if self.dyn.camera_mount.mount == "body":
            rot = self.rot[envs]
        else:
            yaw = self.yaw[envs]
            c, s = np.cos(yaw), np.sin(yaw)
            rot = np.zeros((len(envs), 3, 3))
            rot[:, 0, 0], rot[:, 0, 1], rot[:, 1, 0], rot[:, 1, 1], rot[:, 2, 2] = c, -s, s, c, 1.0
        return rot @ (self._mounts[envs] if self.randomized else self._mount)


def _size_geoms(model: mujoco.MjModel, ids: np.ndarray, size: np.ndarray, n_cylinders: int) -> None:
    """Resize geoms of a compiled model (the first ``n_cylinders`` cylinders, then boxes), with the bounding data
    collision and ray casting read per geom."""
    model.geom_size[ids] = size
    c = size[:n_cylinders]
    model.geom_rbound[ids[:n_cylinders]] = np.hypot(c[:, 0], c[:, 1])
    model.geom_rbound[ids[n_cylinders:]] = np.linalg.norm(size[n_cylinders:], axis=1)
    half = size.copy()
    half[:n_cylinders, 1], half[:n_cylinders, 2] = c[:, 0], c[:, 1]
    model.geom_aabb[ids] = np.concatenate([np.zeros_like(half), half], axis=1)


def mujoco_simulator(cfg: NavConfig, n: int, dynamics: DynamicsConfig | str | None, single: bool) -> MujocoSim:
    """The mujoco backend's simulator (nav_env.backends); ``dynamics``: a config, a dynamics TOML path, or None for
    the shipped Iris. One env or many, it is the same batch code."""
    return MujocoSim(cfg, n, dynamics if isinstance(dynamics, DynamicsConfig) else load_dynamics(dynamics))
