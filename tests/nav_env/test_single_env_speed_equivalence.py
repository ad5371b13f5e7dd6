"""NavEnv's fast one-env path (nav_env.sim.SingleSim) against the batch code it replaces, bit for bit.

The reference is the same NavEnv with ``env.sim`` a plain ``BatchSim``: NavEnv then steps through the
batch code (``BatchSim.step`` / ``observe`` / ``info``), i.e. the single env as it was before the fast
path. Both fly the same seeded episodes under the same actions; every step's observation (its bytes,
so -0.0 and NaN payloads count), reward, flags, ``info`` (values and types), the simulator's state arrays
and the trajectory must be identical.
"""

import math
import struct

import numpy as np
import pytest

from nav_env.arena import make_episode
from nav_env.baselines import HeuristicPolicy
from nav_env.config import camera_overrides
from nav_env.env import NavEnv
from nav_env.sim import BatchSim, SingleSim

STATE = ("pos", "vel", "yaw", "yaw_rate", "held", "prev_dist", "path_length", "steps", "flight_time", "cyl", "box")


def pair(level: str, overrides: dict | None = None) -> tuple[NavEnv, NavEnv]:
    fast, ref = NavEnv(level, overrides=overrides), NavEnv(level, overrides=overrides)
    assert isinstance(fast.sim, SingleSim)
    ref.sim = BatchSim(ref.cfg, 1)  # the batch code path
    return fast, ref


def bits(x: float) -> bytes:
    return struct.pack("<d", x)


def same_step(a: tuple, b: tuple, where: str) -> None:
    obs_a, r_a, te_a, tr_a, info_a = a
    obs_b, r_b, te_b, tr_b, info_b = b
    assert obs_a.dtype == obs_b.dtype == np.float32 and obs_a.shape == obs_b.shape, where
    assert obs_a.tobytes() == obs_b.tobytes(), f"{where}: observation differs at {np.flatnonzero(obs_a != obs_b)[:8]}"
    assert type(r_a) is type(r_b) is float and bits(r_a) == bits(r_b), f"{where}: reward {r_a!r} != {r_b!r}"
    assert (te_a, tr_a) == (te_b, tr_b) and all(type(f) is bool for f in (te_a, tr_a, te_b, tr_b)), where
    same_info(info_a, info_b, where)


def same_info(a: dict, b: dict, where: str) -> None:
    assert list(a) == list(b), where
    for k in a:
        assert type(a[k]) is type(b[k]), f"{where}: info[{k!r}] {type(a[k])} != {type(b[k])}"
        if isinstance(a[k], float):
            assert bits(a[k]) == bits(b[k]), f"{where}: info[{k!r}] {a[k]!r} != {b[k]!r}"
        else:
            assert a[k] == b[k], f"{where}: info[{k!r}] {a[k]!r} != {b[k]!r}"


def same_state(fast: NavEnv, ref: NavEnv, where: str) -> None:
    for name in STATE:
        x, y = getattr(fast.sim, name), getattr(ref.sim, name)
        assert x.dtype == y.dtype and x.tobytes() == y.tobytes(), f"{where}: sim.{name} differs"
    assert [len(q) for q in fast.sim.in_flight] == [len(q) for q in ref.sim.in_flight], where


def fly_pair(fast: NavEnv, ref: NavEnv, seed: int, choose, delays=None, steps: int = 600) -> int:
    """One episode in both; ``choose(obs, t)`` gives the action. Returns the number of steps flown."""
    a, b = fast.reset(seed=seed), ref.reset(seed=seed)
    assert a[0].tobytes() == b[0].tobytes(), f"seed {seed}: reset observation differs"
    same_info(a[1], b[1], f"seed {seed} reset")
    obs = a[0]
    for t in range(steps):
        if delays is not None:
            fast.set_latency(*delays[t])
            ref.set_latency(*delays[t])
        action = choose(obs, t)
        a, b = fast.step(action), ref.step(action)
        where = f"seed {seed} step {t}"
        same_step(a, b, where)
        same_state(fast, ref, where)
        obs = a[0]
        if a[2] or a[3]:
            break
    assert np.array(fast.trajectory).tobytes() == np.array(ref.trajectory).tobytes()
    return t + 1


CASES = [
    ("default", None),
    ("easy", None),
    ("hard", None),  # moving obstacles, camera noise and dropout
    ("hard", {"camera.width": 64, "camera.height": 64}),
    ("default", {"camera.width": 48, "camera.height": 20, "camera.vfov_deg": 50.0, "camera.dropout": 0.1}),
]
AIRLEARNING = ("hard", camera_overrides("144x256"))  # Air Learning's image: 144 x 256, 90 x 90 degrees


@pytest.mark.parametrize(("level", "overrides"), CASES)
def test_random_actions_match_the_batch_code(level, overrides):
    fast, ref = pair(level, overrides)
    flown = 0
    kinds = (int, np.int64, np.int32)  # a plain int, numpy integers of two widths: what callers pass
    for seed in range(30):
        rng = np.random.default_rng(1000 + seed)
        flown += fly_pair(fast, ref, seed, lambda obs, t, rng=rng: kinds[t % 3](rng.integers(0, 25)))
    assert flown > 1500


def test_air_learning_sized_camera_matches_the_batch_code():
    fast, ref = pair(*AIRLEARNING)
    for seed in range(12):
        rng = np.random.default_rng(seed)
        fly_pair(fast, ref, seed, lambda obs, t, rng=rng: int(rng.integers(0, 25)), steps=150)


@pytest.mark.parametrize("level", ["default", "hard", "easy"])
def test_heuristic_flights_match_the_batch_code(level):
    """Goal-seeking flights: successes and time limits, not only crashes."""
    fast, ref = pair(level)
    policy = HeuristicPolicy(fast.cfg)
    ends = set()
    for seed in range(12):
        n = fly_pair(fast, ref, 500 + seed, lambda obs, t: int(policy(obs[None])[0]))
        ends.add("success" if fast.sim.info_one(False, False)["distance_to_goal"] < 1.5 else n)
    assert "success" in ends


def test_continuous_actions_match_the_batch_code():
    """Vertical motion (the einsum path length), any heading, the floor and the ceiling."""
    overrides = {"task.action_type": "continuous"}
    fast, ref = pair("default", overrides)
    high = np.array([5.0, 5.0, 5.0, 2.0])
    flown = 0
    shapes = (lambda a: a, lambda a: a.astype(np.float32), lambda a: a[None], lambda a: a.tolist())
    for seed in range(20):
        rng = np.random.default_rng(seed)
        flown += fly_pair(fast, ref, seed, lambda obs, t, rng=rng: shapes[t % 4](rng.uniform(-high, high)))
    assert flown > 200


def test_latency_steps_and_the_return_to_lockstep_match_the_batch_code():
    """Delayed steps take the batch code in both; lockstep steps after them (commands still in flight
    or not) the fast path, which must pick the state up exactly."""
    for level in ("default", "hard"):
        fast, ref = pair(level)
        for seed in range(6):
            rng = np.random.default_rng(seed)
            delays = []
            for t in range(600):
                phase = (t // 15) % 4
                d = 0.0 if phase in (0, 2) else float(rng.uniform(0.0, 0.25))
                delays.append((d, None if phase != 3 else float(rng.uniform(0.05, 0.2))))
            fly_pair(fast, ref, seed, lambda obs, t, rng=rng: int(rng.integers(0, 25)), delays=delays)


def test_hand_built_scenes_match_the_batch_code():
    """Obstacles at the walls, overlapping, partly outside the arena; a moving one; reset with options."""
    fast, ref = pair("hard")
    scenes = [
        make_episode(
            fast.cfg,
            (5.0, 5.0),
            (25.0, 25.0),
            yaw=math.pi / 4,
            cylinders=[(10.0, 10.0, 1.0), (0.2, 15.0, 1.2), (15.0, 30.5, 0.8), (10.5, 10.5, 0.6)],
            boxes=[(18.0, 18.0, 21.0, 19.0), (-1.0, 20.0, 1.0, 23.0), (29.5, 2.0, 31.0, 4.0)],
            moving=[(15.0, 12.0, 0.5, 1.5, -0.7)],
            noise_key=7,
        ),
        make_episode(fast.cfg, (3.0, 27.0), (27.0, 3.0), yaw=-2.0, moving=[(20.0, 10.0, 0.8, -1.2, 1.3)]),
    ]
    # moving cylinders in slots apart (the fast path's fallback) and a static one at x = -0.0, which the
    # batch code's obstacle motion turns into +0.0
    ep = make_episode(
        fast.cfg, (6.0, 6.0), (24.0, 20.0), cylinders=[(-0.0, 12.0, 1.0)], moving=[(12.0, 12.0, 0.7, 1.0, 0.5)]
    )
    last = len(ep.cyl) - 1
    ep.cyl[last], ep.cyl[last - 2] = ep.cyl[last - 2].copy(), ep.cyl[last].copy()
    ep.cyl[last - 1] = (14.0, 20.0, 0.6, -0.8, 1.1)
    scenes.append(ep)
    for k, ep in enumerate(scenes):
        for seed in range(8):
            rng = np.random.default_rng(seed)
            a, b = fast.reset(options={"episode": ep}), ref.reset(options={"episode": ep})
            assert a[0].tobytes() == b[0].tobytes()
            for t in range(500):
                action = int(rng.integers(0, 25))
                a, b = fast.step(action), ref.step(action)
                same_step(a, b, f"scene {k} seed {seed} step {t}")
                same_state(fast, ref, f"scene {k} seed {seed} step {t}")
                if a[2] or a[3]:
                    break


def test_bad_actions_fail_alike():
    fast, ref = pair("default")
    for env in (fast, ref):
        env.reset(seed=0)
    for bad in (25, -1, True, 2.5, np.array([1, 2]), "3"):
        errors = []
        for env in (fast, ref):
            with pytest.raises((ValueError, TypeError)) as e:
                env.step(bad)
            errors.append((type(e.value), str(e.value)))
        assert errors[0] == errors[1], bad
    # an integral float and a 0-d array are accepted by both, as before
    for ok in (3.0, np.array(4), np.float64(6.0)):
        same_step(fast.step(ok), ref.step(ok), repr(ok))


def test_bench_reports_single_over_native(tmp_path):
    import json
    import subprocess
    import sys

    out = tmp_path / "bench.json"
    args = ["--seconds", "0.05", "--rounds", "2", "--num-envs", "4", "--out", str(out)]
    r = subprocess.run([sys.executable, "-m", "nav_env.bench", *args], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    figures = json.loads(out.read_text())
    rates = figures["env_steps_per_s"]
    assert figures["single_over_native"] == pytest.approx(rates["single"] / rates["native_vector"])
    assert len(figures["single_over_native_by_round"]) == 2 and "numpy" in figures["versions"]
    assert "single / native" in r.stdout


@pytest.mark.parametrize("level", ["default", "hard"])
def test_copies_and_pickles_fly_on_exactly(level):
    """A deep copy or a pickle of the env mid-episode (the fast path's scratch arrays are views of its
    state) continues exactly as the original."""
    import copy
    import pickle

    for seed in range(4):
        env = NavEnv(level)
        env.reset(seed=seed)
        rng = np.random.default_rng(seed)
        for _ in range(5):
            env.step(int(rng.integers(0, 25)))
        copies = [copy.deepcopy(env), pickle.loads(pickle.dumps(env))]
        for c in copies:
            assert np.shares_memory(c.sim._cyl_xy, c.sim.cyl) and not np.shares_memory(c.sim.cyl, env.sim.cyl)
        for t in range(300):
            action = int(rng.integers(0, 25))
            a = env.step(action)
            for c in copies:
                same_step(a, c.step(action), f"seed {seed} step {t}")
            if a[2] or a[3]:
                break


@pytest.mark.parametrize(("level", "overrides"), [*CASES, AIRLEARNING])
def test_observations_match_in_any_pose(level, overrides):
    """The fast observation against BatchSim.observe on the same state, over random poses in and around
    the arena and exact edge cases: on a wall, on the floor and at the ceiling (-0.0 depths), at +-0.0, outside."""
    fast, ref = pair(level, overrides)
    fast.reset(seed=4)
    ref.reset(seed=4)
    cfg = fast.cfg
    sx, sy, ceil = cfg.arena.size_x, cfg.arena.size_y, cfg.arena.ceiling
    rng = np.random.default_rng(5)
    poses = [(rng.uniform(-2, sx + 2), rng.uniform(-2, sy + 2), rng.uniform(-1, ceil + 1)) for _ in range(150)]
    edges_x = (0.0, -0.0, sx, 15.0, 1e-46, -1e-46, sx + 1e-12)  # exactly on a wall's line, or in float32
    edges_y = (0.0, -0.0, sy, 7.5)
    poses += [(x, y, z) for x in edges_x for y in edges_y for z in (0.0, -0.0, ceil, 2.0, 1e-44)]
    # a yaw that makes a column's bearing exactly 0 (sin 0: an infinite inverse)
    col0 = -float(fast.sim.col_angle[0])
    yaws = [0.0, -0.0, math.pi / 2, -math.pi, math.pi, 1e-9, col0, *rng.uniform(-math.pi, math.pi, 6).tolist()]
    for k, (x, y, z) in enumerate(poses):
        for sim in (fast.sim, ref.sim):
            sim.pos[0] = x, y, z
            sim.yaw[0] = yaws[k % len(yaws)]
            sim.vel[0] = rng.uniform(-6, 6, 3) if k % 3 else (0.0, -0.0, 0.0)
            sim.yaw_rate[0] = rng.uniform(-3, 3)
            sim.steps[0] = k
        rng2 = np.random.default_rng(k)  # the same velocities in both
        v, yr = rng2.uniform(-6, 6, 3), rng2.uniform(-3, 3)
        for sim in (fast.sim, ref.sim):
            sim.vel[0], sim.yaw_rate[0] = v, yr
        a, b = fast.sim.observe_one(), ref.sim.observe()[0]
        assert a.tobytes() == b.tobytes(), (
            f"pose {k} {(x, y, z)}: {np.flatnonzero(a.view(np.uint32) != b.view(np.uint32))[:8]}"
        )
