"""The mujoco backend (nav_env.dynamics): the env contract, the vehicle's dynamics against its design, the camera,
collisions with every obstacle kind, the latency semantics, and a flight through the real bridge."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pytest

mujoco = pytest.importorskip("mujoco", reason="the mujoco backend needs the dynamics extra (make installs it)")

from nav_env import NavEnv, NavVectorEnv, load_level  # noqa: E402
from nav_env.actions import ACTION_NAMES, HOVER_ACTION  # noqa: E402
from nav_env.arena import make_episode  # noqa: E402
from nav_env.config import ConfigError  # noqa: E402
from nav_env.dynamics import identify  # noqa: E402
from nav_env.dynamics.config import load_dynamics  # noqa: E402
from nav_env.dynamics.controller import Gains, control_step  # noqa: E402
from nav_env.dynamics.world import MujocoSim  # noqa: E402

FWD3 = ACTION_NAMES.index("forward 3")
FWD5 = ACTION_NAMES.index("forward 5")


def play(env, ep, action, max_steps=600):
    env.reset(options={"episode": ep})
    for _ in range(max_steps):
        obs, _, te, tr, info = env.step(action)
        if te or tr:
            return obs, te, tr, info
    raise AssertionError("episode did not end")


# ------------------------------------------------------------------ the env contract
def test_gymnasium_and_sb3_env_checkers_pass():
    from gymnasium.utils.env_checker import check_env
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    check_env(NavEnv(backend="mujoco"), skip_render_check=True)
    sb3_check_env(NavEnv("hard", backend="mujoco"))


def test_same_seed_same_episode_bit_for_bit():
    def run(seed):
        env = NavEnv("hard", backend="mujoco")
        obs, info = env.reset(seed=seed)
        trace = [obs]
        rng = np.random.default_rng(1)
        for _ in range(60):
            obs, r, te, tr, info = env.step(int(rng.integers(25)))
            trace.append(np.append(obs, [r, info["flight_time"], info["path_length"]]))
            if te or tr:
                break
        return np.concatenate(trace)

    a, b = run(7), run(7)
    assert np.array_equal(a, b)
    assert not np.array_equal(a[:1032], run(8)[:1032])


def test_same_seeds_give_the_embedded_backends_episodes_and_first_image():
    """Arena, start, goal and zone come from the same draw; at the start the vehicle is level, so MuJoCo's
    ray-cast image equals the embedded simulator's analytic one up to float32 rounding."""
    for level in ("default", "hard"):
        for seed in range(5):
            emb, dyn = NavEnv(level), NavEnv(level, backend="mujoco")
            o1, i1 = emb.reset(seed=seed)
            o2, i2 = dyn.reset(seed=seed)
            # the same info, the rigid body's adding its tilt: level at the start
            assert i2.pop("tilt") == {"max_deg": 0.0, "mean_deg": 0.0}
            assert np.array_equal(emb.episode.cyl, dyn.episode.cyl) and i1 == i2
            assert np.abs(o1 - o2).max() < 2e-5, (level, seed)


def test_vector_env_flies_what_single_envs_fly():
    """Envs share one MuJoCo model, each arena at its own offset: the same episode to rounding."""
    vec = NavVectorEnv(3, "default", backend="mujoco")
    obs, _ = vec.reset(seed=[11, 12, 13])
    singles = [NavEnv("default", backend="mujoco") for _ in range(3)]
    for env, s in zip(singles, (11, 12, 13)):
        env.reset(seed=s)
    rng = np.random.default_rng(0)
    for _ in range(30):
        acts = rng.integers(0, 25, 3)
        obs, _, te, tr, info = vec.step(acts)
        for k, env in enumerate(singles):
            o, _, te1, tr1, info1 = env.step(int(acts[k]))
            assert te1 == te[k] and tr1 == tr[k]
            assert np.abs(o - obs[k]).max() < 1e-4
            assert abs(info1["distance_to_goal"] - info["distance_to_goal"][k]) < 1e-6
        if (te | tr).any():
            break


# ------------------------------------------------------------------ the vehicle
def test_hover_holds_its_altitude():
    """Started in a hover (rotors at hover speed), the vehicle stays within 1 mm for 10 s: nothing but rounding
    moves it. A 3 s dash at 5 m/s and a stop, at the tilt limit both ways, move it by under half the collision
    radius (rotor drag tilts with the airframe and lifts it while accelerating; braking sinks it: 7 and 9 cm
    here), and the altitude loop (a target altitude, velocity PI, tilt-compensated thrust) brings it back
    within 1 cm in the 3 s of hover that follow."""
    env = NavEnv("easy", backend="mujoco", overrides={"task.max_steps": 1000})
    ep = make_episode(env.cfg, start=(3.0, 15.0), goal=(28.0, 25.0))
    env.reset(options={"episode": ep})
    z0 = env.sim.pos[0, 2]
    for _ in range(100):
        env.step(HOVER_ACTION)
        assert abs(env.sim.pos[0, 2] - z0) < 1e-3
    worst = 0.0
    for action in [FWD5] * 30 + [HOVER_ACTION] * 30:
        env.step(action)
        worst = max(worst, abs(env.sim.pos[0, 2] - z0))
    assert worst < env.cfg.vehicle.radius / 2
    assert abs(env.sim.pos[0, 2] - z0) < 0.01
    # stopped, but for the velocity integrator, wound up against rotor drag during the dash, still unwinding
    assert np.abs(env.sim.vel[0]).max() < 0.2


def test_velocity_step_matches_the_controller_design():
    """The 1 m/s step response's rise time and overshoot are the linearised cascade's (identify.py)."""
    dyn = load_dynamics()
    t, y = identify.designed_velocity_step(dyn)
    designed = identify.StepFigures.of(t, y)
    t, y = identify.measured_step(dyn, (1.0, 0.0, 0.0, 0.0))
    measured = identify.StepFigures.of(t, y[:, 0])
    assert measured.rise_time_s == pytest.approx(designed.rise_time_s, rel=0.1)
    assert abs(measured.overshoot - designed.overshoot) < 0.02
    assert measured.peak_time_s == pytest.approx(designed.peak_time_s, abs=0.1)
    # a harder design: the same check with stiffer gains, so the test follows the gains and not one number
    dyn = load_dynamics(None, {"velocity_loop.p_xy": 4.0, "velocity_loop.i_xy": 2.0})
    designed = identify.StepFigures.of(*identify.designed_velocity_step(dyn))
    t, y = identify.measured_step(dyn, (1.0, 0.0, 0.0, 0.0))
    measured = identify.StepFigures.of(t, y[:, 0])
    assert designed.overshoot > 0.05
    assert measured.rise_time_s == pytest.approx(designed.rise_time_s, rel=0.1)
    assert abs(measured.overshoot - designed.overshoot) < 0.02


def mixer_output(dyn, setpoint, yaw_rate):
    """One control step of a level vehicle at rest at 10 m turning at ``yaw_rate`` (rad/s), motors that follow
    their command within the step: the rotor thrusts and the wrench (world force, body torque) they give."""
    g = Gains.from_config(dyn)
    qpos = np.array([[0.0, 0.0, 10.0, 1.0, 0.0, 0.0, 0.0]])
    qvel = np.array([[0.0, 0.0, 0.0, 0.0, 0.0, yaw_rate]])
    rotor_speed = np.full((1, 4), dyn.hover_rotor_speed)
    xfrc = np.zeros((1, 6))
    one = np.ones(1)
    control_step(
        g, qpos, qvel, np.array([setpoint], dtype=np.float64), np.ones(1, dtype=bool), np.zeros((1, 3)),
        np.array([10.0]), np.zeros((1, 3)), np.zeros((1, 3)), np.zeros(1), rotor_speed,
        np.array([g.motor_constant]), one, one, np.zeros(1), xfrc,
    )  # fmt: skip
    return g.motor_constant * rotor_speed[0] ** 2, xfrc[0]


@pytest.mark.parametrize("airframe", [None, "configs/dynamics/x500.toml"], ids=["iris", "x500"])
@pytest.mark.parametrize("setpoint", [(0.0, 0.0, 0.0, 0.0), (0.5, -0.3, 0.2, 0.0)], ids=["hover", "tilt-and-climb"])
def test_a_saturating_yaw_command_gives_up_yaw_and_keeps_thrust_and_tilt(airframe, setpoint):
    """The mixer gives roll, pitch and thrust first and yaw what is left (PX4's allocation order): a vehicle
    spinning far faster than its yaw loop wants (a yaw torque no rotor can give) gets the same thrust and roll and
    pitch torques as one that does not spin, and the largest yaw torque its rotors can add, against the spin."""
    dyn = load_dynamics(airframe)
    calm_thrusts, calm = mixer_output(dyn, setpoint, 0.0)
    assert 0.0 < calm_thrusts.min() and calm_thrusts.max() < dyn.motors.max_thrust  # nothing saturates without yaw
    for yaw_rate in (-20.0, 20.0):
        thrusts, spun = mixer_output(dyn, setpoint, yaw_rate)
        np.testing.assert_allclose(spun[:5], calm[:5], rtol=1e-9, atol=1e-9)  # force, roll and pitch torque
        assert np.sign(spun[5] - calm[5]) == -np.sign(yaw_rate)
        # yaw got the largest share: a rotor sits at a bound
        bound = np.minimum(np.abs(thrusts), np.abs(thrusts - dyn.motors.max_thrust)).min()
        assert bound < 1e-9
        assert thrusts.min() >= 0.0 and thrusts.max() <= dyn.motors.max_thrust


@pytest.mark.parametrize(
    "path", sorted((Path(__file__).resolve().parents[2] / "configs" / "dynamics").glob("*.toml")), ids=lambda p: p.name
)
def test_every_shipped_dynamics_file_loads(path):
    assert load_dynamics(path).source == str(path)


def test_the_stiff_controller_halves_the_velocity_steps_rise_time():
    """configs/dynamics/iris_stiff.toml's claim (docs/results.md, "What a delay costs a rigid body"): a 1 m/s
    velocity step rises in 0.20 s against the Iris's 0.44 s; with the level camera too, the same."""
    rise = {}
    for name in ("iris_stiff", "iris_gimbal_stiff"):
        t, y = identify.measured_step(load_dynamics(f"configs/dynamics/{name}.toml"), (1.0, 0.0, 0.0, 0.0))
        rise[name] = identify.StepFigures.of(t, y[:, 0]).rise_time_s
    t, y = identify.measured_step(load_dynamics(), (1.0, 0.0, 0.0, 0.0))
    nominal = identify.StepFigures.of(t, y[:, 0]).rise_time_s
    assert nominal == pytest.approx(0.44, abs=0.02)
    assert rise["iris_stiff"] == pytest.approx(0.20, abs=0.02) == rise["iris_gimbal_stiff"]


def test_wind_and_gusts_are_seeded_by_the_episode_and_push_the_vehicle():
    windy = load_dynamics(None, {"wind.speed": [2.0, 4.0], "wind.gust_std": 1.0, "wind.gust_time_constant": 1.0})

    def hover(seed):
        env = NavEnv("easy", backend="mujoco", dynamics=windy)
        env.reset(seed=seed)
        start = env.sim.pos[0].copy()
        track = []
        for _ in range(50):
            env.step(HOVER_ACTION)
            track.append(env.sim.pos[0] - start)
        return np.array(track), env.sim.wind[0].copy()

    a, wind_a = hover(3)
    b, wind_b = hover(3)
    c, wind_c = hover(4)
    assert np.array_equal(a, b) and np.array_equal(wind_a, wind_b)
    assert 2.0 <= np.linalg.norm(wind_a) <= 4.0 and not np.array_equal(wind_a, wind_c)
    assert np.abs(a[:, 0:2]).max() > 0.05  # blown off its hover before the velocity loop's integrator holds it


def test_the_vehicle_tilts_to_accelerate_and_the_body_camera_tilts_with_it():
    env = NavEnv("easy", backend="mujoco")
    ep = make_episode(env.cfg, start=(3.0, 15.0), goal=(28.0, 25.0))
    env.reset(options={"episode": ep})
    pitch = []
    for _ in range(4):
        env.step(FWD5)
        pitch.append(math.degrees(math.asin(-env.sim.rot[0, 2, 0])))  # nose down: positive pitch about body y
    assert 30 < max(pitch) < 38  # accelerating at the tilt limit (35 degrees), with the attitude loop's overshoot
    body = env.sim.depth()[0]
    gimbal = MujocoSim(env.cfg, 1, load_dynamics(None, {"camera_mount.mount": "gimbal"}))
    gimbal.load([0], [ep])
    gimbal.pos[:], gimbal.yaw[:] = env.sim.pos, env.sim.yaw
    level = gimbal.depth()[0]
    h = env.cfg.camera.height
    # pitched down, the body camera's horizon row looks at the floor: nearer than the level camera's horizon
    assert body[h // 2].mean() < level[h // 2].mean()


def test_the_shipped_file_and_the_config_defaults_agree():
    """Keys a dynamics file leaves out take DynamicsConfig's defaults (configs/dynamics/iris_gimbal.toml sets only
    its camera mount): the defaults must be the Iris of nav_env/dynamics/iris.toml, key for key."""
    import dataclasses

    from nav_env.dynamics.config import DynamicsConfig

    assert dataclasses.replace(load_dynamics(), source="") == dataclasses.replace(DynamicsConfig(), source="")
    gimbal = load_dynamics("configs/dynamics/iris_gimbal.toml")
    assert gimbal.camera_mount.mount == "gimbal" and gimbal.airframe == load_dynamics().airframe


def test_dynamics_config_errors_are_one_line():
    with pytest.raises(ConfigError, match="unknown section 'motor'"):
        load_dynamics(None, {"motor.x": 1})
    with pytest.raises(ConfigError, match="cannot lift"):
        load_dynamics(None, {"airframe.mass": 5.0})
    with pytest.raises(ConfigError, match="camera_mount.mount"):
        load_dynamics(None, {"camera_mount.mount": "belly"})
    for at_or_past_g in (9.81, 12.0):  # the thrust vector's vertical part g - max_accel_down would be <= 0
        with pytest.raises(ConfigError, match=r"velocity_loop.max_accel_down must be below g"):
            load_dynamics(None, {"velocity_loop.max_accel_down": at_or_past_g})
    assert load_dynamics(None, {"velocity_loop.max_accel_down": 9.0}).velocity_loop.max_accel_down == 9.0
    with pytest.raises(ConfigError, match="unknown backend"):
        NavEnv(backend="bullet")


# ------------------------------------------------------------------ camera
def test_culling_never_changes_the_image():
    """Casting with only the obstacles nav_env.dynamics.camera keeps gives the image casting at all of them
    gives, in random poses with the airframe tilted up to 45 degrees."""
    cfg = load_level("hard", {"camera.noise_std": 0.0, "camera.dropout": 0.0})
    sim = MujocoSim(cfg, 8)
    rng = np.random.default_rng(3)
    from nav_env.arena import sample_episode

    sim.load(np.arange(8), [sample_episode(rng, cfg) for _ in range(8)])
    culled_any = 0
    for _ in range(25):
        for i in range(8):
            axis = rng.normal(size=3)
            axis /= np.linalg.norm(axis)
            angle = rng.uniform(0, math.radians(45))
            yaw = rng.uniform(-math.pi, math.pi)
            q_yaw = np.array([math.cos(yaw / 2), 0, 0, math.sin(yaw / 2)])
            q_tilt = np.array([math.cos(angle / 2), *(math.sin(angle / 2) * axis)])
            q = np.empty(4)
            mujoco.mju_mulQuat(q, q_yaw, q_tilt)
            sim._qpos[i, 3:7] = q
            sim.pos[i, 0:2] = rng.uniform(1, 29, 2)
        sim._read_state()
        fast = sim.depth()
        culled_any += int((~sim._keep_cyl).sum() + (~sim._keep_box).sum())
        keep = sim._keep_cyl.copy(), sim._keep_box.copy()
        import nav_env.dynamics.world as world

        original = world.visible_obstacles
        try:
            world.visible_obstacles = lambda *a: (a[-2].fill(True), a[-1].fill(True))
            full = sim.depth()
        finally:
            world.visible_obstacles = original
        assert np.array_equal(fast, full), keep
    assert culled_any > 0


def test_images_cast_for_the_batch_equal_those_cast_env_by_env():
    from nav_env.arena import sample_episode

    cfg = load_level("hard", {"camera.noise_std": 0.0, "camera.dropout": 0.0})
    sim = MujocoSim(cfg, 8)
    rng = np.random.default_rng(5)
    sim.load(np.arange(sim.n), [sample_episode(rng, cfg) for _ in range(sim.n)])
    sim.step(np.tile([3.0, 0.0, 0.0, 0.5], (sim.n, 1)))
    batch = sim.depth().copy()
    for i in range(sim.n):
        assert np.array_equal(batch[i], sim.depth(np.array([i]))[0])


# ------------------------------------------------------------------ collisions
@pytest.mark.parametrize(
    "kind",
    ["cylinder", "box", "moving cylinder", "wall x", "wall y", "floor", "ceiling"],
)
def test_each_obstacle_kind_ends_the_episode_in_a_collision(kind):
    overrides = {"task.action_type": "continuous"}
    cfg = load_level("hard", overrides)
    env = NavEnv(config=cfg, backend="mujoco")
    r = cfg.vehicle.radius
    scene = {
        "cylinder": dict(
            cylinders=[(12.0, 15.0, 1.0)], action=[3, 0, 0, 0], surface=lambda p: math.hypot(p[0] - 12, p[1] - 15) - 1.0
        ),
        "box": dict(boxes=[(12.0, 10.0, 14.0, 20.0)], action=[3, 0, 0, 0], surface=lambda p: 12.0 - p[0]),
        "moving cylinder": dict(moving=[(14.0, 9.0, 0.6, 0.0, 1.5)], action=[0, 0, 0, 0], surface=lambda p: None),
        "wall x": dict(action=[4, 0, 0, 0], surface=lambda p: cfg.arena.size_x - p[0]),
        "wall y": dict(action=[0, 4, 0, 0], surface=lambda p: cfg.arena.size_y - p[1]),
        "floor": dict(action=[0, 0, -2, 0], surface=lambda p: p[2]),
        "ceiling": dict(action=[0, 0, 3, 0], surface=lambda p: cfg.arena.ceiling - p[2]),
    }[kind]
    ep = make_episode(
        cfg,
        start=(14.0, 15.0) if kind in ("moving cylinder", "wall x", "wall y", "floor", "ceiling") else (5.0, 15.0),
        goal=(3.0, 3.0),
        cylinders=scene.get("cylinders", ()),
        boxes=scene.get("boxes", ()),
        moving=scene.get("moving", ()),
    )
    _, terminated, _, info = play(env, ep, np.array(scene["action"], dtype=np.float32))
    assert terminated and info["collision"] and not info["is_success"]
    gap = scene["surface"](env.sim.pos[0])
    if gap is not None:  # the sphere touched the surface during the last step: within a step's travel of it
        assert -0.1 < gap - r < 0.6, gap


# ------------------------------------------------------------------ latency
def test_zero_delay_is_lockstep_and_a_whole_period_delays_by_one_action():
    acts = [FWD3, FWD3, 16, 16, 5, 8, FWD5, 12, 12, HOVER_ACTION]

    def fly(delay, actions):
        env = NavEnv("easy", backend="mujoco")
        env.reset(seed=4)
        if delay is not None:
            env.set_latency(delay)
        out = []
        for a in actions:
            env.step(a)
            out.append(np.concatenate([env.sim._qpos[0], env.sim._qvel[0]]))
        return np.array(out)

    lockstep = fly(None, acts)
    assert np.array_equal(fly(0.0, acts), lockstep)
    # a delay of one period: each action lands at the start of the next period, hover before the first
    delayed = fly(0.1, acts)
    shifted = fly(None, [HOVER_ACTION, *acts[:-1]])
    assert np.array_equal(delayed, shifted)


def test_a_delayed_setpoint_takes_over_at_the_first_physics_step_after_it_lands():
    """Delay 50 ms with 4 ms physics steps: the previous setpoint flies steps 0-12 (to 52 ms), the new one the
    remaining 12 steps: the same as a 52 ms period of the old setpoint and a 48 ms one of the new."""

    def env_at(seed=5):
        env = NavEnv("easy", backend="mujoco")
        env.reset(seed=seed)
        env.step(FWD3)  # the held setpoint: forward 3
        return env

    a = env_at()
    a.set_latency(0.05)
    a.step(16)
    b = env_at()
    b.set_latency(0.0, period_s=0.052)
    b.step(FWD3)
    b.set_latency(0.0, period_s=0.048)
    b.step(16)
    assert np.array_equal(a.sim._qpos, b.sim._qpos) and np.array_equal(a.sim._qvel, b.sim._qvel)
    assert a.sim.flight_time[0] == pytest.approx(0.2)


# ------------------------------------------------------------------ in the loop
def test_hil_run_sim_only_flies_the_mujoco_backend_through_the_bridge(tmp_path):
    from hil.run import main

    out = tmp_path / "run"
    rc = main(
        ["--policy", "models/policy1_int8.onnx", "--sim-only", "--backend", "mujoco", "--episodes", "3",
         "--out", str(out)]
    )  # fmt: skip
    assert rc == 0
    report = json.loads((out / "report.json").read_text())
    assert report["backend"] == "mujoco"
    (run,) = report["runs"]
    assert run["summary"]["episodes"] == 3 if "summary" in run else True
    rows = [json.loads(x) for x in (out / "run.jsonl").read_text().splitlines()]
    episodes = [r for r in rows if r.get("kind") == "episode"]
    assert len(episodes) == 3 and all(r["steps"] > 0 for r in episodes)


def test_the_evaluator_and_the_study_fly_the_mujoco_backend(tmp_path):
    """policies.evaluate --backend mujoco pairs episodes as on the embedded backend and says which it flew; the
    deployment study hands its backend to every closed-loop cell."""
    from deployment_study.study import _finished_report, parse_args
    from policies.evaluate import main

    assert main(["baseline:heuristic", "--backend", "mujoco", "--episodes", "4", "--out", str(tmp_path)]) == 0
    (report,) = [json.loads(p.read_text()) for p in tmp_path.glob("*.json")]
    assert report["backend"] == "mujoco" and len(report["policies"]["heuristic"]["episodes"]) == 4
    assert parse_args(["--sim-only", "--backend", "mujoco", "--out", str(tmp_path / "study")]).backend == "mujoco"
    # a finished cell of the other backend is flown again, not reused
    cell = tmp_path / "cell"
    cell.mkdir()
    model = tmp_path / "m.onnx"
    model.write_bytes(b"the model's bytes")
    runs = [{"policy": str(model), "sha256": hashlib.sha256(model.read_bytes()).hexdigest(), "episodes": [{}] * 2}]
    (cell / "report.json").write_text(json.dumps({"runs": runs, "args": {"episodes": 2}, "backend": "embedded"}))
    assert _finished_report(cell, [str(model)], 2, "embedded") is not None
    assert _finished_report(cell, [str(model)], 2, "mujoco") is None


def _multiray_depth(sim: MujocoSim, i: int) -> np.ndarray:
    """Env ``i``'s planar depth image as MuJoCo's own ray cast sees the same scene: the arena as a box seen from
    inside, each obstacle a geom of its shape between floor and ceiling (the reference for the camera's kernel)."""
    a, cam = sim.cfg.arena, sim.cfg.camera
    half_h = a.ceiling / 2
    geoms = [
        f'<geom type="box" size="{a.size_x / 2} {a.size_y / 2} {half_h}" pos="{a.size_x / 2} {a.size_y / 2} {half_h}"/>'
    ]
    geoms += [
        f'<geom type="cylinder" size="{r} {half_h}" pos="{x} {y} {half_h}"/>'
        for x, y, r in sim.cyl[i, :, :3].astype(float)
        if x < 1e3 and r > 0
    ]
    geoms += [
        f'<geom type="box" size="{(x1 - x0) / 2} {(y1 - y0) / 2} {half_h}" pos="{(x0 + x1) / 2} {(y0 + y1) / 2} {half_h}"/>'
        for x0, y0, x1, y1 in sim.box[i].astype(float) if x0 < 1e3 and x1 > x0 and y1 > y0
    ]  # fmt: skip
    model = mujoco.MjModel.from_xml_string(f"<mujoco><worldbody>{''.join(geoms)}</worldbody></mujoco>")
    data = mujoco.MjData(model)
    mujoco.mj_kinematics(model, data)
    rays = (sim.camera_rotation(np.array([i]))[0] @ sim._rays_cam.T).T  # noqa: SLF001 - the camera's pixel rays
    dist, geom = np.empty(len(rays)), np.empty(len(rays), np.int32)
    vec = np.ascontiguousarray(rays).reshape(-1)
    mujoco.mj_multiRay(model, data, sim.pos[i].copy(), vec, None, 1, -1, geom, dist, None, len(rays), sim._cutoff)  # noqa: SLF001
    planar = np.where(dist >= 0, dist * sim._ray_cos, cam.max_range)  # noqa: SLF001
    return (np.minimum(planar, cam.max_range) * (1.0 / cam.max_range)).astype(np.float32).reshape(cam.height, cam.width)


@pytest.mark.parametrize("level", ["default", "hard"])
def test_the_camera_sees_what_mujocos_own_ray_cast_sees(level):
    """The depth camera's kernel (vertical prisms and the arena box, culled to what the view can reach) against
    mj_multiRay on the same scenes: 16 envs, tilting and turning through random actions, every pixel equal."""
    noiseless = {"camera.noise_std": 0.0, "camera.dropout": 0.0}  # hard's noise is drawn after the cast
    env = NavVectorEnv(16, level=level, backend="mujoco", overrides=noiseless)
    env.reset(seed=5)
    rng = np.random.default_rng(5)
    checked = 0
    for step in range(60):
        env.step(rng.integers(0, env.single_action_space.n, 16))
        if step % 6 == 5:
            depth = env.sim.depth()
            for i in range(16):
                np.testing.assert_array_equal(depth[i], _multiray_depth(env.sim, i), err_msg=f"env {i}, step {step}")
                checked += 1
    assert checked == 160


def test_the_studys_latency_stage_flies_the_studys_backend(tmp_path):
    """deployment_study's latency stage flies the simulator the study's closed-loop cells fly (--backend), each
    backend's flights cached apart: its lockstep flight is the evaluator's episodes on that backend."""
    from deployment_study.latency_stage import fly
    from nav_env.rollout import run_episodes
    from policies.loading import load_policy

    model, cfg = "models/policy1_fp32.onnx", load_level("hard")
    policy = load_policy(model)
    outcomes = {
        backend: [r.outcome for r in sorted(run_episodes(policy.act, cfg, 24, 0, 24, backend=backend),
                                            key=lambda r: r.episode)]
        for backend in ("embedded", "mujoco")
    }  # fmt: skip
    assert outcomes["embedded"] != outcomes["mujoco"]  # the point-mass policy fails more often on the quadrotor
    assert fly(model, "hard", 24, 0, 0.0, num_envs=24, backend="mujoco").outcomes == outcomes["mujoco"]
    assert fly(model, "hard", 24, 0, 0.0, num_envs=24).outcomes == outcomes["embedded"]
