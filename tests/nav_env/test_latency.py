"""Latency-faithful stepping (NavEnv's ## Latency): the world keeps flying while the policy thinks."""

import math

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

from nav_env.actions import ACTION_NAMES, HOVER_ACTION
from nav_env.arena import make_episode
from nav_env.env import NavEnv
from nav_env.vector import NavVectorEnv

FORWARD_5 = ACTION_NAMES.index("forward 5")


def fly(env, seed, actions, delays=None, period=None):
    """Positions, observations, rewards and flags of one episode under ``actions`` (and per-step delays)."""
    obs, _ = env.reset(seed=seed)
    out = []
    for t, a in enumerate(actions):
        if delays is not None:
            env.set_latency(delays[t], period)
        obs, r, te, tr, info = env.step(int(a))
        out.append((env.sim.pos[0].copy(), obs.copy(), r, te, tr, info["flight_time"]))
        if te or tr:
            break
    return out


def same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert np.array_equal(x[0], y[0]) and np.array_equal(x[1], y[1]) and x[2:] == y[2:]


@pytest.mark.parametrize("level", ["default", "hard"])
def test_zero_delay_is_lockstep_bit_for_bit(level):
    actions = np.random.default_rng(1).integers(0, 25, 300)
    base = fly(NavEnv(level), 3, actions)
    zero = fly(NavEnv(level), 3, actions, delays=np.zeros(300))
    same(base, zero)


@pytest.mark.parametrize("level", ["default", "hard"])
def test_vector_env_with_per_env_delays_matches_single_envs(level):
    """Env 0 undelayed flies the general (delayed) code path beside delayed envs: still lockstep bit for bit;
    envs 1 and 2 match single envs given the same delay sequences (some longer than a period)."""
    rng = np.random.default_rng(7)
    n_steps = 120
    actions = rng.integers(0, 25, (n_steps, 3))
    delays = np.stack([np.zeros(n_steps), rng.uniform(0, 0.09, n_steps), rng.uniform(0.0, 0.25, n_steps)], axis=1)
    vec = NavVectorEnv(3, level, autoreset_mode=AutoresetMode.DISABLED)
    vec.reset(seed=[10, 11, 12])
    pos, obs_rows, done = [], [], np.zeros(3, bool)
    for t in range(n_steps):
        vec.set_latency(delays[t])
        obs, r, te, tr, info = vec.step(actions[t])
        pos.append(vec.sim.pos.copy())
        obs_rows.append(obs.copy())
        done |= te | tr
        if done.any():
            break
    for i in range(3):
        single = NavEnv(level)
        single.reset(seed=10 + i)
        for t in range(len(pos)):
            single.set_latency(delays[t, i])
            o, *_ = single.step(int(actions[t, i]))
            assert np.array_equal(single.sim.pos[0], pos[t][i]), (i, t)
            assert np.array_equal(o, obs_rows[t][i]), (i, t)


def brake_before_the_wall(delay_s):
    """A reactive pilot flies east at 5 m/s at a wall (x = 12 m) and hovers once the depth straight
    ahead reads under 2 m; the world keeps flying for ``delay_s`` after each observation."""
    env = NavEnv("default")
    ep = make_episode(env.cfg, start=(5, 15), goal=(25, 25), yaw=0.0, boxes=[(12.0, 5.0, 13.0, 25.0)])
    obs, _ = env.reset(options={"episode": ep})
    env.set_latency(delay_s)
    cam = env.cfg.camera
    for _ in range(60):
        ahead_m = obs[(cam.height // 2) * cam.width + cam.width // 2] * cam.max_range
        obs, _, terminated, truncated, info = env.step(FORWARD_5 if ahead_m > 2.0 else HOVER_ACTION)
        if terminated or truncated:
            break
    return float(env.sim.pos[0, 0]), info["collision"]


def test_a_known_delay_turns_a_near_miss_into_a_collision():
    x0, hit0 = brake_before_the_wall(0.0)
    x1, hit1 = brake_before_the_wall(0.1)
    x2, hit2 = brake_before_the_wall(0.2)
    wall = 12.0 - NavEnv("default").cfg.vehicle.radius
    assert not hit0 and x0 < wall - 0.5  # lockstep: stops a metre short
    assert not hit1 and x0 < x1 < wall  # 100 ms: half a metre further, a near miss
    assert hit2  # 200 ms: the brake lands too late


def test_a_delay_longer_than_a_period_lands_later():
    """Hover is held while a 0.25 s-late forward command is in flight: nothing moves for two periods."""
    env = NavEnv("easy")
    env.reset(seed=0)
    start = env.sim.pos[0].copy()
    env.set_latency(0.25)
    env.step(FORWARD_5)
    env.step(FORWARD_5)
    assert np.array_equal(env.sim.pos[0], start)  # still holding hover at rest
    env.step(FORWARD_5)  # the first command lands 0.05 s into this period
    assert np.linalg.norm(env.sim.pos[0] - start) > 0


@pytest.mark.parametrize("bad", [-0.01, math.nan, math.inf])
def test_bad_delays_are_refused(bad):
    env = NavEnv("easy")
    with pytest.raises(ValueError, match="delay_s must be finite and >= 0"):
        env.set_latency(bad)
    with pytest.raises(ValueError, match="period_s must be finite and > 0"):
        env.set_latency(0.0, period_s=0.0)
    with pytest.raises(ValueError, match="3 numbers"):
        NavVectorEnv(3, "easy").set_latency([0.1, 0.2])


def test_same_seed_same_delays_same_episode_and_time_limit_in_flight_time():
    rng = np.random.default_rng(3)
    actions, delays = rng.integers(0, 25, 2000), rng.uniform(0, 0.03, 2000)
    a = fly(NavEnv("easy"), 5, actions, delays=delays, period=0.02)
    b = fly(NavEnv("easy"), 5, actions, delays=delays, period=0.02)
    same(a, b)
    hovering = fly(NavEnv("easy"), 5, [HOVER_ACTION] * 3000, delays=np.full(3000, 0.02), period=0.02)
    assert hovering[-1][4] and len(hovering) == 2500  # 50 s of flight at 20 ms per step
    assert hovering[-1][5] == pytest.approx(50.0)


def forward_from_rest(delay_s, steps=6):
    env = NavEnv("easy")
    env.reset(seed=0)
    env.set_latency(delay_s)
    xs = []
    for _ in range(steps):
        env.step(FORWARD_5)
        xs.append(float(env.sim.pos[0, 0]))
    return xs


def test_a_delay_shifts_the_response_and_a_fraction_of_a_period_splits_it():
    lockstep, two_periods = forward_from_rest(0.0), forward_from_rest(0.2)
    start = two_periods[0]
    assert two_periods[:2] == [start, start]  # hover held while the first command is in flight
    assert two_periods[2:] == pytest.approx(lockstep[:-2], abs=1e-12)  # then lockstep, two periods late
    half = forward_from_rest(0.05)
    one_period = forward_from_rest(0.1)
    # half a period of hover, then forward: between no delay and a whole period, every step
    assert all(b < h < a for a, h, b in zip(lockstep, half, one_period))
    # the first period exactly: at rest under hover for 0.05 s (no motion), then 0.05 s of the first-order
    # response to 5 m/s forward, whose velocity at the end of the period carries the vehicle (the sim's Euler step)
    env = NavEnv("easy")
    env.reset(seed=0)
    start = env.sim.pos[0].copy()
    env.set_latency(0.05)
    env.step(FORWARD_5)
    tau = env.cfg.vehicle.tau
    expected = 5.0 * -math.expm1(-0.05 / tau) * 0.05
    assert np.linalg.norm(env.sim.pos[0] - start) == pytest.approx(expected, rel=1e-12)
