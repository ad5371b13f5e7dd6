"""Training arguments: one dataclass (CleanRL style), filled from defaults < a TOML file < the
command line. The resolved config is written to the run directory as ``config.toml``."""

from __future__ import annotations

import argparse
import dataclasses
import json
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from airq_cli import ArgumentParser, output_dir
from nav_env.backends import backend_names, dynamics_for
from nav_env.config import ConfigError, load_level
from nav_env.latency import offline_latency
from policies.errors import UserError
from policies.presets import check_algorithm, get_preset

# Seed ranges: training envs, periodic evaluation during training (model selection) and the
# reported evaluation (policies.evaluate --seed 0, episodes 0..N-1) never share an episode.
TRAIN_SEED_BASE = 10_000_000
EVAL_SEED_BASE = 1_000_000
# which checkpoint of a run directory a tool reads (here, not in policies.actor: parsers must not import torch)
RUN_CHECKPOINTS = ("best", "final", "latest")


@dataclass
class TrainConfig:
    policy: str = "policy1"  # preset name: policy1, policy2, policy3
    algo: str = "ppo"  # ppo, a2c, dqn
    level: str = "default"  # nav_env level name or level TOML path
    steps: int = 3_000_000  # total env steps
    seed: int = 0
    num_envs: int = 32
    curriculum: bool = True  # goal-zone curriculum (nav_env's ZoneCurriculum)
    curriculum_graduate: bool = True  # once the last zone is unlocked, train on all zones (as evaluated)
    learning_rate: float = 3e-4
    lr_schedule: str = "linear"  # linear (anneal to 0) or constant
    gamma: float = 0.99
    # PPO / A2C
    n_steps: int = 128  # per env per rollout
    batch_size: int = 512
    n_epochs: int = 10
    gae_lambda: float = 0.95
    clip_range: float = 0.2
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    # DQN
    buffer_size: int = 50_000  # 1032 floats per obs: 50k transitions is ~400 MB
    learning_starts: int = 10_000
    train_freq: int = 4
    gradient_steps: int = 1
    target_update_interval: int = 10_000
    exploration_fraction: float = 0.1
    exploration_final_eps: float = 0.02
    # Warm start: initialise the actor from this SB3 zip / run dir (e.g. a behaviour-cloned Policy III)
    init_from: str = ""
    # Latency-aware training (docs/latency.md): each env-step's action lands a delay drawn from this source,
    # fixed:MS or replay:REPORT.json (a hil.run report's round trips, e.g. a real Pi's); "" trains in lockstep
    latency: str = ""
    # The simulator: "embedded" (nav_env's kinematic vehicle) or "mujoco" (the rigid-body quadrotor, docs/dynamics.md)
    backend: str = "embedded"
    # The vehicle's dynamics TOML for a backend that has one (mujoco: nav_env/dynamics/iris.toml when ""); its
    # [randomization] ranges draw each training and evaluation episode's airframe, motors, camera and delay
    dynamics: str = ""
    # Run bookkeeping
    eval_every: int = 250_000  # env steps between evaluations on held-out seeds
    eval_episodes: int = 200
    eval_seed: int = EVAL_SEED_BASE
    checkpoint_every: int = 250_000
    torch_threads: int = 1  # 2 threads collapse (OpenMP spin-waits) when other jobs share the 2 cores
    out: str = ""  # run directory; default runs/{policy}_{algo}_{level}_s{seed}
    progress: bool = True

    def run_dir(self) -> Path:
        level = Path(self.level).stem
        return Path(self.out or f"runs/{self.policy}_{self.algo}_{level}_s{self.seed}")

    def env_config(self, curriculum: bool):
        """The nav_env level config; evaluation always uses curriculum=False (goals over all zones)."""
        return load_level(self.level, {"curriculum.enabled": curriculum})

    def validate(self) -> TrainConfig:
        get_preset(self.policy)
        check_algorithm(self.algo)
        if self.lr_schedule not in ("linear", "constant"):
            raise UserError(f"lr_schedule must be 'linear' or 'constant', got {self.lr_schedule!r}")
        if self.backend not in backend_names(in_process=True):
            raise UserError(
                f"backend must be one nav_env trains in ({', '.join(backend_names(in_process=True))}), "
                f"got {self.backend!r}"
            )
        for name in (
            "steps",
            "num_envs",
            "n_steps",
            "batch_size",
            "n_epochs",
            "eval_every",
            "eval_episodes",
            "checkpoint_every",
            "torch_threads",
            "buffer_size",
        ):
            if getattr(self, name) < 1:
                raise UserError(f"{name} must be >= 1, got {getattr(self, name)}")
        self.latency_source()  # a bad source is a one-line error before any work
        self.dynamics_config()  # a bad file, or one for a backend without dynamics: a one-line error first
        return self

    def dynamics_config(self):
        """The vehicle dynamics the envs fly (None: the backend's own default)."""
        try:
            return dynamics_for(self.backend, self.dynamics)
        except ConfigError as e:
            raise UserError(str(e)) from None

    def latency_source(self):
        """The training delays (nav_env.latency.LatencySource), or None for lockstep training."""
        if not self.latency:
            return None

        return offline_latency(self.latency, "latency")

    def to_toml(self) -> str:
        lines = ["# resolved training config (policies.train)"]
        for f in fields(self):
            lines.append(f"{f.name} = {json.dumps(getattr(self, f.name))}")  # JSON scalars are valid TOML
        return "\n".join(lines) + "\n"


_FIELD_TYPES = {f.name: f.type for f in fields(TrainConfig)}


def load_toml(path: str | Path) -> dict[str, Any]:
    """Read a training TOML (flat keys, as in configs/train/*.toml), checking names and types."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"config file not found: {path}")
    try:
        data = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: invalid TOML: {e}") from None
    defaults = TrainConfig()
    for key, value in data.items():
        if key not in _FIELD_TYPES:
            raise UserError(f"{path}: unknown config key {key!r}")
        want = type(getattr(defaults, key))
        if want is float and isinstance(value, int) and not isinstance(value, bool):
            data[key] = float(value)
        elif not isinstance(value, want) or (want is int and isinstance(value, bool)):
            raise UserError(f"{path}: {key} must be {want.__name__}, got {value!r}")
    return data


def _bool(text: str) -> bool:
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true/false, got {text!r}")


def build_parser(description: str, prog: str = "python -m policies.train") -> argparse.ArgumentParser:
    p = ArgumentParser(prog=prog, description=description)
    p.add_argument("--config", help="TOML file of defaults (configs/train/*.toml); command-line flags override it")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its latest checkpoint")
    for f in fields(TrainConfig):
        default = getattr(TrainConfig(), f.name)
        kind = _bool if isinstance(default, bool) else output_dir if f.name == "out" else type(default)
        # default=SUPPRESS: only flags the user typed reach the namespace, so they override the TOML
        p.add_argument(
            f"--{f.name.replace('_', '-')}",
            dest=f.name,
            type=kind,
            default=argparse.SUPPRESS,
            help=f"(default {default!r})",
        )
    return p


def resolve(args: argparse.Namespace) -> TrainConfig:
    values: dict[str, Any] = {}
    if args.config:
        values.update(load_toml(args.config))
    values.update({k: v for k, v in vars(args).items() if k in _FIELD_TYPES})
    return TrainConfig(**values).validate()


def from_run_dir(run_dir: Path) -> TrainConfig:
    path = run_dir / "config.toml"
    return TrainConfig(**load_toml(path)).validate()


def replace(cfg: TrainConfig, **changes: Any) -> TrainConfig:
    return dataclasses.replace(cfg, **changes)
