"""Randomized physics in the mujoco backend (nav_env.dynamics.randomize): drawn from the episode's seed, recorded in
``info`` and the evaluator's rows, off by default, and each parameter reaching the physics it names."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

mujoco = pytest.importorskip("mujoco", reason="the mujoco backend needs the dynamics extra (make installs it)")

from nav_env import NavEnv, NavVectorEnv  # noqa: E402
from nav_env.actions import ACTION_NAMES, HOVER_ACTION  # noqa: E402
from nav_env.arena import make_episode  # noqa: E402
from nav_env.config import ConfigError  # noqa: E402
from nav_env.dynamics.config import load_dynamics  # noqa: E402
from nav_env.rollout import run_episodes  # noqa: E402

FWD5 = ACTION_NAMES.index("forward 5")
TRAINING_FILE = "configs/dynamics/iris_randomized.toml"


def fixed(**ranges: float):
    """The shipped Iris with each named randomization range set to the one value given (so drawn, but known)."""
    return load_dynamics(None, {f"randomization.{k}": [v, v] for k, v in ranges.items()})


def open_arena_env(dynamics, level="easy", steps=1000):
    env = NavEnv(level, backend="mujoco", dynamics=dynamics, overrides={"task.max_steps": steps})
    env.reset(options={"episode": make_episode(env.cfg, start=(3.0, 15.0), goal=(28.0, 25.0))})
    return env


def pitch_deg(env) -> float:
    return math.degrees(math.asin(-env.sim.rot[0, 2, 0]))  # nose down positive


# ------------------------------------------------------------------ drawn, seeded, recorded


def test_the_draws_follow_the_episode_seed_and_land_in_their_ranges():
    dyn = load_dynamics(TRAINING_FILE)
    r = dyn.randomization

    def drawn(seed):
        env = NavEnv("default", backend="mujoco", dynamics=dyn)
        _, info = env.reset(seed=seed)
        return info["physics"]

    a, b, c = drawn(5), drawn(5), drawn(6)
    assert a == b and a != c
    assert dyn.airframe.mass * r.mass_scale[0] <= a["mass"] <= dyn.airframe.mass * r.mass_scale[1]
    assert r.act_delay_ms[0] / 1000 <= a["act_delay_s"] <= r.act_delay_ms[1] / 1000
    assert dyn.wind.speed[0] <= a["wind_speed"] <= dyn.wind.speed[1]
    # over many episodes each parameter covers its range
    env = NavVectorEnv(64, level="default", backend="mujoco", dynamics=dyn)
    _, info = env.reset(seed=list(range(64)))
    low, high = r.camera_pitch_deg
    pitches = info["physics"]["camera_pitch_deg"]
    assert pitches.min() < low + (high - low) * 0.2 and pitches.max() > high - (high - low) * 0.2
    assert len(np.unique(info["physics"]["motor_constant"])) == 64


def test_an_episode_draws_the_same_physics_in_any_batch_and_records_it_at_its_end():
    dyn = load_dynamics(TRAINING_FILE)
    single = NavEnv("default", backend="mujoco", dynamics=dyn)
    _, first = single.reset(seed=11)
    vec = NavVectorEnv(3, level="default", backend="mujoco", dynamics=dyn)
    _, info = vec.reset(seed=[9, 10, 11])
    assert {k: float(v[2]) for k, v in info["physics"].items()} == first["physics"]
    done = False
    while not done:
        _, _, te, tr, last = single.step(HOVER_ACTION)
        done = te or tr
    assert last["physics"] == first["physics"]
    # the evaluator's rows carry it, the same for the same seeds
    rows = list(run_episodes(lambda o: np.full(len(o), HOVER_ACTION), single.cfg, 3, 20, 3, None, "mujoco", dyn))
    again = list(run_episodes(lambda o: np.full(len(o), HOVER_ACTION), single.cfg, 3, 20, 2, None, "mujoco", dyn))
    by_episode = {r.episode: r.physics for r in rows}
    assert all(r.physics == by_episode[r.episode] and r.physics["mass"] > 0 for r in again)


def test_off_by_default_nothing_drawn_or_recorded():
    assert not load_dynamics().randomization.enabled
    env = NavEnv("default", backend="mujoco")
    _, info = env.reset(seed=0)
    assert "physics" not in info
    rows = list(run_episodes(lambda o: np.full(len(o), HOVER_ACTION), env.cfg, 2, 0, 2, None, "mujoco", None))
    assert all(r.physics is None for r in rows)


def test_bad_ranges_are_one_line_errors():
    cases = {
        "randomization.mass_scale": ([1.2, 0.9], "reversed"),
        "randomization.motor_constant_scale": ([0.0, 1.0], "must be positive"),
        "randomization.act_delay_ms": ([-5.0, 10.0], ">= 0"),
        "randomization.camera_pitch_deg": ([-95.0, 0.0], "(-90, 90)"),
        "randomization.wind_speed": ([0.0, 1.0], "unknown config key"),
    }
    for key, (value, message) in cases.items():
        with pytest.raises(ConfigError) as e:
            load_dynamics(None, {key: value})
        assert message in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="cannot lift the heaviest"):
        load_dynamics(None, {"randomization.mass_scale": [1.0, 1.9]})


# ------------------------------------------------------------------ each parameter reaches the physics


def hover_rotor_speed(dyn) -> float:
    """The rotors' mean speed after 10 s of hover (the controller's integrators settled)."""
    env = open_arena_env(dyn)
    for _ in range(100):
        env.step(HOVER_ACTION)
    return float(env.sim.rotor_speed[0].mean())


def test_a_heavier_vehicle_hovers_at_a_higher_throttle_and_the_controller_does_not_know():
    light, heavy = fixed(mass_scale=0.9), fixed(mass_scale=1.25)
    w_light, w_heavy = hover_rotor_speed(light), hover_rotor_speed(heavy)
    # thrust = weight: rotor speed goes with the square root of the mass
    assert w_heavy / w_light == pytest.approx(math.sqrt(1.25 / 0.9), rel=1e-3)
    env = open_arena_env(heavy)
    assert env.sim.gains.mass == load_dynamics().airframe.mass  # nominal in the controller
    body = mujoco.mj_name2id(env.sim.model, mujoco.mjtObj.mjOBJ_BODY, "vehicle0")
    assert env.sim.model.body_mass[body] == pytest.approx(1.25 * load_dynamics().airframe.mass)


def test_weaker_motors_spin_faster_to_hover():
    strong, weak = fixed(motor_constant_scale=1.1), fixed(motor_constant_scale=0.85)
    assert hover_rotor_speed(weak) / hover_rotor_speed(strong) == pytest.approx(math.sqrt(1.1 / 0.85), rel=1e-3)


def tilt_after(dyn, steps: int, action=FWD5) -> list[float]:
    env = open_arena_env(dyn)
    out = []
    for _ in range(steps):
        env.step(action)
        out.append(pitch_deg(env))
    return out


def physics_steps_tilt(dyn, n: int) -> list[float]:
    """The pitch after each of the first ``n`` physics steps of a dash at 5 m/s (a control period is 25)."""
    env = open_arena_env(dyn)
    sim = env.sim
    out = []
    for _ in range(n):
        sim.step(np.array([[5.0, 0.0, 0.0, 0.0]]), period=np.array([sim.h]))
        out.append(pitch_deg(env))
    return out


def test_a_slower_motor_lags_more():
    quick, slow = (
        physics_steps_tilt(fixed(motor_time_constant_scale=0.8), 15),
        physics_steps_tilt(fixed(motor_time_constant_scale=3.0), 15),
    )
    # the same command, the airframe pitches later behind slower motors
    assert slow[4] < 0.8 * quick[4] and slow[9] < quick[9]


def test_a_larger_inertia_turns_slower():
    small, large = physics_steps_tilt(fixed(inertia_scale=0.8), 15), physics_steps_tilt(fixed(inertia_scale=1.5), 15)
    assert large[9] < 0.9 * small[9]


def test_rotor_drag_asks_for_more_tilt_at_speed():
    def cruise_tilt(scale: float) -> float:
        return float(np.mean(tilt_after(fixed(rotor_drag_scale=scale), 40)[-10:]))  # at 5 m/s, steady

    low, high = cruise_tilt(0.5), cruise_tilt(2.0)
    assert high > low + 1.0  # degrees: the drag the forward tilt holds against


def test_gusts_push_a_hovering_vehicle():
    def drift(gust: float) -> float:
        env = NavEnv("easy", backend="mujoco", dynamics=fixed(gust_std=gust) if gust else None)
        env.reset(seed=3)
        start = env.sim.pos[0].copy()
        worst = 0.0
        for _ in range(50):
            env.step(HOVER_ACTION)
            worst = max(worst, float(np.abs(env.sim.pos[0, 0:2] - start[0:2]).max()))
        return worst

    assert drift(0.0) < 1e-3 and drift(1.0) > 0.05


def test_a_pitched_mount_tilts_the_image_as_a_fixed_mount_would():
    tilted = open_arena_env(fixed(camera_pitch_deg=-10.0))
    fixed_mount = open_arena_env(load_dynamics(None, {"camera_mount.pitch_deg": -10.0}))
    level = open_arena_env(None)
    image = tilted.sim.depth()[0]
    assert np.array_equal(image, fixed_mount.sim.depth()[0])
    h = tilted.cfg.camera.height
    # tilted down: the horizon row looks at the floor, nearer than the level camera's
    assert image[h // 2].mean() < level.sim.depth()[0][h // 2].mean()


def test_depth_noise_has_the_drawn_spread():
    noisy, clean = open_arena_env(fixed(depth_noise_std=0.05)), open_arena_env(None)
    diff = noisy.sim.depth()[0] - clean.sim.depth()[0]
    inside = (clean.sim.depth()[0] > 0.2) & (clean.sim.depth()[0] < 0.8)  # away from the clip at 0 and 1
    assert np.std(diff[inside]) == pytest.approx(0.05, rel=0.15)
    assert noisy.sim.physics.record(0)["depth_noise_std"] == pytest.approx(0.05)


def test_the_act_delay_flies_as_the_same_latency_set_by_the_caller():
    """A drawn delay of 40 ms flies the episode set_latency(0.04) flies; on top of a caller's delay, they add."""
    ep_env = NavEnv("default", backend="mujoco")
    ep_env.reset(seed=4)
    ep = ep_env.episode

    def fly(dyn, latency):
        env = NavEnv("default", backend="mujoco", dynamics=dyn)
        env.reset(options={"episode": ep})
        env.set_latency(latency)
        rng = np.random.default_rng(1)
        track = []
        for _ in range(40):
            _, _, te, tr, _ = env.step(int(rng.integers(0, 25)))
            track.append(env.sim.pos[0].copy())
            if te or tr:
                break
        return np.array(track)

    drawn = fly(fixed(act_delay_ms=40.0), 0.0)
    assert np.array_equal(drawn, fly(None, 0.04))
    assert np.array_equal(fly(fixed(act_delay_ms=40.0), 0.03), fly(None, 0.07))
    assert not np.array_equal(drawn, fly(None, 0.0))


# ------------------------------------------------------------------ the run log and the evaluator record it


def test_hil_run_records_each_episodes_physics_in_its_run_log(tmp_path):
    from hil.run import main

    out = tmp_path / "run"
    rc = main(
        ["--policy", "models/policy1_mujoco_int8.onnx", "--sim-only", "--backend", "mujoco", "--dynamics",
         TRAINING_FILE, "--episodes", "2", "--out", str(out)]
    )  # fmt: skip
    assert rc == 0
    rows = [json.loads(x) for x in (out / "run.jsonl").read_text().splitlines()]
    episodes = [r for r in rows if r.get("kind") == "episode"]
    dyn = load_dynamics(TRAINING_FILE)
    for row in episodes:
        env = NavEnv("default", backend="mujoco", dynamics=dyn)
        _, info = env.reset(seed=row["seed"])
        assert row["physics"] == info["physics"]  # what the episode drew, from its seed
    assert episodes[0]["physics"] != episodes[1]["physics"]


def test_hil_run_refuses_dynamics_for_a_backend_without_them(capsys):
    from hil.run import main

    assert main(["--policy", "models/policy1_int8.onnx", "--sim-only", "--dynamics", TRAINING_FILE]) != 0
    assert "--dynamics applies to --backend mujoco" in capsys.readouterr().err


def test_the_evaluator_writes_each_episodes_physics(tmp_path):
    from policies.evaluate import main

    rc = main(
        ["models/policy1_mujoco_int8.onnx", "--backend", "mujoco", "--dynamics", TRAINING_FILE, "--episodes", "3",
         "--num-envs", "3", "--out", str(tmp_path), "--name", "r"]
    )  # fmt: skip
    assert rc == 0
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["dynamics"] == TRAINING_FILE
    (entry,) = report["policies"].values()
    assert all(0 <= e["physics"]["act_delay_s"] <= 0.06 for e in entry["episodes"])
    header = (tmp_path / "r_episodes.csv").read_text().splitlines()[0].split(",")
    assert "physics_mass" in header and "physics_camera_pitch_deg" in header
