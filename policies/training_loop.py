"""The training run: SB3 learn() with a callback that shows progress, evaluates on held-out seeds,
keeps the best model and writes atomic, resumable checkpoints."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback

from airq_cli import Progress, write_json
from nav_env.rollout import HEADLINE_FIELDS, run_episodes, summarize
from policies.actor import actor_from_model, algo_class, torch_policy_fn
from policies.builders import build_model, make_vec_env, warm_start
from policies.config import TrainConfig
from policies.machine import machine_info
from policies.vec_adapter import NavSB3VecEnv


def evaluate_model(model, cfg: TrainConfig, episodes: int, seed: int) -> dict:
    """Deterministic actions of the deployable actor over seeded episodes (curriculum off, all zones), with the
    latency it trains under (so the best checkpoint is the best at that latency)."""
    actor = actor_from_model(model)
    latency = cfg.latency_source()
    results = list(
        run_episodes(
            torch_policy_fn(actor),
            cfg.env_config(False),
            episodes,
            seed,
            num_envs=32,
            latency=latency,
            backend=cfg.backend,
            dynamics=cfg.dynamics_config(),
        )
    )
    s = summarize(results)
    return {k: s[k] for k in HEADLINE_FIELDS} | {"episodes": episodes, "seed": seed}


def save_atomic(model, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.tmp.zip")  # SB3 appends .zip to suffix-less names
    # tensorboard_log stays out of the zip: whoever loads the checkpoint later (quantize's QAT, a
    # fine-tune) would otherwise log into this run's tb/ folder
    model.save(tmp, exclude=["tensorboard_log"])
    os.replace(tmp, path)


class RunCallback(BaseCallback):
    def __init__(self, cfg: TrainConfig, run_dir: Path, state: dict, metrics: dict):
        super().__init__()
        self.cfg, self.run_dir, self.state, self.metrics = cfg, run_dir, state, metrics
        self.t_start = time.perf_counter()
        self.wall_before = float(state.get("train_wall_s", 0.0))
        self.bar: Progress | None = None
        self._last_bar = 0.0
        self._bar_steps = 0

    # ------------------------------------------------------------ helpers
    @property
    def nav_env(self) -> NavSB3VecEnv:
        """The env being trained on, with its curriculum (SB3 types it as any VecEnv)."""
        env = self.training_env
        if not isinstance(env, NavSB3VecEnv):
            raise TypeError(f"the training env is a {type(env).__name__}, not policies.builders' NavSB3VecEnv")
        return env

    def wall_s(self) -> float:
        return self.wall_before + time.perf_counter() - self.t_start

    def train_success(self) -> float | None:
        buf = self.model.ep_success_buffer
        return float(np.mean(buf)) if buf else None

    def _on_training_start(self) -> None:
        self.next_eval = (self.num_timesteps // self.cfg.eval_every + 1) * self.cfg.eval_every
        self.next_ckpt = (self.num_timesteps // self.cfg.checkpoint_every + 1) * self.cfg.checkpoint_every
        self._bar_steps = self.num_timesteps
        if self.cfg.progress:
            # a bar on a terminal; a plain line per tenth of the steps otherwise (a pipe, a log file)
            self.bar = Progress(
                self.cfg.steps,
                f"{self.cfg.policy} {self.cfg.algo}",
                unit="steps",
                initial=self.num_timesteps,
                unit_scale=True,
                dynamic_ncols=True,
                mininterval=1.0,
                leave=True,
            )

    def _on_step(self) -> bool:
        now = time.perf_counter()
        if self.bar is not None and now - self._last_bar > 1.0:
            ts = self.train_success()
            zone = self.nav_env.curriculum_zone
            self.bar.update(
                self.num_timesteps - self._bar_steps,
                postfix=f"train success {ts:.0%} zone {'all' if zone < 0 else zone}" if ts is not None else "",
            )
            self._bar_steps = self.num_timesteps
            self._last_bar = now
        if self.num_timesteps >= self.next_eval:
            self.evaluate()
            self.next_eval += self.cfg.eval_every
        if self.num_timesteps >= self.next_ckpt:
            self.checkpoint()
            self.next_ckpt += self.cfg.checkpoint_every
        return True

    def _on_training_end(self) -> None:
        if self.bar is not None:
            self.bar.update(self.num_timesteps - self._bar_steps)
            self.bar.close()

    def evaluate(self) -> dict:
        result = evaluate_model(self.model, self.cfg, self.cfg.eval_episodes, self.cfg.eval_seed)
        zone = self.nav_env.curriculum_zone
        entry = {
            "timesteps": int(self.num_timesteps),
            "wall_s": round(self.wall_s(), 1),
            "train_success_rate": self.train_success(),
            "curriculum_zone": zone,
        } | result
        self.metrics["evals"].append(entry)
        for key in ("success_rate", "collision_rate", "timeout_rate", "mean_return"):
            self.logger.record(f"eval/{key}", result[key])
        self.logger.record("train/curriculum_zone", zone)
        best = self.metrics["best"]
        if result["success_rate"] > best["success_rate"] or best["timesteps"] < 0:
            self.metrics["best"] = {"timesteps": int(self.num_timesteps), "success_rate": result["success_rate"]}
            save_atomic(self.model, self.run_dir / "best_model.zip")
        msg = (
            f"[{self.num_timesteps:,}] held-out success {result['success_rate']:.1%} "
            f"(collision {result['collision_rate']:.1%}, timeout {result['timeout_rate']:.1%}), "
            f"zone {'all' if zone < 0 else zone}, {self.wall_s() / 60:.1f} min"
        )
        (self.bar.write if self.bar is not None else print)(msg)
        self.write_metrics()
        return entry

    def checkpoint(self) -> None:
        """latest.zip first, then state.json naming its step count: a crash between the two leaves the
        previous state.json pointing at a complete, newer zip, which resumes correctly."""
        save_atomic(self.model, self.run_dir / "checkpoints" / "latest.zip")
        venv = self.nav_env
        self.state.update(
            timesteps=int(self.num_timesteps),
            train_wall_s=round(self.wall_s(), 1),
            curriculum_zone=int(venv.venv.curriculum.zone),
            graduated=bool(venv.graduated),
        )
        write_json(self.run_dir / "state.json", self.state)
        self.write_metrics()

    def write_metrics(self) -> None:
        wall = self.wall_s()
        self.metrics.update(
            timesteps=int(self.num_timesteps),
            train_wall_s=round(wall, 1),
            env_steps_per_s=round(self.num_timesteps / wall, 1) if wall > 0 else None,
        )
        write_json(self.run_dir / "metrics.json", self.metrics)


def train(cfg: TrainConfig, run_dir: Path, resume: bool) -> dict:
    state: dict = {"restarts": 0}
    metrics: dict = {
        "config": {k: v for k, v in vars(cfg).items()},
        "machine": machine_info(),
        "evals": [],
        "best": {"timesteps": -1, "success_rate": -1.0},
        "done": False,
    }
    if resume:
        state = json.loads((run_dir / "state.json").read_text())
        state["restarts"] = int(state.get("restarts", 0)) + 1
        if (run_dir / "metrics.json").is_file():
            metrics = json.loads((run_dir / "metrics.json").read_text()) | {"config": vars(cfg), "done": False}
    venv = make_vec_env(cfg, restart=state["restarts"])
    tb_dir = str(run_dir / "tb")
    if resume:
        model = algo_class(cfg.algo).load(
            run_dir / "checkpoints" / "latest.zip", env=venv, device="cpu", tensorboard_log=tb_dir
        )
        venv.set_curriculum_state(state.get("curriculum_zone", 0), state.get("graduated", False))
    else:
        model = build_model(cfg, venv, tb_dir)
        if cfg.init_from:
            warm_start(model, cfg.init_from)
    callback = RunCallback(cfg, run_dir, state, metrics)
    remaining = cfg.steps - model.num_timesteps
    if remaining > 0:
        # reset_num_timesteps=False keeps the step count (and the linear LR schedule) across resumes
        model.learn(
            remaining, callback=callback, reset_num_timesteps=not resume, tb_log_name=cfg.algo, progress_bar=False
        )
    else:
        callback.init_callback(model)
    # the last rollout can overshoot cfg.steps by < num_envs * n_steps; record what really ran
    callback.checkpoint()
    save_atomic(model, run_dir / "final_model.zip")
    if not metrics["evals"] or metrics["evals"][-1]["timesteps"] != model.num_timesteps:
        callback.evaluate()
    metrics["final_eval"] = metrics["evals"][-1]
    metrics["done"] = True
    callback.write_metrics()
    venv.close()
    return metrics
