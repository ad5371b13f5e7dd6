"""ActorQ training on Ray: an fp32 learner, N rollout actors acting with int8 (or fp32) models, a broadcaster.

    python -m actorq.train --task nav --actors 2 --precision int8 --steps 200000 --out runs/actorq_nav_int8
    python -m actorq.train --task pendulum --actors 2 --precision fp32 --steps 20000
    python -m actorq.train ... --address 10.0.0.1:6379 --actor-resource actorq_worker   # an existing cluster

The run goes in rounds, so a seed reproduces it: in round r every actor runs ``--rollout-steps`` env steps with
weight version v_r, while the learner takes round r-1's transitions, does ``--updates-per-step`` gradient steps
per transition (SB3's ``train``) and the broadcaster builds version v_(r+1) from its weights (int8: re-quantized
into a calibrated template, ``actorq.weights``). The round ends when both are done; the actors swap to
v_(r+1) before their next rollout. Staleness (the learner's version when a transition reaches it minus the
version that chose it) is measured per transition, not assumed.

An actor that dies (its process killed, its node lost) is replaced by a new one that goes on from its episode
count; its rollout of that round is run again. The learner is checkpointed every ``--checkpoint-every`` rounds
(``checkpoints/latest.zip`` + ``state.json``); ``--resume`` continues from there (the replay buffer refills).
Writes ``metrics.jsonl`` (one line per round), ``report.json`` (at the end), TensorBoard logs in ``tb/``
and, for nav, ``policy/`` (a policies run directory: ``python -m policies.export`` turns it into an ONNX
policy for quantize and hil) and ``policy_fp32.onnx``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from contextlib import closing
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from actorq import cluster
from actorq.errors import ActorQError
from actorq.tasks import TASKS, Exploration, calibration_observations, evaluate, hidden_sizes, io_sizes, make_env, spec
from actorq.versions import PRECISIONS
from airq_cli import ArgumentParser, Progress, defaults_from, output_dir, run, write_atomic, write_json
from airq_cli.journal import Journal, repair_journal
from firmware_bridge.device import cpu_model
from firmware_bridge.int8_kernels import int8_kernels
from policies.config import TrainConfig
from policies.export import export_run
from policies.presets import PRESETS


@dataclass
class TrainArgs:
    task: str = "nav"
    precision: str = "int8"
    actors: int = 2
    steps: int = 200_000  # env steps in all, over all actors
    rollout_steps: int = 500  # env steps per actor per round (between two weight versions)
    network: str = ""  # "" = the task's default (nav: policy3; pendulum: 400,300)
    level: str = "default"  # nav level
    seed: int = 0
    learning_starts: int = 0  # env steps before the first update; 0 = the task's default
    updates_per_step: float = 0.0  # gradient steps per env step; 0 = the task's default
    learning_rate: float = 0.0  # 0 = the task's default
    batch_size: int = 0  # 0 = the task's default
    buffer_size: int = 0  # 0 = the task's default
    gamma: float = 0.0  # 0 = the task's default
    # nav (DQN): epsilon decays linearly from 1 to exploration_final_eps over exploration_fraction of the steps
    exploration_fraction: float = 0.1
    exploration_final_eps: float = 0.02
    target_update_interval: int = 2_000  # DQN, env steps
    noise_std: float = 0.1  # pendulum (TD3): Gaussian noise on the [-1, 1] action
    recalibrate_below: float = 0.9  # int8: re-calibrate when int8/fp32 actions agree less than this
    eval_every: int = 0  # env steps between evaluations of the actors' model (0 = 5 over the run)
    eval_episodes: int = 0  # 0 = the task's default (nav 200, pendulum 10)
    checkpoint_every: int = 10  # rounds
    watts_per_core: float = 10.0  # the energy estimate: CPU-seconds x this (an assumption, stated in the report)
    address: str = ""  # join this Ray cluster (HOST:PORT or auto) instead of starting a local one
    actor_resource: str = ""  # place each actor on a node offering one unit of this custom resource
    out: str = ""  # default runs/actorq_{task}_{precision}_s{seed}
    resume: bool = False
    progress: bool = True

    def run_dir(self) -> Path:
        return Path(self.out or f"runs/actorq_{self.task}_{self.precision}_s{self.seed}")


# Per task: (learning_starts, updates_per_step, learning_rate, batch_size, buffer_size, gamma, eval_episodes)
TASK_DEFAULTS: dict[str, dict[str, Any]] = {
    # nav: policies' DQN settings (policies/config.py) with a batch the Policy III learner can afford on a CPU
    "nav": dict(
        learning_starts=5_000,
        updates_per_step=0.25,
        learning_rate=1e-4,
        batch_size=64,
        buffer_size=50_000,
        gamma=0.99,
        eval_episodes=200,
    ),
    # pendulum: the RL Zoo's TD3 Pendulum-v1 (hyperparams/td3.yml): lr 1e-3, gamma 0.98, buffer 200k,
    # learning_starts 10k, one update per env step, normal noise 0.1, 400-300; SB3's batch 256
    "pendulum": dict(
        learning_starts=10_000,
        updates_per_step=1.0,
        learning_rate=1e-3,
        batch_size=256,
        buffer_size=200_000,
        gamma=0.98,
        eval_episodes=10,
    ),
}


def resolved(args: TrainArgs) -> TrainArgs:
    """The args with the task's defaults filled in and every value checked (ActorQError names the bad one)."""
    if args.task not in TASKS:
        raise ActorQError(f"--task {args.task!r}: known tasks are {', '.join(TASKS)}")
    if args.precision not in PRECISIONS:
        raise ActorQError(f"--precision {args.precision!r}: use int8 or fp32")
    out = TrainArgs(**asdict(args))
    for key, value in TASK_DEFAULTS[args.task].items():
        if not getattr(out, key):
            setattr(out, key, value)
    for name in ("actors", "steps", "rollout_steps", "batch_size", "buffer_size", "checkpoint_every", "eval_episodes"):
        if getattr(out, name) < 1:
            raise ActorQError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(out, name)}")
    if out.learning_starts < out.batch_size:
        raise ActorQError(f"--learning-starts ({out.learning_starts}) must be at least --batch-size ({out.batch_size})")
    if not 0 < out.updates_per_step <= 64:
        raise ActorQError(f"--updates-per-step must be in (0, 64], got {out.updates_per_step}")
    if not 0 < out.gamma <= 1 or out.learning_rate <= 0:
        raise ActorQError("--gamma must be in (0, 1] and --learning-rate > 0")
    if not 0 <= out.exploration_final_eps <= 1 or not 0 < out.exploration_fraction <= 1:
        raise ActorQError("--exploration-final-eps must be in [0, 1] and --exploration-fraction in (0, 1]")
    if out.noise_std < 0 or out.watts_per_core < 0 or not 0 <= out.recalibrate_below <= 1:
        raise ActorQError("--noise-std and --watts-per-core must be >= 0, --recalibrate-below in [0, 1]")
    hidden_sizes(out.task, out.network)  # a bad --network stops here, before Ray starts
    if out.eval_every < 0:
        raise ActorQError(f"--eval-every must be >= 0, got {out.eval_every}")
    if not out.eval_every:
        out.eval_every = max(out.steps // 5, 1)
    return out


@dataclass(frozen=True)
class Evaluation:
    env_steps: int
    version: int
    seconds_training: float  # wall time of training so far, evaluations excluded
    score: float
    mean_return: float
    success_rate: float | None


@dataclass
class RunState:
    """What a checkpoint must carry to resume (state.json beside checkpoints/latest.zip)."""

    round: int = 0
    env_steps: int = 0
    updates: int = 0
    version: int = 0
    episodes: list[int] = field(default_factory=list)  # episodes begun per actor
    training_s: float = 0.0
    evaluations: list[dict] = field(default_factory=list)
    restarts: list[dict] = field(default_factory=list)
    best_score: float | None = None


@dataclass
class TrainReport:
    args: dict
    task: str
    precision: str
    ray: dict
    machine: dict
    state: dict
    final: dict
    rates: dict
    version_costs: dict
    staleness: dict
    energy_estimate: dict
    reached: dict  # the task's threshold: first evaluation at or above it
    versions: list[dict]


def machine_facts() -> dict[str, str]:
    """The host and the versions a run's numbers depend on: CPU, int8 kernels, cores, Python, torch,
    onnxruntime and ray (a run's and a bench's ``machine``)."""
    # deferred: onnxruntime, ray, torch: ~0.2 s to import, paid only where used
    import onnxruntime
    import ray
    import torch

    return {
        "cpu": cpu_model(),
        "int8_kernels": int8_kernels().describe(),
        "cores": str(os.cpu_count()),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "onnxruntime": onnxruntime.__version__,
        "ray": ray.__version__,
    }


def epsilon(args: TrainArgs, env_steps: int) -> float:
    """SB3 DQN's own schedule: 1 -> final over the first exploration_fraction of the steps."""
    # deferred: stable_baselines3: seconds to import
    from stable_baselines3.common.utils import LinearSchedule

    schedule = LinearSchedule(1.0, args.exploration_final_eps, args.exploration_fraction)
    return float(schedule(1.0 - env_steps / args.steps))


class Run:
    """The driver of one training run."""

    def __init__(self, args: TrainArgs):
        self.args = args
        self.dir = args.run_dir()
        self.task = spec(args.task)

    def _start(self) -> None:
        # deferred: torch (via actorq.learner, actorq.nets): seconds to import
        from actorq.learner import LearnerSettings
        from actorq.nets import OBS_DIM

        a = self.args
        self.ray = cluster.require_ray()
        # local: a logical CPU per actor and one for the learner, even on 2 cores (the report says how many exist)
        self.info = cluster.start(a.address or None, local_cpus=a.actors + 1)
        cluster.check_resources(self.info, a.actors, a.actor_resource or None)
        classes = cluster.remote_classes()
        env = make_env(a.task, a.level)
        obs_dim, n_out = io_sizes(env)
        if self.task.name == "nav" and obs_dim != OBS_DIM:
            raise ActorQError(f"level {a.level!r} gives {obs_dim} observations; ActorQ's nav networks take {OBS_DIM}")
        self.hidden = hidden_sizes(a.task, a.network)
        settings = LearnerSettings(
            task=a.task,
            network=",".join(map(str, self.hidden)),
            level=a.level,
            seed=a.seed,
            learning_rate=a.learning_rate,
            gamma=a.gamma,
            buffer_size=a.buffer_size,
            batch_size=a.batch_size,
            tau=1.0 if self.task.discrete else 0.005,
            target_update_interval=a.target_update_interval,
        )
        self.learner = classes["learner"].remote(settings)
        calibration = calibration_observations(a.task, 512, a.level)
        self.broadcaster = classes["broadcaster"].remote(
            self.hidden,
            obs_dim,
            n_out,
            self.task.discrete,
            a.precision,
            calibration,
            self.task.split_input,
            a.recalibrate_below,
        )
        self.worker_class = classes["worker"]
        self.workers: list[Any] = []

    def _worker(self, i: int, first_episode: int):
        options: dict[str, Any] = {}
        if self.args.actor_resource:
            options["resources"] = {self.args.actor_resource: 1}
        return self.worker_class.options(**options).remote(
            self.args.task, i, self.args.seed, self.args.level, first_episode
        )

    def train(self) -> TrainReport:
        a = self.args
        self.dir.mkdir(parents=True, exist_ok=True)
        state = self._load_state() if a.resume else RunState(episodes=[0] * a.actors)
        if len(state.episodes) != a.actors:
            raise ActorQError(f"{self.dir}: the run had {len(state.episodes)} actors, --actors says {a.actors}")
        self._start()
        ray = self.ray
        if a.resume:
            cluster.get(self.learner.load.remote(self.dir / "checkpoints/latest.zip", state.env_steps, state.updates))
        cluster.get(self.learner.use_tensorboard.remote(str(self.dir / "tb")))
        self.workers = [self._worker(i, state.episodes[i]) for i in range(a.actors)]
        self._record_actors(state)
        self.placement = {
            "driver": ray.get_runtime_context().get_node_id(),
            "learner": cluster.get(self.learner.node_id.remote()),
            "actors": cluster.get([w.node_id.remote() for w in self.workers]),
        }
        version = state.version
        model_ref = self.broadcaster.publish.remote(self.learner.weights.remote(), version)
        previous: list[tuple[Any, Any]] = []  # the last round's (summary, transitions ref) per actor
        rows: list[dict] = []
        self.staleness: list[np.ndarray] = []
        metrics_path = self.dir / "metrics.jsonl"
        if a.resume:
            repair_journal(metrics_path)  # a round's line torn by the kill that stopped the last session
        else:
            metrics_path.unlink(missing_ok=True)
        metrics = Journal(metrics_path)
        bar = Progress(
            a.steps, f"actorq {a.task} {a.precision}", unit="step", initial=state.env_steps, quiet=not a.progress
        )
        next_eval = (state.env_steps // a.eval_every + 1) * a.eval_every
        with bar, closing(metrics):
            while state.env_steps < a.steps:
                t_round = time.perf_counter()
                steps = min(a.rollout_steps, math.ceil((a.steps - state.env_steps) / a.actors))
                # TD3 before learning starts: wide noise (SB3 acts uniformly at random there)
                exploration = (
                    Exploration(True, epsilon=epsilon(a, state.env_steps))
                    if self.task.discrete
                    else Exploration(False, noise_std=a.noise_std if state.env_steps >= a.learning_starts else 1.0)
                )
                launched = {i: self._launch(i, steps, exploration, version, model_ref) for i in range(a.actors)}
                # meanwhile the learner eats the previous round and the broadcaster makes the next version
                next_ref = None
                for _, batch in previous:
                    self.learner.add.remote(batch)
                train_ref = None
                if previous and state.env_steps >= a.learning_starts:
                    updates = int(round(a.updates_per_step * sum(summary.steps for summary, _ in previous)))
                    progress_remaining = 1.0 - state.env_steps / a.steps
                    train_ref = self.learner.train.remote(updates, progress_remaining)
                    next_ref = self.broadcaster.publish.remote(self.learner.weights.remote(), version + 1)
                results = self._collect(launched, steps, exploration, version, model_ref, state)
                train_stats = cluster.get(train_ref) if train_ref is not None else None
                if next_ref is not None:
                    cluster.get(next_ref)  # built: the next round's actors may fetch it
                    model_ref, version = next_ref, version + 1
                previous = results
                for summary, _ in results:
                    self.broadcaster.observe.remote(summary.calibration_sample)
                    # they reach the learner next round, when it holds `version` (just published)
                    self.staleness.append(np.full(summary.steps, version - summary.version))
                round_steps = sum(summary.steps for summary, _ in results)
                state.env_steps += round_steps
                state.round += 1
                state.version = version
                if train_stats is not None:
                    state.updates = train_stats.total_updates
                round_s = time.perf_counter() - t_round
                state.training_s += round_s
                row = self._round_row(state, results, train_stats, round_s, exploration)
                rows.append(row)
                metrics.append(row)
                self.learner.log.remote(
                    {f"actorq/{k}": v for k, v in row.items() if isinstance(v, float)}, state.env_steps
                )
                bar.update(round_steps, postfix=self._postfix(state))
                if state.env_steps >= next_eval or state.env_steps >= a.steps:
                    self._evaluate(state, model_ref, version, bar)
                    next_eval = (state.env_steps // a.eval_every + 1) * a.eval_every
                if state.round % a.checkpoint_every == 0 or state.env_steps >= a.steps:
                    self._checkpoint(state)
        report = self._report(state, rows)
        write_json(self.dir / "report.json", report)
        if self.task.name == "nav":
            self._export_policy(state)
        return report

    def _record_actors(self, state: RunState) -> None:
        """actors.json: the actors' process ids now (to watch or stop them from outside)."""
        pids = cluster.get([w.pid.remote() for w in self.workers])
        write_json(self.dir / "actors.json", {"pids": pids, "round": state.round})

    def _launch(self, i: int, steps: int, exploration, version: int, model_ref) -> Any:
        return self.workers[i].rollout.options(num_returns=2).remote(steps, exploration, version, [model_ref])

    def _collect(self, launched: dict, steps: int, exploration, version: int, model_ref, state: RunState) -> list:
        """Every actor's rollout of this round, in actor order; a dead actor is replaced and runs it again."""
        # deferred: ray: optional extra, seconds to import
        from ray.exceptions import RayActorError

        results = []
        for i in range(self.args.actors):
            summary_ref, batch_ref = launched[i]
            for attempt in range(4):
                try:
                    summary = cluster.get(summary_ref)
                    break
                except RayActorError as e:
                    if attempt == 3:
                        raise ActorQError(f"actor {i} died 4 times in round {state.round}: giving up") from None
                    cause = str(e).splitlines()[0][:160]
                    print(
                        f"actor {i} died in round {state.round} ({cause}); starting a new one from episode "
                        f"{state.episodes[i]}; the learner keeps its checkpoint of round "
                        f"{state.round - state.round % self.args.checkpoint_every}",
                        file=sys.stderr,
                    )
                    state.restarts.append({"actor": i, "round": state.round, "cause": cause})
                    self.workers[i] = self._worker(i, state.episodes[i])
                    self._record_actors(state)
                    summary_ref, batch_ref = self._launch(i, steps, exploration, version, model_ref)
            # episodes ended: a replacement actor begins the one its predecessor was flying again, same seed
            state.episodes[i] += len(summary.episode_returns)
            results.append((summary, batch_ref))
        return results

    def _round_row(self, state: RunState, results: list, train_stats, round_s: float, exploration) -> dict:
        summaries = [s for s, _ in results]
        act_s = sum(s.timing.act_s for s in summaries)
        env_s = sum(s.timing.env_s for s in summaries)
        steps = sum(s.steps for s in summaries)
        returns = [r for s in summaries for r in s.episode_returns]
        successes = [x for s in summaries for x in s.episode_successes]
        row = {
            "round": state.round,
            "env_steps": state.env_steps,
            "version": state.version,
            "acting_version": summaries[0].version,
            "round_s": round_s,
            "actor_steps_per_s": float(steps / max(act_s + env_s, 1e-9)),  # per actor, its own time
            "act_ms": float(1e3 * act_s / max(steps, 1)),
            "env_ms": float(1e3 * env_s / max(steps, 1)),
            "pull_s": float(max(s.timing.pull_s for s in summaries)),
            "load_s": float(max(s.timing.load_s for s in summaries)),
            "rollout_s": float(max(s.timing.total_s for s in summaries)),
            "episodes": len(returns),
            "mean_return": float(np.mean(returns)) if returns else None,
            "train_success": float(np.mean(successes)) if successes else None,
            "epsilon": exploration.epsilon if self.task.discrete else None,
            "updates": train_stats.updates if train_stats else 0,
            "train_s": train_stats.seconds if train_stats else 0.0,
            "loss": train_stats.loss if train_stats else None,
        }
        return row

    def _postfix(self, state: RunState) -> str:
        last = state.evaluations[-1] if state.evaluations else None
        shown = f", {self.task.score_name} {last['score']:.3g}" if last else ""
        return f"v{state.version}, {state.updates:,} updates{shown}"

    def _evaluate(self, state: RunState, model_ref, version: int, bar) -> None:
        # deferred: onnxruntime (via actorq.holder): ~0.2 s to import, paid only where used
        from actorq.holder import ActorSession

        holder = ActorSession()
        holder.load(cluster.get(model_ref))

        def policy(obs: np.ndarray):
            acted = holder.act(obs)
            return acted.action, acted.logits

        score = evaluate(self.args.task, policy, self.args.eval_episodes, self.args.level)
        ev = Evaluation(state.env_steps, version, state.training_s, score.score, score.mean_return, score.success_rate)
        state.evaluations.append(asdict(ev))
        bar.write(
            f"round {state.round}: {state.env_steps:,} steps, version {version}: {self.task.score_name} "
            f"{score.score:.4g} over {score.episodes} episodes",
            file=sys.stderr,
        )
        if state.best_score is None or score.score > state.best_score:
            state.best_score = score.score
            self._save_model("best_model.zip")

    def _save_model(self, name: str) -> None:
        policy_dir = self.dir / "policy"
        policy_dir.mkdir(exist_ok=True)
        cluster.get(self.learner.save.remote(policy_dir / name))

    def _checkpoint(self, state: RunState) -> None:
        (self.dir / "checkpoints").mkdir(exist_ok=True)
        cluster.get(self.learner.save.remote(self.dir / "checkpoints/latest.zip"))
        write_json(self.dir / "checkpoints/state.json", asdict(state))

    def _load_state(self) -> RunState:
        path = self.dir / "checkpoints/state.json"
        if not path.is_file() or not (self.dir / "checkpoints/latest.zip").is_file():
            raise ActorQError(f"{self.dir}: nothing to resume (no checkpoints/state.json and latest.zip)")
        try:
            return RunState(**json.loads(path.read_text()))
        except (ValueError, TypeError) as e:
            raise ActorQError(f"{path}: not a readable run state ({e})") from None

    def _report(self, state: RunState, rows: list[dict]) -> TrainReport:
        a = self.args
        versions = [asdict(r) for r in cluster.get(self.broadcaster.history.remote())]
        cpu = {
            "learner": cluster.get(self.learner.cpu_seconds.remote()),
            "broadcaster": cluster.get(self.broadcaster.cpu_seconds.remote()),
            "actors": float(sum(cluster.get([w.cpu_seconds.remote() for w in self.workers]))),
            "driver": time.process_time(),
        }
        total_cpu = float(sum(cpu.values()))
        stale = np.concatenate(self.staleness) if self.staleness else np.zeros(0)
        built = [v for v in versions if v["version"] > 0]
        rollout_s = [r["rollout_s"] for r in rows]
        # version 0's pull waits for the first template (calibration, quantize_static): not a per-version cost
        pulls = [r["pull_s"] + r["load_s"] for r in rows if r["pull_s"] > 0 and r["acting_version"] > 0]

        def med(x: list[float]) -> float | None:
            return float(np.median(x)) if x else None

        build = med([v["build_s"] for v in built if not v["recalibrated"]])
        per_version = None if build is None or med(pulls) is None else build + (med(pulls) or 0.0)
        reached = next((e for e in state.evaluations if e["score"] >= self.task.reward_threshold), None)
        final = state.evaluations[-1] if state.evaluations else {}
        return TrainReport(
            args=asdict(a),
            task=a.task,
            precision=a.precision,
            ray={
                "address": self.info.address,
                "nodes": self.info.nodes,
                "cpus": self.info.cpus,
                "placement": self.placement | {"actors_now": cluster.get([w.node_id.remote() for w in self.workers])},
            },
            machine=machine_facts(),
            state=asdict(state),
            final=final,
            rates={
                "actor_steps_per_s_median": med([r["actor_steps_per_s"] for r in rows]),
                "act_ms_median": med([r["act_ms"] for r in rows]),
                "env_ms_median": med([r["env_ms"] for r in rows]),
                "updates_per_s": state.updates / max(sum(r["train_s"] for r in rows), 1e-9) if state.updates else None,
                "env_steps_per_s_end_to_end": state.env_steps / max(state.training_s, 1e-9),
            },
            version_costs={
                "build_s_median": build,
                "pull_plus_load_s_median": med(pulls),
                "version_s_median": per_version,
                "rollout_s_median": med(rollout_s),
                "version_over_rollout": None
                if per_version is None or not rollout_s
                else per_version / float(np.median(rollout_s)),
                "recalibrations": sum(1 for v in versions if v["recalibrated"]),
                "agreement_min": min((v["agreement"] for v in versions if v["agreement"] is not None), default=None),
            },
            staleness={
                "mean_versions": float(stale.mean()) if len(stale) else None,
                "max_versions": int(stale.max()) if len(stale) else None,
            },
            energy_estimate={
                "cpu_seconds": cpu,
                "watts_per_core_assumed": a.watts_per_core,
                "joules": total_cpu * a.watts_per_core,
                "note": "an estimate: CPU-seconds x an assumed power per busy core, not a measurement (no RAPL here)",
            },
            reached={"threshold": self.task.reward_threshold, "first": reached},
            versions=versions,
        )

    def _export_policy(self, state: RunState) -> None:
        """policy/ as a policies run directory, and its ONNX file through policies.export."""
        preset = next((name for name, p in PRESETS.items() if p.actor == self.hidden), None)
        if preset is None:
            print(f"note: network {self.hidden} is no policies preset: no policy_fp32.onnx", file=sys.stderr)
            return
        self._save_model("final_model.zip")
        policy_dir = self.dir / "policy"
        cfg = TrainConfig(policy=preset, algo="dqn", level=self.args.level, steps=state.env_steps, seed=self.args.seed)
        write_atomic(policy_dir / "config.toml", cfg.to_toml().encode())
        export_run(policy_dir, self.dir / "policy_fp32.onnx", checkpoint="best", eval_episodes=0)


def parser(prog: str = "python -m actorq.train", description: str = "") -> argparse.ArgumentParser:
    """actorq.train's flags (actorq.bench builds on them)."""
    p = ArgumentParser(prog=prog, description=description or __doc__.split("\n\n")[0])
    p.add_argument("--task", choices=TASKS)
    p.add_argument("--precision", choices=PRECISIONS, help="the actors' models (the learner is always fp32)")
    p.add_argument("--actors", type=int)
    p.add_argument("--steps", type=int, help="env steps in all")
    p.add_argument("--rollout-steps", type=int, help="env steps per actor between two weight versions")
    p.add_argument("--network", help="policy1|policy2|policy3|actorq or hidden sizes like 400,300 ('' = task's)")
    p.add_argument("--level", help="nav_env level (nav)")
    p.add_argument("--seed", type=int)
    for name in ("learning_starts", "batch_size", "buffer_size", "target_update_interval", "eval_every"):
        p.add_argument(f"--{name.replace('_', '-')}", type=int, help="0 = the task's default")
    p.add_argument("--eval-episodes", type=int, help="0 = the task's default")
    p.add_argument("--checkpoint-every", type=int, help="rounds between checkpoints")
    for name in ("updates_per_step", "learning_rate", "gamma", "exploration_fraction", "exploration_final_eps"):
        p.add_argument(f"--{name.replace('_', '-')}", type=float)
    p.add_argument("--noise-std", type=float)
    p.add_argument("--recalibrate-below", type=float)
    p.add_argument("--watts-per-core", type=float, help="assumed power per busy core for the energy estimate")
    p.add_argument("--address", help="HOST:PORT (or auto) of a running Ray cluster; default: a local Ray")
    p.add_argument("--actor-resource", help="custom Ray resource each actor needs (pins actors to those nodes)")
    p.add_argument("--out", type=output_dir)
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its checkpoint")
    p.add_argument("--no-progress", dest="progress", action="store_false")
    return defaults_from(p, TrainArgs)


def summary_lines(report: TrainReport) -> list[str]:
    r, v = report.rates, report.version_costs
    final = report.final
    lines = [
        f"{report.task} {report.precision}: {report.state['env_steps']:,} env steps, {report.state['updates']:,} updates, "
        f"{report.state['version']} versions, {report.state['training_s']:.0f} s",
        f"final {spec(report.task).score_name}: {final.get('score', float('nan')):.4g}"
        + (
            f" (first >= {report.reached['threshold']:g} at {report.reached['first']['env_steps']:,} steps)"
            if report.reached["first"]
            else ""
        ),
        f"actor steps/s {r['actor_steps_per_s_median']:.0f} (act {r['act_ms_median']:.3f} ms, env {r['env_ms_median']:.3f} ms)",
    ]
    if v["version_s_median"] is not None:
        lines.append(
            f"per version {1e3 * v['version_s_median']:.1f} ms (build + pull + load) = "
            f"{100 * v['version_over_rollout']:.1f}% of a rollout ({v['rollout_s_median']:.2f} s)"
        )
    if report.state["restarts"]:
        lines.append(f"actor restarts: {len(report.state['restarts'])}")
    return lines


def main(argv: list[str] | None = None) -> int:
    args = resolved(TrainArgs(**vars(parser().parse_args(argv))))

    cluster.require_ray()
    out = args.run_dir()
    if out.exists() and any(out.iterdir()) and not args.resume:
        if (out / "checkpoints/state.json").is_file():
            raise ActorQError(f"{out} holds a run: --resume to continue it, or another --out")
    try:
        report = Run(args).train()
    finally:
        cluster.stop()
    for line in summary_lines(report):
        print(line)
    print(f"report: {out / 'report.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
