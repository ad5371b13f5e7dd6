"""``AirSimNavEnv``: the nav_env task flown on an AirSim / Cosys-AirSim simulator."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from nav_env.airsim.client import AirSimError, ClientThread, import_client, wait_for_port, warn_versions
from nav_env.airsim.frames import (
    DepthResampler,
    arena_to_ned,
    arena_yaw_from_ned_quaternion,
    body_to_world,
    ned_to_arena,
    vel_arena_to_ned,
    vel_ned_to_arena,
    yaw_quaternion_ned,
)
from nav_env.airsim.scene import Scene, sized_config
from nav_env.arena import FAR, Episode, sample_episode
from nav_env.common import ResetReturn, StepReturn, TaskEnv, commands
from nav_env.config import NavConfig
from nav_env.render import render_frame
from nav_env.sim import BatchSim

DEPTH_TYPES = ("perspective", "planar")


def open_arena_episode(rng: np.random.Generator, cfg: NavConfig, zone: int | None) -> Episode:
    """The default episode source: start, yaw, goal and zone exactly as the embedded simulator draws
    them for the same generator (``sample_episode``), without its obstacles: the AirSim map has its
    own, which the env does not know."""
    return without_obstacles(sample_episode(rng, cfg, zone))


def without_obstacles(ep: Episode) -> Episode:
    cyl = np.zeros_like(ep.cyl)
    cyl[:, 0:2] = FAR
    return dataclasses.replace(ep, cyl=cyl, box=np.full_like(ep.box, FAR))


class AirSimNavEnv(TaskEnv):
    """The nav_env task (same spaces, rewards, episode ends and ``info``; see :class:`nav_env.env.NavEnv`)
    with the vehicle, its physics, its collisions and its depth camera in AirSim.

    Per step the body-frame setpoint ``[vx, vy, vz, yaw_rate]`` is turned into an NED world velocity
    with the vehicle's current yaw and sent as ``moveByVelocity(..., duration=vehicle.dt)`` with a
    yaw-rate ``YawMode``; then the state (``getMultirotorState``), collisions (``simGetCollisionInfo``)
    and a float depth frame (``simGetImages``) are read back. ``lockstep=True`` pauses the simulator
    between steps (``simPause`` / ``simContinueForTime``) so the policy's thinking time does not fly.

    Episodes: ``reset(seed=s)`` draws the same start, yaw, goal and zone as the embedded simulator
    (obstacles are whatever the AirSim map holds); ``options={"episode": ep}`` flies a hand-built
    episode whose obstacles describe the map (drawn by ``render()`` only); ``episode_fn(rng, cfg,
    zone)`` replaces the draw; ``scene`` (a :class:`~nav_env.airsim.scene.Scene`, a dict or a JSON
    path: the map's static obstacles in arena coordinates) keeps start and goal clear of a known map
    and draws it in ``render()``. The arena's origin
    (its x = y = z = 0 corner) is at ``origin`` (north, east, down metres) in AirSim's world frame.

    Success, reward and truncation are computed by ``BatchSim.score`` and the state features by
    ``BatchSim.state_features``, the embedded simulator's own code; a collision is an AirSim
    collision reported after the start pose, or touching the arena's walls, floor or ceiling.
    """

    def __init__(
        self,
        level: str = "default",
        render_mode: str | None = None,
        config: NavConfig | None = None,
        overrides: dict[str, Any] | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 41451,
        vehicle_name: str = "",
        camera_name: str = "0",
        depth_type: str = "perspective",
        camera_fov_deg: float | None = None,
        origin: Sequence[float] = (0.0, 0.0, 0.0),
        lockstep: bool = False,
        takeoff: bool = True,
        takeoff_timeout_s: float = 20.0,
        timeout_s: float = 10.0,
        rpc_timeout_s: float = 60.0,
        client: str = "auto",
        episode_fn: Callable[[np.random.Generator, NavConfig, int | None], Episode] | None = None,
        scene: Scene | dict | str | None = None,
    ):
        self.set_up_task(level, render_mode, config, overrides, senses_attitude=False)
        if depth_type not in DEPTH_TYPES:
            raise ValueError(f"depth_type must be one of {DEPTH_TYPES}, got {depth_type!r}")
        if len(origin) != 3 or not all(math.isfinite(float(o)) for o in origin):
            raise ValueError(f"origin must be 3 finite numbers (north, east, down), got {origin!r}")
        self.host, self.port, self.vehicle_name, self.camera_name = host, int(port), vehicle_name, str(camera_name)
        self.depth_type, self.lockstep, self.takeoff = depth_type, bool(lockstep), bool(takeoff)
        self.camera_fov_deg = float(camera_fov_deg if camera_fov_deg is not None else self.cfg.camera.fov_deg)
        self.origin = tuple(float(o) for o in origin)
        self.takeoff_timeout_s = takeoff_timeout_s
        if scene is not None and episode_fn is not None:
            raise ValueError("pass either scene or episode_fn, not both")
        self.scene = Scene.load(scene) if scene is not None else None
        self.episode_fn = episode_fn or (self.scene.episode_fn() if self.scene is not None else open_arena_episode)
        self.sim = BatchSim(self.cfg, 1)  # bookkeeping and scoring only: AirSim flies the vehicle
        self.episode: Episode | None = None
        self.trajectory: list[np.ndarray] = []
        self._done = True
        self._last_obs: np.ndarray | None = None
        self._depth: np.ndarray | None = None
        self._resampler: DepthResampler | None = None
        self._collision_stamp = 0

        self.airsim = import_client(client)
        wait_for_port(host, self.port, timeout_s)
        self._c: ClientThread | None = ClientThread(self.airsim, host, self.port, rpc_timeout_s)
        try:
            self._call("ping", lambda c: c.ping())
            self._c.set_nodelay()
            server = self._call("getServerVersion", lambda c: c.getServerVersion())
            min_client = self._call("getMinRequiredClientVersion", lambda c: c.getMinRequiredClientVersion())
            client_v, min_server = self._call(
                "getClientVersion", lambda c: (c.getClientVersion(), c.getMinRequiredServerVersion())
            )
            warn_versions(int(server), int(min_client), int(client_v), int(min_server), f"{host}:{port}")
        except BaseException:
            self.close()
            raise
        image_type = (
            self.airsim.ImageType.DepthPerspective if depth_type == "perspective" else self.airsim.ImageType.DepthPlanar
        )
        self._request = self.airsim.ImageRequest(self.camera_name, image_type, True, False)

    # ------------------------------------------------------------------ gymnasium API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetReturn:
        super().reset(seed=seed)
        episode = self.next_episode(options, self.episode_fn)
        self._done = True
        self.episode = episode
        if (len(episode.cyl), len(episode.box)) != (self.sim.cyl.shape[1], self.sim.box.shape[1]):
            self.sim = BatchSim(sized_config(self.cfg, episode), 1)  # a scene's own obstacle count
        self.sim.load([0], [episode])
        self._fly_to_start(episode)
        pos = self._read_state()
        s = self.sim
        s.pos[0] = pos
        s.prev_dist[0] = s.start_dist[0] = float(np.linalg.norm(s.goal[0] - pos))
        info = self._call("simGetCollisionInfo", lambda c: c.simGetCollisionInfo(self.vehicle_name))
        self._collision_stamp = int(info.time_stamp)
        self.trajectory = [pos.copy()]
        self._last_obs = self._observe()
        self._done = False
        return self._last_obs, self.sim.info(0, False, False)

    def step(self, action: Any) -> StepReturn:
        if self._done or self.episode is None:
            raise RuntimeError("step() called before reset() or after the episode ended; call reset()")
        cmd = commands(np.asarray(action)[None] if np.ndim(action) < 2 else action, self.cfg, 1)[0]
        s = self.sim
        vn = vel_arena_to_ned(body_to_world(cmd[:3], float(s.yaw[0])))
        yaw_mode = self.airsim.YawMode(True, -math.degrees(float(cmd[3])))  # NED yaw rate is clockwise
        self._move(vn, yaw_mode)
        pos = self._read_state()
        s.track((pos - s.pos[0])[None])
        s.pos[0] = pos
        info = self._call("simGetCollisionInfo", lambda c: c.simGetCollisionInfo(self.vehicle_name))
        hit = bool(info.has_collided) and int(info.time_stamp) > self._collision_stamp
        reward, terminated, truncated, collision, success = s.score(np.array([hit]) | s.out_of_bounds())
        self.trajectory.append(pos.copy())
        self._done = bool(terminated[0] or truncated[0])
        if self._done and self.cfg.curriculum.enabled:
            self.curriculum.record(self.episode.zone, bool(success[0]))
        self._last_obs = self._observe()
        return (
            self._last_obs,
            float(reward[0]),
            bool(terminated[0]),
            bool(truncated[0]),
            self.sim.info(0, bool(collision[0]), bool(success[0])),
        )

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        if self.episode is None:
            raise RuntimeError("render() called before reset()")

        return render_frame(self.cfg, self.sim, 0, np.array(self.trajectory), depth=self._depth)

    def close(self) -> None:
        c = getattr(self, "_c", None)
        if c is None:
            return
        if self.lockstep:
            try:
                c.call("simPause", lambda cl: cl.simPause(False))
            except AirSimError:
                pass
        c.close()
        self._c = None

    # ------------------------------------------------------------------ AirSim calls
    def _call(self, what: str, fn: Callable[[Any], Any]) -> Any:
        if self._c is None:
            raise AirSimError("the AirSim env is closed")
        return self._c.call(what, fn)

    def _fly_to_start(self, ep: Episode) -> None:
        v = self.vehicle_name
        if self.lockstep:
            self._call("simPause", lambda c: c.simPause(False))
        self._call("reset", lambda c: c.reset())
        self._call("enableApiControl", lambda c: c.enableApiControl(True, v))
        self._call("armDisarm", lambda c: c.armDisarm(True, v))
        if self.takeoff:
            self._call("takeoff", lambda c: c.takeoffAsync(self.takeoff_timeout_s, v).get())
        a = self.airsim
        n, e, d = arena_to_ned(ep.start, self.origin)
        w, x, y, z = yaw_quaternion_ned(ep.yaw)
        pose = a.Pose(a.Vector3r(float(n), float(e), float(d)), a.Quaternionr(x_val=x, y_val=y, z_val=z, w_val=w))
        self._call("simSetVehiclePose", lambda c: c.simSetVehiclePose(pose, True, v))
        if self.lockstep:
            self._call("simPause", lambda c: c.simPause(True))

    def _move(self, vn: np.ndarray, yaw_mode: Any) -> None:
        dt, v = self.cfg.vehicle.dt, self.vehicle_name
        drivetrain = self.airsim.DrivetrainType.MaxDegreeOfFreedom

        def move(c: Any) -> Any:
            fut = c.moveByVelocityAsync(float(vn[0]), float(vn[1]), float(vn[2]), dt, drivetrain, yaw_mode, v)
            if self.lockstep:
                c.simContinueForTime(dt)
            return fut.get()  # get(), not join(): join() would swallow a server error

        self._call("moveByVelocity", move)

    def _read_state(self) -> np.ndarray:
        """Read the vehicle's kinematics into the bookkeeping sim (velocity, yaw, yaw rate); return
        the position in the arena frame."""
        st = self._call("getMultirotorState", lambda c: c.getMultirotorState(self.vehicle_name))
        k = st.kinematics_estimated
        p, q, lv, av = k.position, k.orientation, k.linear_velocity, k.angular_velocity
        s = self.sim
        s.vel[0] = vel_ned_to_arena((lv.x_val, lv.y_val, lv.z_val))
        s.yaw[0] = arena_yaw_from_ned_quaternion(q.w_val, q.x_val, q.y_val, q.z_val)
        s.yaw_rate[0] = -float(av.z_val)  # body z points down: clockwise positive
        return ned_to_arena((p.x_val, p.y_val, p.z_val), self.origin)

    def _observe(self) -> np.ndarray:
        self._depth = self._read_depth()
        return self.sim.observe(depth=self._depth[None])[0]

    def _read_depth(self) -> np.ndarray:
        responses = self._call("simGetImages", lambda c: c.simGetImages([self._request], self.vehicle_name))
        if not responses:
            raise AirSimError(f"AirSim simGetImages: no image from camera {self.camera_name!r}")
        r = responses[0]
        w, h = int(r.width), int(r.height)
        data = np.asarray(r.image_data_float, dtype=np.float32)
        if w <= 0 or h <= 0 or data.size != w * h:
            msg = getattr(r, "message", "")
            raise AirSimError(
                f"AirSim simGetImages: camera {self.camera_name!r} returned no float depth frame "
                f"({w} x {h} px, {data.size} values{'; ' + str(msg) if msg else ''}); check the camera name and settings.json"
            )
        if self._resampler is None or self._resampler.src_shape != (h, w):
            try:
                self._resampler = DepthResampler(self.cfg, w, h, self.camera_fov_deg, self.depth_type == "perspective")
            except ValueError as e:
                raise AirSimError(f"AirSim camera {self.camera_name!r}: {e}") from None
        return self._resampler(data.reshape(h, w))
