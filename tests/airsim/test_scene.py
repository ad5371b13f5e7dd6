"""Known maps: scenes, episodes drawn clear of them, and the fake server's world built from one."""

import json

import numpy as np
import pytest

from nav_env.airsim.scene import Scene, sized_config
from nav_env.arena import sample_episode, solvable
from nav_env.config import load_level
from nav_env.sim import BatchSim

CFG = load_level("default")


def test_scene_load_and_validate(tmp_path):
    s = Scene.load({"cylinders": [[12, 8.5, 0.8]], "boxes": [[20, 3, 22.5, 6]]})
    assert s.cylinders == ((12.0, 8.5, 0.8),) and s.boxes == ((20.0, 3.0, 22.5, 6.0),)
    path = s.save(tmp_path / "map.json")
    assert Scene.load(path) == s == Scene.load(str(path)) and json.loads(path.read_text()) == s.to_dict()
    with pytest.raises(ValueError, match="radius"):
        Scene(cylinders=((1, 2, -1),))
    with pytest.raises(ValueError, match="x1 > x0"):
        Scene(boxes=((3, 0, 1, 1),))
    with pytest.raises(ValueError, match="nothing else"):
        Scene.load({"cylinder": []})
    with pytest.raises(ValueError, match="cannot read scene"):
        Scene.load(tmp_path / "missing.json")


def test_episodes_are_drawn_clear_of_the_scene():
    scene = Scene.from_episode(sample_episode(np.random.default_rng(3), load_level("hard")))
    assert len(scene.cylinders) > len(CFG.obstacles.cylinders) or len(scene.boxes) > 0
    draw = scene.episode_fn()
    for seed in range(5):
        ep = draw(np.random.default_rng(seed), CFG, None)
        assert (
            scene.clearance(ep.start) >= CFG.obstacles.clearance and scene.clearance(ep.goal) >= CFG.obstacles.clearance
        )
        assert solvable(ep, CFG)
        again = draw(np.random.default_rng(seed), CFG, None)
        np.testing.assert_array_equal(ep.start, again.start)
        sim = BatchSim(sized_config(CFG, ep), 1)  # a scene's obstacle count, not the level's slots
        sim.load([0], [ep])
        assert not sim.collided()[0]


def test_seeded_resets_on_a_known_map(serve, connect, tmp_path):
    scene = Scene.from_episode(sample_episode(np.random.default_rng(3), load_level("hard")))
    path = scene.save(tmp_path / "map.json")
    server = serve(CFG, path)
    env = connect(server, CFG, scene=str(path), render_mode="rgb_array")
    plain = connect(serve(CFG), CFG, render_mode="rgb_array")
    for seed in range(4):
        obs, info = env.reset(seed=seed)
        assert scene.clearance(env.trajectory[0]) >= CFG.obstacles.clearance
        _, _, terminated, _, info = env.step(7)  # hover: no collision at the start
        assert not info["collision"]
    from nav_env.render import COLORS

    plain.reset(seed=0)
    env.reset(seed=0)

    def obstacle_pixels(frame):
        left = frame[:, : frame.shape[1] // 2]
        return int(np.all(left == COLORS["static"], axis=2).sum())

    assert obstacle_pixels(env.render()) > 100 and obstacle_pixels(plain.render()) == 0  # the map is drawn
    with pytest.raises(ValueError, match="not both"):
        connect(server, CFG, scene=scene, episode_fn=scene.episode_fn())
