"""A multicopter flight controller as PX4 and ArduPilot structure it, and the motors it drives.

The cascade, outermost first, every loop running once per physics step (``physics.step``, 4 ms by default):

1. **Velocity** (PX4 ``mc_pos_control``'s velocity PID, ArduPilot ``AC_PosControl``'s velocity-to-acceleration
   loop): the setpoint ``[vx, vy, vz, yaw_rate]`` is in the heading frame (x forward along the vehicle's yaw, y
   left, z up; rotated by the current yaw at every step, as nav_env's kinematic vehicle does); a PI on the
   velocity error gives an acceleration setpoint, its horizontal part limited by the tilt limit
   (``g tan(max_tilt)``) and its vertical part by ``max_accel_up`` / ``max_accel_down``. Each integrator is held
   within ``integral_limit``.
2. **Thrust vector to attitude** (PX4 ``ControlMath::bodyzToAttitude``): the thrust vector ``m (a + g z)``
   gives the desired body z axis; the desired heading is the yaw setpoint, which integrates the commanded yaw
   rate (as PX4 does with a yaw-rate setpoint). The collective thrust is the thrust vector projected on the
   current body z axis (the tilt compensation both autopilots apply).
3. **Attitude** (PX4 ``mc_att_control``, ArduPilot ``AC_AttitudeControl``): a P controller on the attitude error
   gives body-rate setpoints, plus the yaw-rate feedforward; rates are limited per axis. The error is the
   rotation-matrix error of Lee, Leok and McClamroch (CDC 2010), ``e_R = vee(R_d^T R - R^T R_d) / 2``, equal to
   PX4's quaternion error to first order.
4. **Body rates** (PX4 ``mc_rate_control``, ArduPilot's rate PIDs): a PI on the rate error gives an angular
   acceleration, times the inertia (plus the gyroscopic term ``w x Jw``) a body torque.
5. **Mixer** (PX4 ``ControlAllocator``): collective thrust and the three torques to four rotor thrusts by the
   inverse of the airframe's allocation matrix in PX4's order: roll, pitch and collective thrust first, each rotor
   clipped to ``[0, max_thrust]`` (a real motor's saturation), then the largest share of the yaw torque that keeps
   every rotor within that range (``ControlAllocationSequentialDesaturation``: yaw is given up first, so a
   saturating yaw command costs heading rate, never thrust or tilt); then the rotor speed that gives each thrust.

The motors: the controller commands the rotor speed that gives each thrust by the nominal motor constant; the
rotor speed follows its command through a first-order lag (``time_constant_up`` when speeding up,
``time_constant_down`` when slowing, integrated exactly over a step); thrust is ``motor_constant w^2``, each
rotor's yaw moment ``moment_constant`` times its thrust against its spin, rotor drag ``-|w| rotor_drag v_perp``
on the airspeed in the rotor plane (Gazebo's ``gazebo_motor_model``, whose parameters the Iris file gives). The
motors' constants are per vehicle (``motor_constant``, ``lag_up``, ``lag_down``, ``rotor_drag``): a randomized
episode flies motors the controller does not know (:mod:`nav_env.dynamics.randomize`).

:func:`control_step` runs all of it for N vehicles, compiled by Numba (one call per physics step for every
world: a Python loop over the cascade's arithmetic would cost more than MuJoCo's step).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numba import njit

from nav_env.dynamics.config import GRAVITY, DynamicsConfig


class Gains(NamedTuple):
    """The controller's constants and the motors as it believes them, in SI units (built from a
    :class:`DynamicsConfig`); the motors' lag and rotor drag are the vehicle's own, per vehicle (control_step)."""

    h: float
    mass: float
    inertia: np.ndarray  # (3,)
    vel_p: np.ndarray  # (3,) x, y, z
    vel_i: np.ndarray
    vel_integral_limit: float
    altitude_p: float
    max_accel_xy: float
    max_accel_up: float
    max_accel_down: float
    att_p: np.ndarray  # (3,) roll, pitch, yaw
    max_rate: np.ndarray  # (3,) rad/s
    rate_p: np.ndarray
    rate_i: np.ndarray
    rate_integral_limit: float
    mixer: np.ndarray  # (4, 4): rotor thrusts = mixer @ [T, tau_x, tau_y, tau_z]
    rotor_x: np.ndarray  # (4,)
    rotor_y: np.ndarray
    rotor_spin: np.ndarray
    motor_constant: float
    moment_constant: float
    max_thrust: float

    @classmethod
    def from_config(cls, cfg: DynamicsConfig) -> Gains:
        a, m, v, att, r = cfg.airframe, cfg.motors, cfg.velocity_loop, cfg.attitude_loop, cfg.rate_loop
        h = cfg.physics.step
        x, y, spin = np.array(a.rotor_x), np.array(a.rotor_y), np.array(a.rotor_spin, dtype=np.float64)
        allocation = np.stack([np.ones(4), y, -x, -spin * m.moment_constant])
        return cls(
            h=h,
            mass=a.mass,
            inertia=np.array(a.inertia, dtype=np.float64),
            vel_p=np.array([v.p_xy, v.p_xy, v.p_z]),
            vel_i=np.array([v.i_xy, v.i_xy, v.i_z]),
            vel_integral_limit=v.integral_limit,
            altitude_p=v.p_z_position,
            max_accel_xy=GRAVITY * math.tan(math.radians(v.max_tilt_deg)),
            max_accel_up=v.max_accel_up,
            max_accel_down=v.max_accel_down,
            att_p=np.array([att.p_roll_pitch, att.p_roll_pitch, att.p_yaw]),
            max_rate=np.radians([att.max_rate_roll_pitch_deg, att.max_rate_roll_pitch_deg, att.max_rate_yaw_deg]),
            rate_p=np.array([r.p_roll_pitch, r.p_roll_pitch, r.p_yaw]),
            rate_i=np.array([r.i_roll_pitch, r.i_roll_pitch, r.i_yaw]),
            rate_integral_limit=r.integral_limit,
            mixer=np.linalg.inv(allocation),
            rotor_x=x,
            rotor_y=y,
            rotor_spin=spin,
            motor_constant=m.motor_constant,
            moment_constant=m.moment_constant,
            max_thrust=m.max_thrust,
        )


def motor_lag(h: float, time_constant: float) -> float:
    """The share of a rotor's speed gap its first-order lag closes in one physics step of ``h`` seconds."""
    return -math.expm1(-h / time_constant)


@njit(cache=True)
def _clip(x: float, lo: float, hi: float) -> float:
    return lo if x < lo else hi if x > hi else x


@njit(cache=True)
def quat_to_mat(q: np.ndarray, out: np.ndarray) -> None:
    """Body-to-world rotation matrices ``out`` (N, 3, 3) of unit quaternions ``q`` (N, 4), MuJoCo's (w, x, y, z)."""
    for i in range(q.shape[0]):
        w, x, y, z = q[i, 0], q[i, 1], q[i, 2], q[i, 3]
        out[i, 0, 0] = 1 - 2 * (y * y + z * z)
        out[i, 0, 1] = 2 * (x * y - w * z)
        out[i, 0, 2] = 2 * (x * z + w * y)
        out[i, 1, 0] = 2 * (x * y + w * z)
        out[i, 1, 1] = 1 - 2 * (x * x + z * z)
        out[i, 1, 2] = 2 * (y * z - w * x)
        out[i, 2, 0] = 2 * (x * z - w * y)
        out[i, 2, 1] = 2 * (y * z + w * x)
        out[i, 2, 2] = 1 - 2 * (x * x + y * y)


@njit(cache=True)
def control_step(
    g: Gains,
    qpos: np.ndarray,  # (N, 7) MuJoCo free-joint positions: world position, quaternion
    qvel: np.ndarray,  # (N, 6) world linear velocity, body angular velocity
    setpoint: np.ndarray,  # (N, 4) heading-frame vx, vy, vz, yaw rate
    active: np.ndarray,  # (N,) bool: envs flying this step
    airflow: np.ndarray,  # (N, 3) world wind velocity
    altitude_target: np.ndarray,  # (N,) controller state, updated
    vel_integral: np.ndarray,  # (N, 3)
    rate_integral: np.ndarray,  # (N, 3)
    yaw_setpoint: np.ndarray,  # (N,)
    rotor_speed: np.ndarray,  # (N, 4) rad/s, updated
    motor_constant: np.ndarray,  # (N,) the motors each vehicle flies (the controller commands with g's nominal ones)
    lag_up: np.ndarray,  # (N,)
    lag_down: np.ndarray,  # (N,)
    rotor_drag: np.ndarray,  # (N,)
    xfrc: np.ndarray,  # (N, 6) out: world force and torque on each airframe's centre
) -> None:
    """One physics step of the cascade and the motors for every active vehicle (module docstring)."""
    h = g.h
    rot = np.empty((3, 3))
    rot_d = np.empty((3, 3))
    wrench = np.empty(4)
    base = np.empty(4)
    yaw_part = np.empty(4)
    acc = np.empty(3)
    torque = np.empty(3)
    jw = np.empty(3)
    for i in range(qpos.shape[0]):
        if not active[i]:
            xfrc[i, :] = 0.0
            continue
        qw, qx, qy, qz = qpos[i, 3], qpos[i, 4], qpos[i, 5], qpos[i, 6]
        rot[0, 0] = 1 - 2 * (qy * qy + qz * qz)
        rot[0, 1] = 2 * (qx * qy - qw * qz)
        rot[0, 2] = 2 * (qx * qz + qw * qy)
        rot[1, 0] = 2 * (qx * qy + qw * qz)
        rot[1, 1] = 1 - 2 * (qx * qx + qz * qz)
        rot[1, 2] = 2 * (qy * qz - qw * qx)
        rot[2, 0] = 2 * (qx * qz - qw * qy)
        rot[2, 1] = 2 * (qy * qz + qw * qx)
        rot[2, 2] = 1 - 2 * (qx * qx + qy * qy)
        # 1. velocity PI -> acceleration setpoint (world frame)
        yaw = math.atan2(rot[1, 0], rot[0, 0])
        c, s = math.cos(yaw), math.sin(yaw)
        sx, sy = setpoint[i, 0], setpoint[i, 1]
        altitude_target[i] += setpoint[i, 2] * h
        climb = setpoint[i, 2] + g.altitude_p * (altitude_target[i] - qpos[i, 2])
        target = (c * sx - s * sy, s * sx + c * sy, climb)
        for k in range(3):
            err = target[k] - qvel[i, k]
            vel_integral[i, k] = _clip(
                vel_integral[i, k] + g.vel_i[k] * h * err, -g.vel_integral_limit, g.vel_integral_limit
            )
            acc[k] = g.vel_p[k] * err + vel_integral[i, k]
        horizontal = math.hypot(acc[0], acc[1])
        if horizontal > g.max_accel_xy:
            acc[0] *= g.max_accel_xy / horizontal
            acc[1] *= g.max_accel_xy / horizontal
        acc[2] = _clip(acc[2], -g.max_accel_down, g.max_accel_up) + GRAVITY
        # 2. thrust vector -> desired attitude, collective thrust on the current body z
        collective = g.mass * (acc[0] * rot[0, 2] + acc[1] * rot[1, 2] + acc[2] * rot[2, 2])
        norm = math.sqrt(acc[0] ** 2 + acc[1] ** 2 + acc[2] ** 2)
        zx, zy, zz = acc[0] / norm, acc[1] / norm, acc[2] / norm
        yaw_setpoint[i] += setpoint[i, 3] * h
        hx, hy = math.cos(yaw_setpoint[i]), math.sin(yaw_setpoint[i])
        yx, yy, yz = -zz * hy, zz * hx, zx * hy - zy * hx  # z_d x heading
        norm = math.sqrt(yx * yx + yy * yy + yz * yz)
        yx, yy, yz = yx / norm, yy / norm, yz / norm
        rot_d[0, 0], rot_d[1, 0], rot_d[2, 0] = yy * zz - yz * zy, yz * zx - yx * zz, yx * zy - yy * zx  # y_d x z_d
        rot_d[0, 1], rot_d[1, 1], rot_d[2, 1] = yx, yy, yz
        rot_d[0, 2], rot_d[1, 2], rot_d[2, 2] = zx, zy, zz
        # 3. attitude P -> body-rate setpoint: e_R = vee(M - M^T) / 2 with M = R_d^T R
        m = rot_d.T @ rot
        e_rot = (0.5 * (m[2, 1] - m[1, 2]), 0.5 * (m[0, 2] - m[2, 0]), 0.5 * (m[1, 0] - m[0, 1]))
        for k in range(3):
            jw[k] = g.inertia[k] * qvel[i, 3 + k]
        for k in range(3):
            # the yaw-rate feedforward: world z in body axes (R's third row) times the commanded rate
            rate_sp = _clip(-g.att_p[k] * e_rot[k] + setpoint[i, 3] * rot[2, k], -g.max_rate[k], g.max_rate[k])
            # 4. rate PI -> angular acceleration -> torque (plus the gyroscopic term w x Jw)
            err = rate_sp - qvel[i, 3 + k]
            rate_integral[i, k] = _clip(
                rate_integral[i, k] + g.rate_i[k] * h * err, -g.rate_integral_limit, g.rate_integral_limit
            )
            torque[k] = g.inertia[k] * (g.rate_p[k] * err + rate_integral[i, k])
        wx, wy, wz = qvel[i, 3], qvel[i, 4], qvel[i, 5]
        torque[0] += wy * jw[2] - wz * jw[1]
        torque[1] += wz * jw[0] - wx * jw[2]
        torque[2] += wx * jw[1] - wy * jw[0]
        # 5. mixer -> rotor thrusts -> motor lag -> the rotors' wrench on the airframe
        wrench[0], wrench[1], wrench[2], wrench[3] = collective, torque[0], torque[1], torque[2]
        thrust_total = 0.0
        tau_x = tau_y = tau_z = 0.0
        speed_sum = 0.0
        # roll, pitch and thrust first; yaw gets the largest share of its torque that keeps every rotor within
        # [0, max_thrust] (PX4 ControlAllocationSequentialDesaturation's order: a weak yaw moment, as the X500's,
        # saturates first, and clipping it into every rotor would take thrust and tilt with it)
        share = 1.0
        for r in range(4):
            base[r] = _clip(
                g.mixer[r, 0] * wrench[0] + g.mixer[r, 1] * wrench[1] + g.mixer[r, 2] * wrench[2], 0.0, g.max_thrust
            )
            yaw_part[r] = g.mixer[r, 3] * wrench[3]
            if yaw_part[r] > 0.0 and base[r] + yaw_part[r] > g.max_thrust:
                share = min(share, (g.max_thrust - base[r]) / yaw_part[r])
            elif yaw_part[r] < 0.0 and base[r] + yaw_part[r] < 0.0:
                share = min(share, -base[r] / yaw_part[r])
        for r in range(4):
            f = _clip(base[r] + share * yaw_part[r], 0.0, g.max_thrust)  # rounding only
            # the speed the controller commands for thrust f, as it believes the motors to be; the motor lags it
            gap = math.sqrt(f / g.motor_constant) - rotor_speed[i, r]
            rotor_speed[i, r] += (lag_up[i] if gap > 0 else lag_down[i]) * gap
            w = rotor_speed[i, r]
            f = motor_constant[i] * w * w
            thrust_total += f
            tau_x += g.rotor_y[r] * f
            tau_y -= g.rotor_x[r] * f
            tau_z -= g.rotor_spin[r] * g.moment_constant * f
            speed_sum += w
        # rotor drag on the in-plane airspeed (body frame)
        ax, ay, az = qvel[i, 0] - airflow[i, 0], qvel[i, 1] - airflow[i, 1], qvel[i, 2] - airflow[i, 2]
        bx = rot[0, 0] * ax + rot[1, 0] * ay + rot[2, 0] * az
        by = rot[0, 1] * ax + rot[1, 1] * ay + rot[2, 1] * az
        fbx, fby = -rotor_drag[i] * speed_sum * bx, -rotor_drag[i] * speed_sum * by
        for k in range(3):
            xfrc[i, k] = rot[k, 0] * fbx + rot[k, 1] * fby + rot[k, 2] * thrust_total
            xfrc[i, 3 + k] = rot[k, 0] * tau_x + rot[k, 1] * tau_y + rot[k, 2] * tau_z
