"""A scripted stand-in for an AirSim simulator: msgpack-rpc over TCP as rpclib speaks it, serving the
calls the nav_env backend makes, with nav_env's own physics and ray casting as the "world".

    python -m nav_env.airsim.fake_server --port 41451 --level default --scene-seed 3

What it is: a protocol-level fake. Requests ``[0, msgid, method, params]`` get responses
``[1, msgid, error, result]`` (errors are strings, as rpclib sends them); structs are maps keyed by
field name and floats go out as float32, as from AirSim. The vehicle follows ``moveByVelocity``
with the embedded simulator's first-order response (so a policy flies the same trajectory as on the
embedded simulator), collides with the scene's obstacles, walls, floor and ceiling, and its depth
camera is ``BatchSim``'s ray caster at the requested resolution, in metres, as ``DepthPerspective``
or ``DepthPlanar``.

What it is not: Unreal, a flight controller, or AirSim's timing. Time only advances on
``moveByVelocity`` / ``simContinueForTime`` (as fast as the host runs); ``takeoff`` does nothing;
``moveByVelocity`` durations are rounded to whole control periods (``vehicle.dt``); only yaw-rate
``YawMode`` is supported; a crashed vehicle stays put until ``reset`` or ``simSetVehiclePose``.
"""

from __future__ import annotations

import dataclasses
import math
import socket
import sys
import threading
from collections.abc import Sequence
from typing import Any

import msgpack
import numpy as np

from airq_cli import ArgumentParser, output_file, run
from nav_env.airsim.frames import (
    arena_to_ned,
    arena_yaw_from_ned_quaternion,
    ned_to_arena,
    vel_arena_to_ned,
    vel_ned_to_arena,
    world_to_body,
    yaw_quaternion_ned,
)
from nav_env.airsim.scene import Scene, sized_config
from nav_env.arena import Episode, sample_episode
from nav_env.config import NavConfig, load_level
from nav_env.sim import BatchSim

REQUEST, RESPONSE, NOTIFY = 0, 1, 2
DEPTH_PLANAR, DEPTH_PERSPECTIVE = 1, 2
SKY_M = 1000.0  # the render range: the arena is closed, so every ray hits something well before


class RPCFailure(Exception):
    """Raised by a handler: becomes the error string of the response."""


# where a deferred reply goes: the connection, its packer and the request's msgid
ReplyTo = tuple[socket.socket, msgpack.Packer, int]


class FakeAirSimServer:
    """One multirotor in a scripted world, on ``host``:``port`` (0 = an ephemeral port).

    ``scene``: an :class:`~nav_env.arena.Episode` whose obstacles are the world (moving ones move)
    and whose start pose is the player start, or a :class:`~nav_env.airsim.scene.Scene` (or its
    dict / JSON path) with the player start at the arena's centre; default: an empty arena.
    ``origin``: where the arena's corner sits in the NED world frame (as ``AirSimNavEnv(origin=)``).
    ``image_size`` (width, height) and ``image_fov_deg``: the depth camera (default: the level's).
    ``fail``: method name -> error message, to script server-side errors.
    ``calls`` records every method received, in order, and ``last`` its latest parameters.
    """

    def __init__(
        self,
        cfg: NavConfig | None = None,
        scene: Episode | Scene | dict | str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        origin: Sequence[float] = (0.0, 0.0, 0.0),
        image_size: tuple[int, int] | None = None,
        image_fov_deg: float | None = None,
        cameras: Sequence[str] = ("0", "front_center"),
        vehicles: Sequence[str] = ("", "Drone1"),
        server_version: int = 4,
        min_client_version: int = 1,
        fail: dict[str, str] | None = None,
    ):
        self.cfg = cfg or load_level("default")
        a = self.cfg.arena
        if not isinstance(scene, Episode):  # a map: player start at the arena's centre
            cyl, box = Scene.load(scene if scene is not None else Scene()).arrays()
            centre = np.array([a.size_x / 2, a.size_y / 2, a.altitude])
            scene = Episode(centre, 0.0, centre.copy(), 0, cyl, box, 0)
        self.scene = scene
        self.origin = tuple(float(o) for o in origin)
        cam = self.cfg.camera
        w, h = image_size or (cam.width, cam.height)
        render_cam = dataclasses.replace(
            cam,
            width=int(w),
            height=int(h),
            fov_deg=float(image_fov_deg or cam.fov_deg),
            max_range=SKY_M,
            noise_std=0.0,
            dropout=0.0,
        )
        world_cfg = sized_config(self.cfg, scene)
        self.render_cfg = dataclasses.replace(world_cfg, camera=render_cam)
        self.cameras, self.vehicles = tuple(cameras), tuple(vehicles)
        self.server_version, self.min_client_version = server_version, min_client_version
        self.fail = dict(fail or {})
        self.calls: list[str] = []
        self.last: dict[str, list] = {}  # the latest parameters of each method, as received
        self.world = BatchSim(world_cfg, 1)
        self.camera = BatchSim(self.render_cfg, 1)
        self._lock = threading.RLock()
        self._reset_world()
        self._sock = socket.create_server((host, port))
        self.host, self.port = self._sock.getsockname()[:2]
        self._threads: list[threading.Thread] = []
        self._conns: list[socket.socket] = []
        self._running = False

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> FakeAirSimServer:
        self._running = True
        t = threading.Thread(target=self._accept_loop, name="fake-airsim-accept", daemon=True)
        t.start()
        self._threads.append(t)
        return self

    def stop(self) -> None:
        self._running = False
        try:
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept() (close alone does not)
        except OSError:
            pass
        self._sock.close()
        for c in list(self._conns):
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()
        for t in self._threads:
            t.join(timeout=2)

    def __enter__(self) -> FakeAirSimServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def serve_forever(self) -> None:
        self.start()
        try:
            threading.Event().wait()
        finally:
            self.stop()

    # ------------------------------------------------------------------ transport
    def _accept_loop(self) -> None:
        while self._running:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._conns.append(conn)
            t = threading.Thread(target=self._serve, args=(conn,), name="fake-airsim-conn", daemon=True)
            t.start()
            self._threads.append(t)

    def _serve(self, conn: socket.socket) -> None:
        unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)
        packer = msgpack.Packer(use_single_float=True)
        try:
            while self._running:
                data = conn.recv(1 << 16)
                if not data:
                    return
                unpacker.feed(data)
                for msg in unpacker:
                    self._dispatch(conn, packer, msg)
        except OSError:
            return
        finally:
            try:
                self._conns.remove(conn)
            except ValueError:
                pass
            conn.close()

    def _dispatch(self, conn: socket.socket, packer: msgpack.Packer, msg: Any) -> None:
        if not isinstance(msg, (list, tuple)) or not msg:
            return
        if msg[0] == NOTIFY and len(msg) == 3:
            try:
                self._handle(msg[1], list(msg[2]), None)
            except RPCFailure:
                pass
            return
        if msg[0] != REQUEST or len(msg) != 4:
            return
        _, msgid, method, params = msg
        try:
            result = self._handle(method, list(params), (conn, packer, msgid))
        except RPCFailure as e:
            conn.sendall(packer.pack([RESPONSE, msgid, str(e), None]))
            return
        if result is not _DEFERRED:
            conn.sendall(packer.pack([RESPONSE, msgid, None, result]))
        self._flush_finished()

    # ------------------------------------------------------------------ methods
    def _handle(self, method: str, params: list, reply_to: ReplyTo | None) -> Any:
        with self._lock:
            self.calls.append(method)
            self.last[method] = params
            if method in self.fail:
                raise RPCFailure(
                    f"rpclib: function '{method}' (called with {len(params)} arg(s)) threw an exception. "
                    f"The exception contained this information: {self.fail[method]}."
                )
            spec = METHODS.get(method)
            if spec is None:
                raise RPCFailure(
                    f"rpclib: server could not find function '{method}' with argument count {len(params)}."
                )
            lo, hi = spec
            if not lo <= len(params) <= hi:
                raise RPCFailure(
                    f"rpclib: function '{method}' was called with an invalid number of arguments. "
                    f"Expected: {hi}, got: {len(params)}"
                )
            return getattr(self, "_rpc_" + method)(reply_to, *params)

    def _vehicle(self, name: str) -> None:
        if name not in self.vehicles:
            raise self._throw(
                "",
                f"Vehicle API for '{name}' is not available. This could either because this is "
                "simulation-only API or this vehicle does not exist",
            )

    def _throw(self, method: str, info: str) -> RPCFailure:
        return RPCFailure(
            f"rpclib: function '{method or self.calls[-1]}' threw an exception. "
            f"The exception contained this information: {info}"
        )

    def _controlled(self, name: str) -> None:
        self._vehicle(name)
        if not self.api_control:
            raise self._throw("", "Vehicle cannot be controlled because EnableApiControl is not set")

    def _rpc_ping(self, _r: ReplyTo | None) -> bool:
        return True

    def _rpc_getServerVersion(self, _r: ReplyTo | None) -> int:
        return self.server_version

    def _rpc_getMinRequiredClientVersion(self, _r: ReplyTo | None) -> int:
        return self.min_client_version

    def _rpc_enableApiControl(self, _r: ReplyTo | None, on: bool, vehicle: str = "") -> None:
        self._vehicle(vehicle)
        self.api_control = bool(on)

    def _rpc_isApiControlEnabled(self, _r: ReplyTo | None, vehicle: str = "") -> bool:
        self._vehicle(vehicle)
        return self.api_control

    def _rpc_armDisarm(self, _r: ReplyTo | None, arm: bool, vehicle: str = "") -> bool:
        self._controlled(vehicle)
        self.armed = bool(arm)
        return True

    def _rpc_reset(self, _r: ReplyTo | None) -> None:
        self._reset_world()

    def _rpc_takeoff(self, _r: ReplyTo | None, timeout: float, vehicle: str = "") -> bool:
        self._controlled(vehicle)
        if not self.armed:
            raise self._throw("", "Vehicle is not armed")
        return True

    def _rpc_simSetVehiclePose(
        self, _r: ReplyTo | None, pose: dict[str, Any], ignore_collision: bool, vehicle: str = ""
    ) -> None:
        self._vehicle(vehicle)
        p, q = pose["position"], pose["orientation"]
        w = self.world
        w.pos[0] = ned_to_arena((p["x_val"], p["y_val"], p["z_val"]), self.origin)
        w.yaw[0] = arena_yaw_from_ned_quaternion(q["w_val"], q["x_val"], q["y_val"], q["z_val"])
        w.vel[0] = 0.0
        w.yaw_rate[0] = 0.0
        self.crashed = False
        if not ignore_collision and w.collided()[0]:
            self._record_collision()

    def _rpc_moveByVelocity(
        self,
        reply_to: ReplyTo | None,
        vx: float,
        vy: float,
        vz: float,
        duration: float,
        drivetrain: int,
        yaw_mode: dict[str, Any],
        vehicle: str = "",
    ) -> object:
        self._controlled(vehicle)
        if not yaw_mode.get("is_rate", True):
            raise self._throw("", "the fake AirSim server only supports yaw-rate YawMode")
        cmd = (np.array([vx, vy, vz], float), math.radians(float(yaw_mode.get("yaw_or_rate", 0.0))))
        n = max(1, int(round(float(duration) / self.cfg.vehicle.dt)))
        if self.paused:  # runs when the client continues the simulation; the reply waits for it
            self.pending.append([cmd, n, reply_to])
            return _DEFERRED
        for _ in range(n):
            self._advance(cmd)
        return False  # AirSim returns isTimeout() of the command: False when it ran its course

    def _rpc_simPause(self, _r: ReplyTo | None, paused: bool) -> None:
        self.paused = bool(paused)

    def _rpc_simIsPaused(self, _r: ReplyTo | None) -> bool:
        return self.paused

    def _rpc_simContinueForTime(self, _r: ReplyTo | None, seconds: float) -> None:
        n = max(1, int(round(float(seconds) / self.cfg.vehicle.dt)))
        for _ in range(n):
            job = self.pending[0] if self.pending else None
            self._advance(job[0] if job else (np.zeros(3), 0.0))
            if job:
                job[1] -= 1
                if job[1] <= 0:
                    self.pending.pop(0)
                    self.finished.append(job[2])
        self.paused = True

    def _rpc_simGetCollisionInfo(self, _r: ReplyTo | None, vehicle: str = "") -> dict[str, Any]:
        self._vehicle(vehicle)
        return self.collision

    def _rpc_getMultirotorState(self, _r: ReplyTo | None, vehicle: str = "") -> dict[str, Any]:
        self._vehicle(vehicle)
        w = self.world
        n, e, d = arena_to_ned(w.pos[0], self.origin)
        vn = vel_arena_to_ned(w.vel[0])
        qw, qx, qy, qz = yaw_quaternion_ned(float(w.yaw[0]))
        kin = {
            "position": _vec(n, e, d),
            "orientation": {"w_val": qw, "x_val": qx, "y_val": qy, "z_val": qz},
            "linear_velocity": _vec(*vn),
            "angular_velocity": _vec(0.0, 0.0, -float(w.yaw_rate[0])),
            "linear_acceleration": _vec(0, 0, 0),
            "angular_acceleration": _vec(0, 0, 0),
        }
        return {
            "collision": self.collision,
            "kinematics_estimated": kin,
            "gps_location": {"latitude": 47.641468, "longitude": -122.140165, "altitude": 122.0 - d},
            "timestamp": self.time_ns,
            "landed_state": 1,
            "rc_data": {"timestamp": 0, "is_valid": False},
            "ready": True,
            "ready_message": "",
            "can_arm": True,
        }

    def _rpc_simGetImages(
        self, _r: ReplyTo | None, requests: list[dict[str, Any]], vehicle: str = "", external: bool = False
    ) -> list[dict[str, Any]]:
        self._vehicle(vehicle)
        out = []
        for req in requests:
            cam, kind = str(req.get("camera_name")), req.get("image_type")
            if cam not in self.cameras:
                raise self._throw("", f"Camera with name '{cam}' was not found on vehicle '{vehicle}'")
            if kind not in (DEPTH_PLANAR, DEPTH_PERSPECTIVE) or not req.get("pixels_as_float"):
                raise self._throw(
                    "", f"the fake AirSim server renders only float depth (image_type 1 or 2), got {kind}"
                )
            out.append(self._render(kind))
        return out

    # ------------------------------------------------------------------ world
    def _reset_world(self) -> None:
        self.world.load([0], [self.scene])
        self.api_control = self.armed = self.paused = self.crashed = False
        self.pending: list = []  # moves issued while paused: [cmd, periods left, reply address]
        self.finished: list = []
        self.time_ns = 1_000_000_000
        self.collision = self._collision_info(False, "")

    def _advance(self, cmd: tuple[np.ndarray, float]) -> None:
        """One control period of the embedded dynamics under a world-frame NED velocity and a
        clockwise yaw rate, given as the body-frame setpoint the vehicle's yaw implies."""
        w = self.world
        self.time_ns += int(round(self.cfg.vehicle.dt * 1e9))
        if self.crashed:
            return
        v_ned, rate_cw = cmd
        body = world_to_body(vel_ned_to_arena(v_ned), float(w.yaw[0]))
        w.step(np.array([[body[0], body[1], body[2], -rate_cw]]))
        if w.collided()[0]:
            self._record_collision()

    def _record_collision(self) -> None:
        self.crashed = True  # it stops moving; the state keeps the velocity at impact
        self.collision = self._collision_info(True, "Obstacle")

    def _collision_info(self, hit: bool, name: str) -> dict:
        n, e, d = arena_to_ned(self.world.pos[0], self.origin)
        return {
            "has_collided": hit,
            "normal": _vec(0, 0, 0),
            "impact_point": _vec(n, e, d),
            "position": _vec(n, e, d),
            "penetration_depth": 0.0,
            "time_stamp": self.time_ns if hit else 0,
            "object_name": name,
            "object_id": 1 if hit else -1,
        }

    def _render(self, kind: int) -> dict:
        w, c = self.world, self.camera
        c.pos[:], c.yaw[:], c.cyl[:], c.box[:] = w.pos, w.yaw, w.cyl, w.box
        planar = c.depth()[0] * SKY_M  # metres along the optical axis
        if kind == DEPTH_PERSPECTIVE:
            u = np.tan(c.col_angle)[None, :]
            v = c.row_tan[:, None]
            planar = planar * np.sqrt(1.0 + u * u + v * v)
        h, wd = planar.shape
        n, e, d = arena_to_ned(w.pos[0], self.origin)
        qw, qx, qy, qz = yaw_quaternion_ned(float(w.yaw[0]))
        return {
            "image_data_uint8": b"",
            "image_data_float": planar.astype(np.float32).ravel().tolist(),
            "camera_position": _vec(n, e, d),
            "camera_orientation": {"w_val": qw, "x_val": qx, "y_val": qy, "z_val": qz},
            "time_stamp": self.time_ns,
            "message": "",
            "pixels_as_float": True,
            "compress": False,
            "width": wd,
            "height": h,
            "image_type": kind,
        }

    def _flush_finished(self) -> None:
        with self._lock:
            done, self.finished = self.finished, []
        for conn, packer, msgid in done:
            try:
                conn.sendall(packer.pack([RESPONSE, msgid, None, False]))
            except OSError:
                pass


_DEFERRED = object()


def _vec(x: float, y: float, z: float) -> dict[str, float]:
    return {"x_val": float(x), "y_val": float(y), "z_val": float(z)}


# method -> (min, max) parameter count; the clients differ: simGetImages has 2 params in
# Cosys-AirSim's client and 3 in Microsoft's
METHODS = {
    "ping": (0, 0),
    "getServerVersion": (0, 0),
    "getMinRequiredClientVersion": (0, 0),
    "enableApiControl": (2, 2),
    "isApiControlEnabled": (1, 1),
    "armDisarm": (2, 2),
    "reset": (0, 0),
    "takeoff": (2, 2),
    "simSetVehiclePose": (3, 3),
    "moveByVelocity": (7, 7),
    "simPause": (1, 1),
    "simIsPaused": (0, 0),
    "simContinueForTime": (1, 1),
    "simGetCollisionInfo": (1, 1),
    "getMultirotorState": (1, 1),
    "simGetImages": (2, 3),
}


def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(
        prog="python -m nav_env.airsim.fake_server",
        description="A scripted stand-in AirSim server (msgpack-rpc) for trying nav_env's AirSim backend.",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=41451)
    p.add_argument("--level", default="default", help="level whose arena, camera and dynamics the world uses")
    g = p.add_mutually_exclusive_group()
    g.add_argument(
        "--scene-seed",
        type=int,
        default=None,
        help="fill the arena with the static obstacles of the episode drawn from this seed (default: empty arena)",
    )
    g.add_argument(
        "--scene",
        default=None,
        help='a scene JSON file: {"cylinders": [[x, y, r], ...], "boxes": [[x0, y0, x1, y1], ...]}',
    )
    p.add_argument(
        "--write-scene",
        type=output_file,
        default=None,
        metavar="FILE",
        help="write the world's obstacles as a scene JSON, for AirSimNavEnv(scene=FILE)",
    )
    p.add_argument(
        "--image-size",
        type=int,
        nargs=2,
        metavar=("W", "H"),
        default=None,
        help="depth frame size (default: the level's)",
    )
    args = p.parse_args(argv)
    cfg = load_level(args.level)
    scene = Scene.load(args.scene) if args.scene else Scene()
    if args.scene_seed is not None:
        scene = Scene.from_episode(sample_episode(np.random.default_rng(args.scene_seed), cfg))
    if args.write_scene:
        print(f"scene written to {scene.save(args.write_scene)}")
    server = FakeAirSimServer(
        cfg, scene, host=args.host, port=args.port, image_size=tuple(args.image_size) if args.image_size else None
    )
    print(
        f"fake AirSim server on {server.host}:{server.port} (level {cfg.level}, "
        f"{len(scene.cylinders)} cylinders, {len(scene.boxes)} boxes); Ctrl-C to stop",
        flush=True,
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
