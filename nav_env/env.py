"""The single navigation environment (Gymnasium API)."""

from __future__ import annotations

from typing import Any

import numpy as np

from nav_env.actions import DISCRETE_ACTIONS, N_DISCRETE_ACTIONS
from nav_env.arena import Episode, sample_episode
from nav_env.backends import simulator
from nav_env.common import (
    ResetReturn,
    StepReturn,
    TaskEnv,
    check_latency,
    commands,
)
from nav_env.config import NavConfig
from nav_env.sim import BatchSim, SingleSim


class NavEnv(TaskEnv):
    """Point-to-point drone navigation through obstacles, after Air Learning.

    ## Description
    A multirotor flies at a held altitude in a walled arena (default 30 x 30 m, ceiling 10 m) from a
    random start to a goal point, seeing a forward depth camera. Obstacles are vertical prisms from
    floor to ceiling: cylinders ("columns") and axis-aligned boxes; the ``hard`` level adds moving
    cylinders and a noisy camera. Levels live in ``nav_env/levels/*.toml``.

    ## Action space
    ``Discrete(25)`` (``task.action_type = "discrete"``), body-frame velocity / yaw-rate setpoints:

    | index | action | vx, vy (m/s) | yaw rate (deg/s) |
    |-------|--------|--------------|------------------|
    | 0-4   | forward | 5, 4, 3, 2, 1 forward | 0 |
    | 5, 6  | diagonal left | 3 m/s at 60, 30 deg left | 0 |
    | 7     | hover | 0 | 0 |
    | 8, 9  | diagonal right | 3 m/s at 30, 60 deg right | 0 |
    | 10-12 | back | 1, 2, 3 backwards | 0 |
    | 13, 14| back-left, back-right | 2 m/s at 135 deg | 0 |
    | 15-19 | yaw left | 0 | 15, 30, 45, 60, 90 |
    | 20-24 | yaw right | 0 | -15, -30, -45, -60, -90 |

    ``Box(4)`` (``"continuous"``): ``[vx, vy, vz, yaw_rate]`` within +-``vehicle.max_speed`` m/s and
    +-``vehicle.max_yaw_rate`` rad/s. An action outside the space raises ``ValueError``: it is never
    clipped silently. The vehicle follows each setpoint with a first-order response (time constant
    ``vehicle.tau``) over one control period ``vehicle.dt`` (0.1 s).

    ## Observation space
    One flat ``float32`` vector of ``W*H + 8`` values (default 32*32 + 8 = 1032):

    | index | observation | min | max |
    |-------|-------------|-----|-----|
    | 0 .. W*H-1 | planar depth image, row-major from the top-left pixel, / ``camera.max_range`` | 0 | 1 |
    | W*H + 0 | distance to goal / arena diagonal | 0 | 1 |
    | W*H + 1 | sin(bearing to goal), bearing counter-clockwise from the nose | -1 | 1 |
    | W*H + 2 | cos(bearing to goal) | -1 | 1 |
    | W*H + 3 | forward velocity / ``vehicle.max_speed`` | -1 | 1 |
    | W*H + 4 | leftward velocity / ``vehicle.max_speed`` | -1 | 1 |
    | W*H + 5 | upward velocity / ``vehicle.max_speed`` | -1 | 1 |
    | W*H + 6 | yaw rate / ``vehicle.max_yaw_rate`` | -1 | 1 |
    | W*H + 7 | altitude / ``arena.ceiling`` | 0 | 1 |

    With ``observation.attitude`` (a level's ``[observation]`` table; off on the shipped levels) 5 values
    follow, ``W*H + 13`` in all: roll, pitch / ``ATTITUDE_SCALE_RAD`` (45 degrees; body frame x forward, y left,
    z up: a roll to the right and a nose-down pitch are positive), body rates p, q, r /
    ``BODY_RATE_SCALE_RAD_S`` (4 rad/s), each in [-1, 1]. The point mass flies level (0, 0, 0, 0, yaw rate);
    the ``mujoco`` backend's rigid body reports its own, the ``autopilot`` backend the autopilot's (MAVLink's
    ATTITUDE). The AirSim backend does not read its vehicle's attitude and refuses such a level.

    The camera (default 32 x 32, 90 degree horizontal FOV, 10 m range) sees obstacles, walls, floor
    and ceiling; a pixel with no return within range reads 1. On ``hard`` the depth carries Gaussian
    noise (``camera.noise_std``) and dropout to 0 (``camera.dropout``). The observation is complete:
    a policy needs nothing else.

    Camera size: ``camera.height`` x ``camera.width`` (overrides or a level file) sets the image;
    ``camera.vfov_deg`` the vertical view (0, the default: square pixels). Air Learning's 144 x 256
    depth image (36,864 pixels, 36,872 observation values) with the default camera's 90 x 90 degree
    view is ``overrides=nav_env.config.camera_overrides("144x256")``; each of its 8 x 4.5-pixel blocks
    covers one pixel of the 32 x 32 image. The 32 x 32 default is unchanged by these keys.

    ## Rewards
    Per step: ``reward.step`` (-0.01) plus ``reward.progress`` (0.5) per metre gained toward the goal;
    ``reward.success`` (+10) on reaching the goal; ``reward.collision`` (-10) on a collision.

    ## Starting state
    Start and goal are at least ``arena.spawn_margin`` from the walls and ``obstacles.clearance`` from
    every obstacle; the start yaw is uniform. The goal distance is drawn from a goal zone
    (default 8-14, 14-20, 20-27, 27-34 m), uniformly over all zones unless ``options={"zone": k}``
    or the curriculum (``curriculum.enabled``) picks it. ``options={"episode": nav_env.arena.Episode(...)}``
    plays a hand-built scene instead. Every episode is checked solvable by a
    grid planner on the static obstacles, and redrawn if not.

    ## Episode end
    Terminated on success (within ``task.success_radius`` = 1.5 m of the goal) or collision (with an
    obstacle, a wall, the floor or the ceiling; vehicle radius ``vehicle.radius`` = 0.3 m).
    Truncated after ``task.max_steps`` (500) steps: a time limit is not a terminal state.
    ``info`` carries ``is_success``, ``collision``, ``distance_to_goal``, ``path_length``,
    ``start_distance``, ``steps``, ``flight_time`` (simulated seconds) and ``zone``.

    ## Latency
    By default the world waits for the policy (lockstep): each action applies from the start of its
    period. :meth:`set_latency` makes the world keep flying while the policy thinks, as on a real
    drone: ``set_latency(delay_s, period_s=None)`` applies to every following step until changed.
    The action answering an observation reaches the flight controller ``delay_s`` seconds after that
    observation; until then the vehicle follows the setpoint the controller holds (the previous
    action's, hover at the start of an episode), then the new one for the rest of the period. A
    delay of a whole period or more lands the action in a later period (the controller keeps its
    last setpoint meanwhile; actions land in order of arrival). ``period_s`` (default
    ``vehicle.dt``) sets this step's length, e.g. "as fast as the device answers" is
    ``set_latency(d, period_s=d)`` with the device's time ``d`` per act. The time limit is
    ``task.max_steps`` x ``vehicle.dt`` seconds of flight, and the step cost is per ``vehicle.dt``.
    A delay of zero gives the lockstep trajectories bit for bit; the same seed and delay sequence
    give the same episode. ``nav_env.vector.NavVectorEnv.set_latency`` takes one delay per env.

    ## Backends
    ``backend="embedded"`` (default): the vehicle above, a kinematic point mass. ``backend="mujoco"`` (the
    ``dynamics`` extra): a rigid-body quadrotor (PX4's Iris model) in MuJoCo under a cascaded flight
    controller (velocity -> acceleration -> attitude -> body rates -> mixer -> motors) that holds each
    setpoint between actions; obstacles are MuJoCo geoms, the depth image is ray cast by MuJoCo at the
    camera's pose (tilting with the airframe unless gimballed), collisions are MuJoCo contacts, and the
    latency contract above holds with setpoints taking over at the physics step (4 ms) at or after their
    arrival. Spaces, levels, seeds, rewards and ``info`` are the same, ``info`` adding ``tilt`` (the airframe's
    largest and mean tilt from vertical this episode, ``max_deg`` and ``mean_deg``, sampled at the end of each
    control period) and, where the dynamics randomize, ``physics``; ``dynamics`` (a
    :class:`nav_env.dynamics.config.DynamicsConfig` or a TOML path) configures the airframe and the
    controller (``nav_env/dynamics/iris.toml``; docs/dynamics.md).

    ## Arguments
    ``NavEnv(level="default", render_mode=None, config=None, overrides=None, backend="embedded",
    dynamics=None)``: ``level`` is a level
    name (``easy``, ``default``, ``hard``) or a path to a level TOML; ``overrides`` maps dotted keys to
    values, e.g. ``{"camera.width": 64, "camera.height": 64}``; ``config`` passes a ready
    :class:`NavConfig`. ``render_mode="rgb_array"`` renders a top-down map with the path and goal
    beside the depth image.

    ## Examples
    >>> import gymnasium as gym, nav_env
    >>> env = gym.make("AirNav-v0")                       # the default level
    >>> obs, info = env.reset(seed=0)
    >>> envs = gym.make_vec("AirNav-Hard-v0", num_envs=64, vectorization_mode="vector_entry_point")

    Same seed, same episode: ``reset(seed=s)`` fixes the arena, start, goal and camera noise, so the
    same actions give the same trajectory here and in :class:`nav_env.vector.NavVectorEnv`.
    """

    def __init__(
        self,
        level: str = "default",
        render_mode: str | None = None,
        config: NavConfig | None = None,
        overrides: dict[str, Any] | None = None,
        backend: str = "embedded",
        dynamics: Any = None,
    ):
        self.set_up_task(level, render_mode, config, overrides)
        # embedded: SingleSim, the batch simulator with a fast path for one env (bit for bit the batch code's
        # results; a plain BatchSim put here steps through the batch code, as the equivalence tests do)
        self.backend = backend
        self.sim: BatchSim = simulator(self.cfg, 1, backend, dynamics, single=True)
        self._discrete = self.cfg.task.action_type == "discrete"
        self.episode = None
        self.trajectory: list[np.ndarray] = []
        self._done = True
        self._last_obs: np.ndarray | None = None
        self._delay: np.ndarray | None = None  # lockstep
        self._period: np.ndarray | None = None

    def set_latency(self, delay_s: float = 0.0, period_s: float | None = None) -> None:
        """The delay of every following action and the length of every following step (see ## Latency)."""
        delay, period = check_latency(delay_s, period_s, 1)
        self._delay, self._period = delay, period

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetReturn:
        super().reset(seed=seed)
        return self._start(self.next_episode(options, sample_episode))

    def _start(self, episode: Episode) -> ResetReturn:
        self.episode = episode
        sim = self.sim
        sim.load([0], [self.episode])
        self.trajectory = [sim.pos[0].copy()]
        self._done = False
        if isinstance(sim, SingleSim):
            self._last_obs = sim.observe_one()
            return self._last_obs, sim.info_one(False, False)
        self._last_obs = sim.observe()[0]
        return self._last_obs, sim.info(0, False, False)

    def step(self, action: Any) -> StepReturn:
        if self._done or self.episode is None:
            raise RuntimeError("step() called before reset() or after the episode ended; call reset()")
        sim = self.sim
        if not isinstance(sim, SingleSim):
            return self._step_batch(action)
        if (
            self._discrete
            and isinstance(action, (int, np.integer))
            and not isinstance(action, bool)
            and 0 <= action < N_DISCRETE_ACTIONS
        ):
            cmd = DISCRETE_ACTIONS[int(action)]  # what commands() gives for it, without the batch checks
        else:
            cmd = commands(np.asarray(action)[None] if np.ndim(action) < 2 else action, self.cfg, 1)[0]
        reward, terminated, truncated, collision, success = sim.step_one(cmd, self._delay, self._period)
        self.trajectory.append(sim.pos[0].copy())
        self._done = terminated or truncated
        if self._done and self.cfg.curriculum.enabled:
            self.curriculum.record(self.episode.zone, success)
        self._last_obs = sim.observe_one()
        return self._last_obs, reward, terminated, truncated, sim.info_one(collision, success)

    def _step_batch(self, action: Any) -> StepReturn:
        """The step through the batch code (self.sim a plain BatchSim): the reference of the fast path."""
        cmd = commands(np.asarray(action)[None] if np.ndim(action) < 2 else action, self.cfg, 1)
        reward, terminated, truncated, collision, success = self.sim.step(cmd, self._delay, self._period)
        self.trajectory.append(self.sim.pos[0].copy())
        self._done = bool(terminated[0] or truncated[0])
        if self._done and self.cfg.curriculum.enabled and self.episode is not None:
            self.curriculum.record(self.episode.zone, bool(success[0]))
        self._last_obs = self.sim.observe()[0]
        return (
            self._last_obs,
            float(reward[0]),
            bool(terminated[0]),
            bool(truncated[0]),
            self.sim.info(0, bool(collision[0]), bool(success[0])),
        )
