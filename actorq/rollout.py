"""A rollout actor: one env, one onnxruntime session (int8 or fp32, the same code), a fixed number of steps
per rollout, every transition tagged with the weight version that chose its action.

Between rollouts the actor takes the newest weight version it is offered: ``pull`` (fetching the broadcast
ONNX bytes from Ray's object store), ``load`` (building the session, ``ActorSession.prepare``), then the swap;
during a rollout the version never changes. Episodes continue across rollouts; actor ``i``'s episode ``k``
is seeded ``TRAIN_SEED_BASE + seed * 1M + i * 100k + k``, so a run is reproducible from its seed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from actorq.errors import ActorQError
from actorq.holder import ActorSession
from actorq.tasks import Exploration, env_action, io_sizes, make_env, spec
from actorq.versions import ModelVersion, RayProcess, Transitions
from policies.config import TRAIN_SEED_BASE


@dataclass(frozen=True)
class RolloutTiming:
    """Seconds of one rollout on the actor, by part."""

    pull_s: float  # fetching the new version's bytes (0 when the version is unchanged)
    load_s: float  # building its session (0 when unchanged)
    act_s: float  # the network: session.run
    env_s: float  # the simulator's steps and resets
    total_s: float


@dataclass(frozen=True)
class Rollout:
    actor: int
    version: int  # the weight version that acted (one per rollout)
    steps: int
    episode_returns: list[float]
    episode_successes: list[bool]  # nav: reached the goal; empty for other tasks
    timing: RolloutTiming
    calibration_sample: np.ndarray = field(repr=False)  # a few observations for the broadcaster's calibration set


class RolloutWorker(RayProcess):
    """Plain class; ``actorq.cluster`` runs it as a Ray actor."""

    def __init__(
        self, task: str, actor: int, seed: int, level: str = "default", first_episode: int = 0, threads: int = 1
    ):
        self.task, self.actor, self.seed = spec(task).name, actor, seed
        self.env = make_env(task, level)
        self.session = ActorSession(threads=threads)
        self.rng = np.random.default_rng([seed, actor])
        self.episode = first_episode  # a restarted actor goes on from the episodes its predecessor began
        self.obs: np.ndarray | None = None
        self.episode_return = 0.0

    def _reset(self) -> None:
        seed = TRAIN_SEED_BASE + self.seed * 1_000_000 + self.actor * 100_000 + self.episode
        obs, _ = self.env.reset(seed=seed)
        self.obs = np.asarray(obs, dtype=np.float32)
        self.episode += 1
        self.episode_return = 0.0

    def take(self, version: int, offered: list) -> tuple[float, float]:
        """Make ``version`` current if newer than the one acting: (pull_s, load_s). ``offered`` holds the
        ModelVersion, or a Ray ObjectRef to it (in a list, so Ray does not fetch it on every call)."""
        if self.session.version is not None and version <= self.session.version:
            return 0.0, 0.0
        t0 = time.perf_counter()
        model = offered[0]
        if not isinstance(model, ModelVersion):
            # deferred: ray: optional extra, seconds to import
            import ray

            model = ray.get(model)
        pull_s = time.perf_counter() - t0
        if model.version != version:
            raise ActorQError(f"actor {self.actor}: offered version {version}, received {model.version}")
        prepared = self.session.prepare(model)
        self.session.swap()
        return pull_s, 0.0 if prepared is None else prepared.session_s

    def rollout(self, steps: int, exploration: Exploration, version: int, offered: list) -> tuple[Rollout, Transitions]:
        """``steps`` env steps with weight ``version`` (fetched only if it is new to this actor): the summary,
        and the transitions (two Ray objects: the driver reads the first and hands the second on)."""
        if steps < 1:
            raise ActorQError(f"a rollout needs at least 1 step, got {steps}")
        t_start = time.perf_counter()
        pull_s, load_s = self.take(version, offered)
        acting = self.session.version
        assert acting is not None
        env = self.env
        obs_dim, n_out = io_sizes(env)
        discrete = spec(self.task).discrete
        obs_buf = np.empty((steps, obs_dim), np.float32)
        next_buf = np.empty((steps, obs_dim), np.float32)
        act_buf = np.empty(steps, np.int64) if discrete else np.empty((steps, n_out), np.float32)
        rew = np.empty(steps, np.float32)
        term = np.zeros(steps, bool)
        trunc = np.zeros(steps, bool)
        returns: list[float] = []
        successes: list[bool] = []
        act_s = env_s = 0.0
        for t in range(steps):
            if self.obs is None:
                t0 = time.perf_counter()
                self._reset()
                env_s += time.perf_counter() - t0
            obs = self.obs
            assert obs is not None
            t0 = time.perf_counter()
            acted = self.session.act(obs[None])
            t1 = time.perf_counter()
            action = exploration.act(acted.action, acted.logits, self.rng)
            next_obs, reward, terminated, truncated, info = env.step(env_action(env, action))
            env_s += time.perf_counter() - t1
            act_s += t1 - t0
            obs_buf[t], next_buf[t], act_buf[t] = obs, next_obs, action
            rew[t], term[t], trunc[t] = reward, terminated, truncated
            self.episode_return += float(reward)
            if terminated or truncated:
                returns.append(self.episode_return)
                if discrete:
                    successes.append(bool(info["is_success"]))
                self.obs = None
            else:
                self.obs = np.asarray(next_obs, dtype=np.float32)
        transitions = Transitions(obs_buf, next_buf, act_buf, rew, term, trunc, np.full(steps, acting, np.int64))
        sample = obs_buf[self.rng.choice(steps, size=min(16, steps), replace=False)]
        total = time.perf_counter() - t_start
        summary = Rollout(
            self.actor, acting, steps, returns, successes, RolloutTiming(pull_s, load_s, act_s, env_s, total), sample
        )
        return summary, transitions
