"""A short look at the environment: the scripted heuristic flies a few seeded episodes; each is
saved as a PNG (map with path, depth image) and the first as a GIF.

    python -m nav_env.demo --level default --episodes 4 --seed 0 --out out/demo
"""

from __future__ import annotations

import sys
from pathlib import Path

from airq_cli import ArgumentParser, UserError, output_dir, run
from nav_env.baselines import HeuristicPolicy
from nav_env.env import NavEnv
from nav_env.render import save_gif, save_png


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
        obs, info = env.reset(seed=args.seed + ep)
        frames = [env.render()] if ep == 0 else []
        done = False
        while not done:
            obs, _, terminated, truncated, info = env.step(int(policy(obs[None])[0]))
            done = terminated or truncated
            if ep == 0 and len(env.trajectory) % 2 == 0:
                frames.append(env.render())
        outcome = "success" if info["is_success"] else "collision" if info["collision"] else "timeout"
        png = save_png(out / f"episode_{args.seed + ep}.png", env.render())
        print(
            f"episode seed {args.seed + ep}: {outcome} after {info['steps']} steps, path {info['path_length']:.1f} m "
            f"for {info['start_distance']:.1f} m straight -> {png}"
        )
        if ep == 0:
            gif = save_gif(out / f"episode_{args.seed}.gif", frames + [env.render()])
            print(f"animation -> {gif}")
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
