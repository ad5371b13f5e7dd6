"""A short look at the environment: the scripted heuristic flies a few seeded episodes; each is
saved as a PNG (map with path, depth image, title with the outcome, legend and scale) and the first
as a GIF.

    python -m nav_env.demo --level default --episodes 4 --seed 0 --out out/demo
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from airq_cli import ArgumentParser, UserError, output_dir, progress, run
from nav_env.baselines import HeuristicPolicy
from nav_env.env import NavEnv
from nav_env.render import EpisodeFigure, episode_title, save_episode_png, save_gif

POLICY = "scripted heuristic"
GIF_FRAMES = 150  # at most: a long episode's GIF shows every k-th recorded step
GIF_DPI = 80


def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="python -m nav_env.demo", description=__doc__.split("\n")[0])
    p.add_argument("--level", default="default")
    p.add_argument("--episodes", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=output_dir, default="out/demo", help="folder for the PNGs and the GIF")
    args = p.parse_args(argv)
    if args.episodes < 1:
        raise UserError(f"--episodes must be >= 1, got {args.episodes}")
    env = NavEnv(args.level, render_mode="rgb_array")  # a bad level is a ConfigError: one line, exit 2
    policy = HeuristicPolicy(env.cfg)
    out = Path(args.out)
    for ep in range(args.episodes):
        seed = args.seed + ep
        obs, info = env.reset(seed=seed)
        frames, steps = ([env.render()], [0]) if ep == 0 else ([], [])
        done = False
        while not done:
            obs, _, terminated, truncated, info = env.step(int(policy(obs[None])[0]))
            done = terminated or truncated
            if ep == 0 and len(env.trajectory) % 2 == 0 and not done:
                frames.append(env.render())
                steps.append(info["steps"])
        outcome = "success" if info["is_success"] else "collision" if info["collision"] else "timeout"
        title = episode_title(POLICY, outcome, info["steps"], seed=seed)
        subtitle = (
            f"level {env.cfg.level}; path flown {info['path_length']:.1f} m, "
            f"start to goal {info['start_distance']:.1f} m in a straight line"
        )
        last = env.render()
        if last is None:
            raise RuntimeError("the demo's env renders no frame")  # it is made with render_mode="rgb_array"
        png = save_episode_png(out / f"episode_{seed}.png", last, env.cfg, title, subtitle, outcome)
        print(
            f"episode seed {seed}: {outcome} after {info['steps']} steps, path {info['path_length']:.1f} m "
            f"for {info['start_distance']:.1f} m straight -> {png}"
        )
        if ep == 0:
            gif = _gif(
                out / f"episode_{seed}.gif", frames + [last], steps + [info["steps"]], env, title, subtitle, outcome
            )
            print(f"animation -> {gif}")
    return 0


def _gif(path: Path, frames: list, steps: list[int], env: NavEnv, title: str, subtitle: str, outcome: str) -> Path:
    """The episode as a GIF of the same annotated figure as the PNG; the last frame (the outcome) held."""
    k = math.ceil(len(frames) / GIF_FRAMES)
    if k > 1:  # every k-th, and always the last
        keep = sorted(set(range(0, len(frames), k)) | {len(frames) - 1})
        frames, steps = [frames[i] for i in keep], [steps[i] for i in keep]
    whens = [f"step {s} of {steps[-1]}" for s in steps]
    images = EpisodeFigure(env.cfg, dpi=GIF_DPI).animate(frames, whens, title, subtitle, outcome)
    # a bar on a terminal, a plain line per quarter of the frames otherwise
    shown = progress(images, len(frames), path.name, unit="frames", every=math.ceil(len(frames) / 4))
    return save_gif(path, shown, hold_last_s=2.0)


if __name__ == "__main__":
    sys.exit(run(main))
