"""Hand-built scenes: depth values, collisions, success, rewards, truncation and solvability."""

import math

import numpy as np
import pytest

from nav_env import NavEnv, load_level
from nav_env.actions import ACTION_NAMES
from nav_env.arena import make_episode, sample_episode, solvable

FWD3 = ACTION_NAMES.index("forward 3")
BACK2 = ACTION_NAMES.index("back 2")
HOVER = ACTION_NAMES.index("hover")
YAW_L90 = ACTION_NAMES.index("yaw left 90")


def play(env, ep, action, max_steps=1000):
    obs, info = env.reset(options={"episode": ep})
    rewards = []
    for _ in range(max_steps):
        obs, r, te, tr, info = env.step(action)
        rewards.append(r)
        if te or tr:
            return obs, rewards, te, tr, info
    raise AssertionError("episode did not end")


def centre_depth_m(env, obs):
    c = env.cfg.camera
    img = obs[: c.width * c.height].reshape(c.height, c.width)
    # the two rows just above the horizon, two centre columns: see obstacles, not floor
    return float(img[c.height // 2 - 2 : c.height // 2, c.width // 2 - 1 : c.width // 2 + 1].mean()) * c.max_range


def test_depth_of_a_box_face_and_a_cylinder():
    env = NavEnv("default")
    cfg = env.cfg
    ep = make_episode(cfg, start=(5, 15), goal=(25, 25), yaw=0.0, boxes=[(11.0, 5.0, 12.0, 25.0)])
    obs, _ = env.reset(options={"episode": ep})
    # planar depth to a face perpendicular to the view is its distance for every column
    c = cfg.camera
    img = obs[: c.width * c.height].reshape(c.height, c.width) * c.max_range
    row = img[c.height // 2 - 1]
    np.testing.assert_allclose(row, 6.0, atol=1e-4)
    ep = make_episode(cfg, start=(5, 15), goal=(25, 25), yaw=0.0, cylinders=[(10.0, 15.0, 1.0)])
    obs, _ = env.reset(options={"episode": ep})
    # the centre columns look 1.4 deg off axis: the surface is about 4 m ahead
    assert abs(centre_depth_m(env, obs) - 4.0) < 0.02
    # turned away by 180 degrees the cylinder is out of view: the west wall is 5 m behind
    ep = make_episode(cfg, start=(5, 15), goal=(25, 25), yaw=math.pi, cylinders=[(10.0, 15.0, 1.0)])
    obs, _ = env.reset(options={"episode": ep})
    assert abs(centre_depth_m(env, obs) - 5.0) < 0.01


def test_floor_rows_and_max_range():
    env = NavEnv("easy")
    cfg = env.cfg
    ep = make_episode(cfg, start=(15, 15), goal=(25, 25), yaw=0.0)
    obs, _ = env.reset(options={"episode": ep})
    c = cfg.camera
    img = obs[: c.width * c.height].reshape(c.height, c.width)
    f = (c.width / 2) / math.tan(math.radians(c.fov_deg) / 2)
    bottom_tan = (c.height - 0.5 - c.height / 2) / f
    assert img[-1, c.width // 2] == pytest.approx(cfg.arena.altitude / bottom_tan / c.max_range, abs=1e-5)
    # looking along a 15 m corridor of empty arena the horizon rows read max range
    assert img[c.height // 2 - 1, c.width // 2] == 1.0
    assert np.all((img >= 0) & (img <= 1))


def test_flying_into_a_cylinder_is_a_collision_with_penalty():
    env = NavEnv("default")
    ep = make_episode(env.cfg, start=(5, 15), goal=(25, 25), yaw=0.0, cylinders=[(10.0, 15.0, 1.0)])
    obs, rewards, te, tr, info = play(env, ep, FWD3)
    assert te and not tr and info["collision"] and not info["is_success"]
    assert rewards[-1] < env.cfg.reward.collision + 1
    # detected in the first step that ends with the vehicle's radius inside the surface
    contact = 10.0 - 1.0 - env.cfg.vehicle.radius
    assert contact < env.sim.pos[0, 0] <= contact + 3.0 * env.cfg.vehicle.dt


def test_flying_into_a_box_and_a_wall_are_collisions():
    env = NavEnv("default")
    ep = make_episode(env.cfg, start=(5, 15), goal=(25, 5), yaw=0.0, boxes=[(9.0, 14.0, 10.0, 16.0)])
    _, _, te, _, info = play(env, ep, FWD3)
    assert te and info["collision"] and env.sim.pos[0, 0] < 9.0
    ep = make_episode(env.cfg, start=(5, 15), goal=(25, 5), yaw=math.pi)
    _, _, te, _, info = play(env, ep, FWD3)
    assert te and info["collision"] and env.sim.pos[0, 0] < env.cfg.vehicle.radius


def test_floor_collision_in_continuous_mode():
    env = NavEnv("easy", overrides={"task.action_type": "continuous"})
    ep = make_episode(env.cfg, start=(15, 15), goal=(25, 25))
    _, _, te, _, info = play(env, ep, np.array([0.0, 0.0, -2.0, 0.0], np.float32))
    assert te and info["collision"] and env.sim.pos[0, 2] < env.cfg.vehicle.radius


def test_reaching_the_goal_is_success_with_bonus():
    env = NavEnv("default")
    ep = make_episode(env.cfg, start=(5, 15), goal=(15, 15), yaw=0.0)
    obs, rewards, te, tr, info = play(env, ep, FWD3)
    assert te and not tr and info["is_success"] and not info["collision"]
    assert info["distance_to_goal"] < env.cfg.task.success_radius
    assert rewards[-1] > env.cfg.reward.success
    assert info["path_length"] == pytest.approx(10.0 - info["distance_to_goal"], abs=1e-6)


def test_reward_signs_progress_and_step_cost():
    env = NavEnv("default")
    r = env.cfg.reward
    ep = make_episode(env.cfg, start=(10, 15), goal=(25, 15), yaw=0.0)
    env.reset(options={"episode": ep})
    assert env.step(FWD3)[1] > 0  # toward the goal
    env.reset(options={"episode": ep})
    assert env.step(BACK2)[1] < r.step  # away from it
    env.reset(options={"episode": ep})
    assert env.step(HOVER)[1] == pytest.approx(r.step)  # standing still costs the step


def test_time_limit_truncates_not_terminates():
    env = NavEnv("default", overrides={"task.max_steps": 40})
    ep = make_episode(env.cfg, start=(10, 15), goal=(25, 15))
    obs, rewards, te, tr, info = play(env, ep, YAW_L90)
    assert tr and not te and not info["is_success"] and not info["collision"]
    assert len(rewards) == 40 and info["steps"] == 40


def test_moving_obstacle_hits_hovering_vehicle():
    env = NavEnv("hard")
    ep = make_episode(env.cfg, start=(10, 15), goal=(25, 25), moving=[(10.0, 20.0, 0.5, 0.0, -1.5)])
    _, _, te, _, info = play(env, ep, HOVER)
    assert te and info["collision"] and 2.0 < info["steps"] / 10 < 3.0  # about 4.2 m at 1.5 m/s


def test_solvability_on_hand_built_scenes():
    cfg = load_level("default")
    open_scene = make_episode(cfg, start=(5, 15), goal=(25, 15))
    assert solvable(open_scene, cfg)
    wall = [(14.0, y, 16.0, y + 3.0) for y in np.arange(0, 30, 3.0)][:7]
    wall += [(14.0, 21.0, 16.0, 24.0), (14.0, 24.0, 16.0, 27.0), (14.0, 27.0, 16.0, 30.0)]
    cfg_many = load_level("default", {"obstacles.boxes": [0, 12]})
    blocked = make_episode(cfg_many, start=(5, 15), goal=(25, 15), boxes=wall)
    assert not solvable(blocked, cfg_many)
    # a gap narrower than the vehicle stays blocked; a wide one opens the way
    narrow = [b for b in wall if b[1] != 15.0] + [(14.0, 15.3, 16.0, 18.0)]  # a 0.3 m slot
    narrow_gap = make_episode(cfg_many, start=(5, 15), goal=(25, 15), boxes=narrow)
    assert not solvable(narrow_gap, cfg_many)
    wide = [b for b in wall if b[1] not in (12.0, 15.0)]
    assert solvable(make_episode(cfg_many, start=(5, 15), goal=(25, 15), boxes=wide), cfg_many)


@pytest.mark.parametrize("level", ["default", "hard"])
def test_generated_episodes_are_solvable_and_clear(level):
    cfg = load_level(level)
    rng = np.random.default_rng(0)
    for _ in range(100):
        ep = sample_episode(rng, cfg)
        assert solvable(ep, cfg)
        for p in (ep.start, ep.goal):
            d = np.hypot(ep.cyl[:, 0] - p[0], ep.cyl[:, 1] - p[1]) - ep.cyl[:, 2]
            assert d.min() >= cfg.obstacles.clearance - 1e-9
        lo, hi = cfg.task.goal_zones[ep.zone]
        assert lo - 1e-9 <= np.linalg.norm(ep.goal - ep.start) <= hi + 1e-9


def test_observation_stays_in_space_after_flying_through_a_wall():
    # an ended episode that keeps being stepped (e.g. an idle env in a vector batch) leaves the arena
    from gymnasium.vector import AutoresetMode

    from nav_env import NavVectorEnv

    venv = NavVectorEnv(1, level="default", autoreset_mode=AutoresetMode.DISABLED)
    obs, _ = venv.reset(seed=0)
    for _ in range(300):
        obs, *_ = venv.step(np.array([0]))  # forward 5 m/s, on through whatever it hits
    assert venv.sim.pos[0, 0] < 0 or venv.sim.pos[0, 0] > 30 or venv.sim.pos[0, 1] < 0 or venv.sim.pos[0, 1] > 30
    assert venv.single_observation_space.contains(obs[0])
