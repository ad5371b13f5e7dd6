"""``AutopilotNavEnv``: the nav_env task flown by a real autopilot (ArduPilot or PX4: a SITL build or a vehicle).

The env is a ground station. It never commands the vehicle: the bridge on the companion computer does, over its
own link (``firmware_bridge.serve --actuator mavlink``), with the action the env's caller got from the bridge. The
env opens a second MAVLink link (``telemetry``) as a ground station does, sends a GCS heartbeat, asks for
LOCAL_POSITION_NED and ATTITUDE at ``telemetry_hz`` (MAV_CMD_SET_MESSAGE_INTERVAL) and reads the vehicle's pose
from them. ``step()`` waits one control period (``vehicle.dt``) of the autopilot's clock (the messages'
``time_boot_ms``, so a SITL run with ``--speedup`` keeps the task's timing) and reads where the vehicle went.

Episodes: ``reset(seed=s)`` draws the level's episode exactly as the embedded simulator does for the same seed
(start, yaw, goal, obstacles), waits until the vehicle stands still (speed below ``settle_speed_mps``), and places
the episode on it: the arena is moved and turned so that the vehicle is at the episode's start with the episode's
heading. Obstacles, walls, floor and ceiling are virtual: the depth image is the embedded simulator's camera
ray-cast at the vehicle's position and heading, a collision is the vehicle's position touching one of them
(``BatchSim.collided``), and success, reward and time-out are ``BatchSim.score``'s. The autopilot's vehicle
flies on in its own (empty) world. An episode's floor is ``arena.altitude`` below the start: take off higher.

Spaces, ``info`` and rewards are the embedded simulator's; with ``observation.attitude`` the observation's roll,
pitch and body rates are ATTITUDE's (the camera itself stays level: it is ray cast at the vehicle's heading). The
link's facts (autopilot, firmware, frame, the
autopilot clock's speed against the wall clock) are in :meth:`describe`.
"""

from __future__ import annotations

import math
import struct
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from firmware_bridge.mavlink_link import AutopilotState, MavlinkLink
from nav_env.arena import Episode, sample_episode
from nav_env.common import ResetReturn, StepReturn, TaskEnv
from nav_env.config import NavConfig
from nav_env.sim import BatchSim

FLIP = np.array([1.0, -1.0, -1.0])  # NED (north, east, down) -> a right-handed frame with z up
REQUEST_AGAIN_S = 5.0  # message intervals are asked again while they do not arrive at the asked rate
# the parameters that say which frame an autopilot flies
FRAME_PARAMS = {"ardupilot": ("FRAME_CLASS", "FRAME_TYPE"), "px4": ("SYS_AUTOSTART", "CA_AIRFRAME")}


class AutopilotLinkError(RuntimeError):
    """The autopilot's telemetry did not arrive (the one-line message says what was missing, and where)."""


@dataclass
class PoseSample:
    time_ms: int  # the autopilot's time_boot_ms
    position_ned: np.ndarray  # m, from the EKF's origin
    velocity_ned: np.ndarray  # m/s


@dataclass
class AttitudeSample:
    time_ms: int
    yaw_ned: float  # rad, clockwise from north
    yaw_rate_ned: float  # rad/s, clockwise seen from above
    roll_frd: float = 0.0  # rad, right side down positive (MAVLink's ATTITUDE: body frame forward, right, down)
    pitch_frd: float = 0.0  # rad, nose up positive
    roll_rate_frd: float = 0.0  # rad/s
    pitch_rate_frd: float = 0.0  # rad/s


def param_number(msg: Any, bytewise: bool) -> float:
    """A PARAM_VALUE's number. PX4 sends integer parameters bytewise (MAV_PROTOCOL_CAPABILITY_PARAM_ENCODE_BYTEWISE:
    the int's bytes in the float field), ArduPilot as a float's value."""
    if bytewise and msg.param_type in (5, 6):  # MAV_PARAM_TYPE_UINT32, MAV_PARAM_TYPE_INT32
        return float(struct.unpack("<i" if msg.param_type == 6 else "<I", struct.pack("<f", msg.param_value))[0])
    return float(msg.param_value)


class Telemetry:
    """A ground station's MAVLink link (firmware_bridge.mavlink_link in the ``gcs`` role, ``endpoint`` in its
    grammar: ValueError otherwise): heartbeats and the vehicle's facts from the link, and here the pose and attitude
    streams, asked at ``telemetry_hz`` once the autopilot is heard and again while they do not arrive at that rate,
    and the frame's parameters (``frame_params``)."""

    def __init__(self, endpoint: str, telemetry_hz: float = 50.0) -> None:
        if not 1.0 <= telemetry_hz <= 200.0:
            raise ValueError(f"telemetry_hz must be within 1..200, got {telemetry_hz}")
        self.telemetry_hz = float(telemetry_hz)
        self.pose: PoseSample | None = None
        self.attitude: AttitudeSample | None = None
        # the last twenty seconds of poses at 50 Hz, with the wall time (time.monotonic) each arrived
        self.poses: deque[tuple[float, PoseSample]] = deque(maxlen=1024)
        self.new_pose = threading.Condition()
        self.targets: deque[tuple[float, Any]] = deque(maxlen=1024)  # (wall time, POSITION_TARGET_LOCAL_NED)
        self.frame_params: dict[str, float] = {}
        self._next_request: float | None = None  # when the streams are checked again; None: no autopilot heard yet
        self.link = MavlinkLink(endpoint, "gcs", on_message=self._on_message, on_tick=self._on_tick,
                                thread_name="airq-telemetry")  # fmt: skip
        self.endpoint = endpoint
        self.mav = self.link.mav
        self.state: AutopilotState = self.link.state
        # the autopilot's last messages (PX4 sends them to ground stations only)
        self.statustext: deque[str] = self.link.statustext
        self.link.start()

    # ------------------------------------------------------------------ the reader's part
    def _on_tick(self, now: float) -> None:
        if self._next_request is not None and now >= self._next_request:
            if not self._streaming():
                self._request_streams()
                if self.state.firmware is None:
                    self.link.request_version()
            self._next_request = now + REQUEST_AGAIN_S

    def _streaming(self) -> bool:
        poses = list(self.poses)[-50:]
        if len(poses) < 10 or time.monotonic() - poses[-1][0] > 1.0:
            return False
        span_ms = poses[-1][1].time_ms - poses[0][1].time_ms
        return span_ms > 0 and (len(poses) - 1) / (span_ms / 1000.0) >= 0.7 * self.telemetry_hz

    def request_interval(self, msg_id: int, hz: float) -> None:
        """Ask the autopilot to send message ``msg_id`` at ``hz`` on this link (MAV_CMD_SET_MESSAGE_INTERVAL)."""
        self.link.command(self.mav.MAV_CMD_SET_MESSAGE_INTERVAL, msg_id, 1e6 / hz)

    def _request_streams(self) -> None:
        for msg_id in (self.mav.MAVLINK_MSG_ID_LOCAL_POSITION_NED, self.mav.MAVLINK_MSG_ID_ATTITUDE):
            self.request_interval(msg_id, self.telemetry_hz)

    def _request_param(self, name: str) -> None:
        s = self.state
        self.link.send(lambda m: m.param_request_read_send(s.system, s.component, name.encode(), -1))

    def _on_message(self, msg: Any, now: float) -> None:
        kind = msg.get_type()
        if kind == "LOCAL_POSITION_NED":
            sample = PoseSample(
                int(msg.time_boot_ms), np.array([msg.x, msg.y, msg.z], float), np.array([msg.vx, msg.vy, msg.vz], float)
            )
            with self.new_pose:
                if self.poses and sample.time_ms < self.poses[-1][1].time_ms:
                    self.poses.clear()  # the autopilot rebooted: its clock started again
                self.pose = sample
                self.poses.append((now, sample))
                self.new_pose.notify_all()
        elif kind == "POSITION_TARGET_LOCAL_NED":  # only when asked for (request_interval): what the autopilot flies to
            self.targets.append((now, msg))
        elif kind == "ATTITUDE":
            self.attitude = AttitudeSample(
                int(msg.time_boot_ms), float(msg.yaw), float(msg.yawspeed),
                float(msg.roll), float(msg.pitch), float(msg.rollspeed), float(msg.pitchspeed),
            )  # fmt: skip
        elif kind == "HEARTBEAT" and self._next_request is None:  # the link passes on the autopilot's only
            self._next_request = now  # checked at the next turn too: a request may be lost
            self._request_streams()
            s = self.state
            assert s.autopilot is not None and s.system is not None and s.component is not None
            for name in FRAME_PARAMS[s.autopilot]:
                self._request_param(name)
        elif kind == "PARAM_VALUE":
            name = msg.param_id if isinstance(msg.param_id, str) else msg.param_id.decode()
            autopilot = self.state.autopilot
            if autopilot and name in FRAME_PARAMS[autopilot]:
                self.frame_params[name] = param_number(msg, bytewise=autopilot == "px4")

    # ------------------------------------------------------------------ what callers read
    def wait_streaming(self, timeout_s: float) -> None:
        """Until pose and attitude arrive at the asked rate; AutopilotLinkError after ``timeout_s``."""
        end = time.monotonic() + timeout_s
        while not (self._streaming() and self.attitude is not None):
            if time.monotonic() > end:
                heard = "no heartbeat" if self.state.last_heartbeat_s is None else f"{self.state.autopilot}'s heartbeat"
                raise AutopilotLinkError(
                    f"no LOCAL_POSITION_NED and ATTITUDE at {self.telemetry_hz:g} Hz on {self.endpoint} within "
                    f"{timeout_s:g} s ({heard}; a vehicle needs a position estimate: GPS, or an EKF origin)"
                )
            time.sleep(0.05)

    def wait_pose_after(self, time_ms: int, timeout_s: float) -> PoseSample:
        """The first pose at or after the autopilot time ``time_ms``; AutopilotLinkError if none comes in
        ``timeout_s`` of wall time."""
        with self.new_pose:
            ok = self.new_pose.wait_for(lambda: self.pose is not None and self.pose.time_ms >= time_ms, timeout_s)
            if not ok:
                last_pose = self.poses[-1][0] if self.poses else None
                heard = self.state.last_heartbeat_s
                # a heartbeat a second or more after the last pose: the link lives, the autopilot has no position
                if last_pose is not None and heard is not None and heard >= last_pose + 1.0:
                    raise AutopilotLinkError(
                        f"no LOCAL_POSITION_NED from the autopilot on {self.endpoint} for {timeout_s:g} s while its "
                        f"heartbeat goes on (mode {self.state.mode}): it has lost its position estimate (GPS, EKF)"
                        + (f"; it said: {self.statustext[-1]}" if self.statustext else "")
                    )
                raise AutopilotLinkError(f"no LOCAL_POSITION_NED from the autopilot on {self.endpoint} for "
                                         f"{timeout_s:g} s: its telemetry link is lost")  # fmt: skip
            assert self.pose is not None
            return self.pose

    def speedup(self) -> float | None:
        """The autopilot's clock against the wall clock over the recent poses (1.0 for a real vehicle; a SITL's
        --speedup), or None before there are enough of them."""
        poses = list(self.poses)
        if len(poses) < 10 or poses[-1][0] - poses[0][0] < 0.2:
            return None
        return (poses[-1][1].time_ms - poses[0][1].time_ms) / 1000.0 / (poses[-1][0] - poses[0][0])

    def close(self) -> None:
        self.link.close()


def rot_z(angle: float) -> np.ndarray:
    c, s = math.cos(angle), math.sin(angle)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


@dataclass(frozen=True, slots=True)
class VehicleDescription:
    """Which autopilot, firmware and frame flew, over which link, and how fast its clock ran (report.json's
    ``vehicle``, whose keys are these fields in this order)."""

    autopilot: str | None  # "ardupilot" or "px4"; None until its heartbeat is heard
    firmware: str | None  # major.minor.patch
    firmware_git: str | None
    frame: str | None  # MAV_TYPE without its prefix, e.g. QUADROTOR
    frame_params: dict[str, float]
    telemetry: str  # the ground station's MAVLink endpoint
    telemetry_hz: float
    speedup: float | None  # the autopilot's clock against the host's; None: not measured yet
    settle_s_mean: float | None  # mean wait for the vehicle to settle between episodes; None: none waited

    def to_json(self) -> dict[str, Any]:
        """The fields as a map, in their order."""
        return asdict(self)


class AutopilotNavEnv(TaskEnv):
    """The nav_env task on an autopilot's vehicle; see the module docstring for the contract.

    ``telemetry``: the ground station's MAVLink endpoint (``tcp:127.0.0.1:5762`` for ArduCopter SITL's second
    serial port, ``udpin:0.0.0.0:14550`` for PX4's ground-station stream, ``serial:/dev/ttyUSB0:57600`` for a
    telemetry radio). ``settle_speed_mps``: a reset waits until the vehicle is slower than this (and turns slower
    than 0.1 rad/s) for half a second of the autopilot's time, at most ``settle_timeout_s`` of wall time.
    ``link_timeout_s``: wall time without telemetry before a step raises AutopilotLinkError.
    """

    def __init__(
        self,
        level: str = "default",
        render_mode: str | None = None,
        config: NavConfig | None = None,
        overrides: dict[str, Any] | None = None,
        *,
        telemetry: str,
        telemetry_hz: float = 50.0,
        settle_speed_mps: float = 0.3,
        settle_timeout_s: float = 30.0,
        link_timeout_s: float = 3.0,
        connect_timeout_s: float = 120.0,
    ):
        self.set_up_task(level, render_mode, config, overrides)
        self.settle_speed_mps, self.settle_timeout_s = float(settle_speed_mps), float(settle_timeout_s)
        self.link_timeout_s = float(link_timeout_s)
        self.sim = BatchSim(self.cfg, 1)  # the virtual world: obstacles, camera, collisions, scoring
        self.telemetry = Telemetry(telemetry, telemetry_hz)
        try:
            self.telemetry.wait_streaming(connect_timeout_s)
        except BaseException:
            self.telemetry.close()
            raise
        self.episode: Episode | None = None
        self.trajectory: list[np.ndarray] = []
        self.settle_s: list[float] = []  # wall seconds each reset waited for the vehicle to stand still
        self._origin_ned = np.zeros(3)
        self._turn = rot_z(0.0)
        self._yaw_offset = 0.0
        self.time_ms = 0  # the autopilot's time_boot_ms of the current observation
        self._period_end_ms = 0.0  # when the current control period ends, in the autopilot's time
        self._done = True

    # ------------------------------------------------------------------ frames
    def _arena_position(self, pose: PoseSample) -> np.ndarray:
        """The vehicle's position in the episode's arena frame."""
        assert self.episode is not None
        return self.episode.start + self._turn @ (FLIP * (pose.position_ned - self._origin_ned))

    def _set_motion(self, pose: PoseSample, att: AttitudeSample) -> None:
        """The vehicle's velocity, yaw, yaw rate and attitude, in the arena frame, into the bookkeeping sim (the
        body frame forward, right, down of MAVLink turned to forward, left, up: pitch and its rate change sign)."""
        self.sim.place_vehicle(
            0,
            vel=self._turn @ (FLIP * pose.velocity_ned),
            yaw=math.remainder(-att.yaw_ned + self._yaw_offset, 2 * math.pi),
            yaw_rate=-att.yaw_rate_ned,
            attitude=(att.roll_frd, -att.pitch_frd, att.roll_rate_frd, -att.pitch_rate_frd),
        )

    def _wait_still(self) -> tuple[PoseSample, AttitudeSample]:
        t = self.telemetry
        wall_start = time.monotonic()
        still_since: int | None = None
        while True:
            pose = t.wait_pose_after((t.pose.time_ms + 1) if t.pose else 0, self.link_timeout_s)
            att = t.attitude
            assert att is not None
            speed = float(np.linalg.norm(pose.velocity_ned))
            if speed < self.settle_speed_mps and abs(att.yaw_rate_ned) < 0.1:
                still_since = pose.time_ms if still_since is None else still_since
                if pose.time_ms - still_since >= 500:
                    self.settle_s.append(time.monotonic() - wall_start)
                    return pose, att
            else:
                still_since = None
            if time.monotonic() - wall_start > self.settle_timeout_s:
                raise AutopilotLinkError(
                    f"the vehicle still moves at {speed:.2f} m/s ({att.yaw_rate_ned:.2f} rad/s) "
                    f"{self.settle_timeout_s:g} s after the episode ended: is the bridge holding it (mode {t.state.mode})?"
                )

    # ------------------------------------------------------------------ gymnasium API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetReturn:
        super().reset(seed=seed)
        episode = self.next_episode(options, sample_episode)
        self._done = True
        pose, att = self._wait_still()
        self.episode = episode
        self.sim.load([0], [episode])
        self._origin_ned = pose.position_ned.copy()
        # the arena turned so that the vehicle's heading is the episode's (arena yaw = -NED yaw + offset)
        self._yaw_offset = float(episode.yaw) + att.yaw_ned
        self._turn = rot_z(self._yaw_offset)
        self.sim.place_vehicle(0, pos=self._arena_position(pose))  # the episode's start
        self._set_motion(pose, att)
        self.time_ms = pose.time_ms
        self._period_end_ms = pose.time_ms + self.cfg.vehicle.dt * 1000.0
        self.trajectory = [self.sim.pos[0].copy()]
        self._done = False
        return self.sim.observe()[0], self.sim.info(0, False, False)

    def step(self, action: Any) -> StepReturn:
        """Wait one control period of the autopilot's clock (the bridge flies ``action``) and score the pose."""
        if self._done or self.episode is None:
            raise RuntimeError("step() called before reset() or after the episode ended; call reset()")
        dt_ms = self.cfg.vehicle.dt * 1000.0
        # Periods end on a grid from the episode's start, so the telemetry's spacing (a pose may come up to one
        # telemetry period after a period's end) does not add up over the episode; a host that fell behind by
        # more than a period starts a new grid instead of catching up. A pose within a millisecond of the end is
        # that end (time_boot_ms counts whole milliseconds).
        pose = self.telemetry.wait_pose_after(int(round(self._period_end_ms)) - 1, self.link_timeout_s)
        self._period_end_ms += dt_ms
        if pose.time_ms > self._period_end_ms:
            self._period_end_ms = pose.time_ms + dt_ms
        att = self.telemetry.attitude
        assert att is not None
        s = self.sim
        period_s = (pose.time_ms - self.time_ms) / 1000.0
        s.track((self._arena_position(pose) - s.pos[0])[None], period_s)
        self._set_motion(pose, att)
        if s.has_moving:
            s.move_obstacles(np.float32(period_s))
        self.time_ms = pose.time_ms
        reward, terminated, truncated, collision, success = s.score(s.collided(), period_s / self.cfg.vehicle.dt)
        self.trajectory.append(s.pos[0].copy())
        self._done = bool(terminated[0] or truncated[0])
        if self._done and self.cfg.curriculum.enabled:
            self.curriculum.record(self.episode.zone, bool(success[0]))
        return (
            s.observe()[0],
            float(reward[0]),
            bool(terminated[0]),
            bool(truncated[0]),
            s.info(0, bool(collision[0]), bool(success[0])),
        )

    def describe(self) -> VehicleDescription:
        """Which autopilot, firmware and frame flew, over which link, and how fast its clock ran."""
        t = self.telemetry
        f, speedup = t.state, t.speedup()
        return VehicleDescription(
            autopilot=f.autopilot,
            firmware=f.firmware,
            firmware_git=f.firmware_git,
            frame=f.mav_type,
            frame_params=dict(t.frame_params),
            telemetry=t.endpoint,
            telemetry_hz=t.telemetry_hz,
            speedup=None if speedup is None else round(speedup, 3),
            settle_s_mean=round(float(np.mean(self.settle_s)), 3) if self.settle_s else None,
        )

    def close(self) -> None:
        t: Telemetry | None = getattr(self, "telemetry", None)  # None: __init__ failed before the link opened
        if t is not None:
            t.close()
