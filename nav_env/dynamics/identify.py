"""The flight controller's designed step response, the dynamic vehicle's measured one, and the kinematic
model's time constant fitted to it (a system identification of nav_env's embedded vehicle against MuJoCo).

    python -m nav_env.dynamics.identify [--dynamics FILE] [--physics-step S] [--out FILE]

**Design**: the horizontal velocity loop linearised about a hover: velocity PI -> tilt setpoint (``a / g``)
-> attitude P -> body-rate PI -> angular acceleration through the motors' lag (the mean of their up and down
time constants) -> tilt -> ``g * tilt`` minus rotor drag. Its step response (scipy) gives the rise time
(10-90 %) and overshoot the gains were chosen for. **Measured**: the MuJoCo vehicle, hovering in an empty
arena, given a step in the forward-velocity (or yaw-rate) setpoint, sampled every 20 ms for 3 s.
**Identified**: the embedded vehicle follows each setpoint through ``1 - exp(-t / tau)``; ``tau`` is fitted
(least squares) to the measured responses, for velocity steps of 1-5 m/s and yaw-rate steps of 15-90 deg/s
(the discrete actions' range) and for all of them together, as ``vehicle.tau`` is one constant.
"""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass

import numpy as np

from airq_cli import ArgumentParser, output_file, run, write_json
from nav_env.arena import FAR, Episode, slot_counts
from nav_env.config import NavConfig, load_level
from nav_env.dynamics.config import GRAVITY, DynamicsConfig, load_dynamics

SAMPLE_S = 0.02  # s between samples of a measured response
DURATION_S = 3.0
VELOCITY_STEPS = (1.0, 3.0, 5.0)  # m/s
YAW_STEPS_DEG = (15.0, 45.0, 90.0)  # deg/s


@dataclass(frozen=True)
class StepFigures:
    """A unit-normalised step response: 10-90 % rise time, overshoot above 1, time of the peak, value at the end."""

    rise_time_s: float
    overshoot: float
    peak_time_s: float
    final: float

    @classmethod
    def of(cls, t: np.ndarray, y: np.ndarray) -> StepFigures:
        rise = float(t[np.argmax(y >= 0.9)] - t[np.argmax(y >= 0.1)]) if (y >= 0.9).any() else float("inf")
        k = int(np.argmax(y))
        return cls(rise, max(0.0, float(y[k]) - 1.0), float(t[k]), float(y[-1]))


def designed_velocity_step(dyn: DynamicsConfig, duration_s: float = DURATION_S) -> tuple[np.ndarray, np.ndarray]:
    """The linearised horizontal velocity loop's unit step response (t, v) (module docstring)."""
    # deferred: scipy: over a second to import
    from scipy import signal

    v, att, r, m = dyn.velocity_loop, dyn.attitude_loop, dyn.rate_loop, dyn.motors
    drag = m.rotor_drag * 4 * dyn.hover_rotor_speed / dyn.airframe.mass  # 1/s: rotor drag per m/s, per kg
    lag = (m.time_constant_up + m.time_constant_down) / 2
    kp, ki, ka, kr, kri = v.p_xy, v.i_xy, att.p_roll_pitch, r.p_roll_pitch, r.i_roll_pitch
    # states: velocity, tilt, tilt rate, velocity integral, rate integral, angular acceleration; input: setpoint
    a, b = np.zeros((6, 6)), np.zeros((6, 1))
    a[0, 0], a[0, 1] = -drag, GRAVITY
    a[1, 2] = 1.0
    a[2, 5] = 1.0
    a[3, 0], b[3, 0] = -ki, ki
    rate_error = np.array([-ka * kp / GRAVITY, -ka, -1.0, ka / GRAVITY, 0.0, 0.0])  # and + ka kp / g * setpoint
    rate_error_in = ka * kp / GRAVITY
    a[4], b[4, 0] = kri * rate_error, kri * rate_error_in
    a[5] = kr * rate_error / lag
    a[5, 4] += 1.0 / lag
    a[5, 5] -= 1.0 / lag
    b[5, 0] = kr * rate_error_in / lag
    t = np.arange(0.0, duration_s + 1e-9, 0.001)
    _, y = signal.step(signal.StateSpace(a, b, np.eye(6)[:1], np.zeros((1, 1))), T=t)
    return t, np.asarray(y).reshape(-1)


def empty_arena_episode(cfg: NavConfig) -> Episode:
    """A hover 3 m from the west wall, mid-arena, facing east, with no obstacles."""
    kc, kb = slot_counts(cfg)
    cyl = np.zeros((kc, 5))
    cyl[:, 0:2] = FAR
    a = cfg.arena
    start = np.array([3.0, a.size_y / 2, a.altitude])
    goal = np.array([a.size_x - 2.0, a.size_y / 2, a.altitude])
    return Episode(start, 0.0, goal, 0, cyl, np.full((kb, 4), FAR), 1)


def measured_step(
    dyn: DynamicsConfig, setpoint: tuple[float, float, float, float], duration_s: float = DURATION_S
) -> tuple[np.ndarray, np.ndarray]:
    """The MuJoCo vehicle's response to a step from hover to ``setpoint`` (body vx, vy, vz, yaw rate): times and
    (forward velocity, yaw rate) samples, every ``SAMPLE_S``."""
    # deferred: mujoco, numba (via nav_env.dynamics.world): the dynamics extra
    from nav_env.dynamics.world import MujocoSim

    cfg = load_level("easy", {"task.max_steps": 10_000})
    sim = MujocoSim(cfg, 1, dyn)
    sim.load([0], [empty_arena_episode(cfg)])
    n = int(round(duration_s / SAMPLE_S))
    cmd, period = np.array([setpoint], dtype=np.float64), np.array([SAMPLE_S])
    out = np.empty((n, 2))
    for k in range(n):
        sim.step(cmd, np.zeros(1), period)
        c, s = np.cos(sim.yaw[0]), np.sin(sim.yaw[0])
        out[k] = c * sim.vel[0, 0] + s * sim.vel[0, 1], sim.yaw_rate[0]
    return np.arange(1, n + 1) * SAMPLE_S, out


def fit_tau(responses: list[tuple[np.ndarray, np.ndarray]]) -> float:
    """The time constant of ``1 - exp(-t / tau)`` closest (least squares) to unit-normalised responses (t, y)."""
    # deferred: scipy: over a second to import
    from scipy.optimize import minimize_scalar

    def cost(tau: float) -> float:
        return sum(float(np.sum((y + np.expm1(-t / tau)) ** 2)) for t, y in responses)

    return float(minimize_scalar(cost, bounds=(0.01, 3.0), method="bounded", options={"xatol": 1e-5}).x)


@dataclass(frozen=True)
class Identification:
    dynamics: str
    physics_step_s: float
    designed: StepFigures  # the linearised velocity loop, unit step
    measured: StepFigures  # MuJoCo, a 1 m/s forward step
    velocity_tau_s: dict[str, float]  # fitted per step size (m/s) and over all
    yaw_tau_s: dict[str, float]  # per yaw-rate step (deg/s) and over all
    tau_s: float  # over every velocity and yaw step: the kinematic model's best single tau
    embedded_tau_s: float  # the level's vehicle.tau


def identify(dyn: DynamicsConfig | None = None) -> Identification:
    dyn = dyn or load_dynamics()
    t_design, y_design = designed_velocity_step(dyn)
    velocity, yaw = {}, {}
    for amp in VELOCITY_STEPS:
        t, y = measured_step(dyn, (amp, 0.0, 0.0, 0.0))
        velocity[amp] = (t, y[:, 0] / amp)
    for deg in YAW_STEPS_DEG:
        rate = float(np.radians(deg))
        t, y = measured_step(dyn, (0.0, 0.0, 0.0, rate))
        yaw[deg] = (t, y[:, 1] / rate)
    t1, y1 = velocity[1.0]
    return Identification(
        dynamics=dyn.source,
        physics_step_s=dyn.physics.step,
        designed=StepFigures.of(t_design, y_design),
        measured=StepFigures.of(t1, y1),
        velocity_tau_s={f"{k:g}": fit_tau([v]) for k, v in velocity.items()}
        | {"all": fit_tau(list(velocity.values()))},
        yaw_tau_s={f"{k:g}": fit_tau([v]) for k, v in yaw.items()} | {"all": fit_tau(list(yaw.values()))},
        tau_s=fit_tau([*velocity.values(), *yaw.values()]),
        embedded_tau_s=load_level("default").vehicle.tau,
    )


def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="python -m nav_env.dynamics.identify", description=__doc__.split("\n")[0])
    p.add_argument("--dynamics", help="a dynamics TOML (default: nav_env/dynamics/iris.toml)")
    p.add_argument("--physics-step", type=float, metavar="S", help="MuJoCo's step in seconds (default: the file's)")
    p.add_argument("--out", type=output_file, help="write the figures as JSON here")
    args = p.parse_args(argv)
    result = identify(load_dynamics(args.dynamics, {"physics.step": args.physics_step} if args.physics_step else None))
    d, m = result.designed, result.measured
    print(f"dynamics: {result.dynamics}, physics step {result.physics_step_s * 1e3:g} ms")
    print("velocity loop, 1 m/s step   rise 10-90%   overshoot   peak at")
    print(f"  designed (linearised)       {d.rise_time_s:8.3f} s   {d.overshoot:8.1%}   {d.peak_time_s:.2f} s")
    print(f"  measured (MuJoCo)           {m.rise_time_s:8.3f} s   {m.overshoot:8.1%}   {m.peak_time_s:.2f} s")
    print(f"kinematic model's tau fitted to MuJoCo (embedded: {result.embedded_tau_s:.3f} s):")
    print("  velocity steps " + ", ".join(f"{k} m/s: {v:.3f} s" for k, v in result.velocity_tau_s.items()))
    print("  yaw-rate steps " + ", ".join(f"{k} deg/s: {v:.3f} s" for k, v in result.yaw_tau_s.items()))
    print(f"  every step: tau = {result.tau_s:.3f} s")
    if args.out:
        write_json(args.out, asdict(result))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
