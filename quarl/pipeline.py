"""One trial of the study (a task, an algorithm, a training seed), stage by stage; ``run_trial`` is what a Ray
Tune trial runs.

Stages, each recorded in ``stages/<stage>.json`` (atomically) when done, so a restarted trial goes on after
the last finished one:

1. ``train``: SB3 with the RL Zoo's hyperparameters (quarl.zoo) for the zoo's budget or the config's.
2. ``onnx``: export the acting network (quarl.actor, quarl.export) to ``fp32.onnx``; record calibration
   observations from the fp32 policy's own episodes (seeds ``CALIBRATION_SEED + i``, never evaluated); build
   ``fp16.onnx``, ``int8.onnx`` (static, onnxruntime, MinMax on those observations, logits layer in float, 8-bit
   weights), ``int8-w7.onnx`` (the same with 7-bit weights) and ``int8-dynamic.onnx`` (the seed's method) with
   quantize.ptq; evaluate them all with onnxruntime. ``Trial.requantize`` redoes just the quantized files and
   their evaluation from the kept fp32.onnx and calibration observations (``python -m quarl requantize``).
3. ``ptq-<n>bit``: the seed's n-bit affine quantizer on weights and activations (torch fake-quant; ranges
   from the calibration observations), evaluated.
4. ``qat-<n>bit``: the seed's Algorithm 2 as fine-tuning: quantizers go into the trained model, it trains on
   for ``qat_steps_fraction`` of the budget, in float for the first ``qat_delay_fraction`` of that while the
   activation ranges are monitored, then with weights and activations fake-quantized; evaluated.

Every policy plays the same episodes (``EvalProtocol``: seeds ``eval_seed + i``), so the trial's policies
compare episode by episode.
"""

from __future__ import annotations

import io
import json
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np

from airq_cli import write_atomic, write_json
from quantize.options import INT8_SCHEMES
from quarl.config import PTQ_TARGETS, TrialSpec
from quarl.errors import QuarlError
from quarl.evaluate import episode_returns, evaluation_protocol, recorded_observations
from quarl.machine import machine_record
from quarl.published import baseline_gate
from quarl.results import ONNX, PTQ, QAT, Baseline, EvalProtocol, PolicyEval, TrainInfo, TrialResult
from quarl.tasks import EpisodeEnv, make_train_env

CALIBRATION_SEED = 2_000_000  # calibration episodes: seeds CALIBRATION_SEED + i, disjoint from evaluation's
QAT_SEED_BASE = 3_000_000  # QAT's training envs: QAT_SEED_BASE + seed * 100 + bits
QAT_LR_FRACTION = 0.1  # QAT fine-tunes at a tenth of the zoo's initial learning rate, constant
ONNX_NAMES = ("fp32", "fp16", "int8", "int8-w7", "int8-dynamic")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


class Stages:
    """``stages/<name>.json`` of a trial directory: what is done, and its record."""

    def __init__(self, trial_dir: Path):
        self.dir = trial_dir / "stages"

    def done(self, name: str) -> dict[str, Any] | None:
        path = self.dir / f"{name}.json"
        if not path.is_file():
            return None
        try:
            return json.loads(path.read_text())
        except json.JSONDecodeError:
            return None  # a torn write cannot happen (atomic), but a hand-edited file reruns the stage

    def record(self, name: str, value: dict[str, Any]) -> None:
        write_json(self.dir / f"{name}.json", value)


def protocol_of(spec: TrialSpec) -> EvalProtocol:
    return evaluation_protocol(spec.env_id, spec.eval_episodes, spec.eval_seed)


def onnx_policy(path: Path) -> Callable[[np.ndarray], np.ndarray]:
    """The file's own ``action`` output for a batch of observations (one onnxruntime thread)."""
    # deferred: onnxruntime (via quantize.runtime): ~0.2 s to import, paid only where used
    from quantize.runtime import policy_fn, session

    return policy_fn(session(path.read_bytes(), threads=1))


class Trial:
    def __init__(self, spec: TrialSpec, trial_dir: Path, progress: bool = True):
        # deferred: torch, stable_baselines3 (via quarl.zoo): seconds to import
        from quarl.zoo import zoo_entry

        self.spec, self.dir, self.progress = spec, Path(trial_dir), progress
        self.entry = zoo_entry(spec.env_id, spec.algo)
        self.steps = spec.steps or self.entry.n_timesteps
        self.stages = Stages(self.dir)
        self.protocol = protocol_of(spec)
        self.dir.mkdir(parents=True, exist_ok=True)

    # -- helpers -------------------------------------------------------------------------------------------
    def episode_env(self):
        return EpisodeEnv(self.spec.env_id, self.entry.frame_stack)

    def evaluate(self, policy: Callable[[np.ndarray], np.ndarray]) -> list[float]:
        return [float(r) for r in episode_returns(policy, self.episode_env, self.protocol)]

    def load_model(self, env_seed: int | None = None):
        """The trained model and its VecNormalize (None without); with ``env_seed`` on a fresh training env."""
        # deferred: stable_baselines3: seconds to import
        from stable_baselines3.common.vec_env import VecNormalize

        cls = algo_class(self.spec.algo)
        venv = make_train_env(replace(self.entry, normalize=None), self.spec.seed if env_seed is None else env_seed)
        vec_normalize = None
        if (self.dir / "vecnormalize.pkl").is_file():
            vec_normalize = VecNormalize.load(str(self.dir / "vecnormalize.pkl"), venv)
            vec_normalize.training = False  # the deployed normalization is frozen; QAT trains against it
            venv = vec_normalize
        model = cls.load(str(self.dir / "model.zip"), env=venv, device="cpu")
        return model, vec_normalize

    # -- stages --------------------------------------------------------------------------------------------
    def train(self) -> TrainInfo:
        # deferred: torch: seconds to import
        import torch

        # deferred: torch, stable_baselines3 (via quarl.zoo): seconds to import
        from quarl.zoo import describe, make_model

        done = self.stages.done("train")
        if done is not None and (self.dir / "model.zip").is_file():
            return TrainInfo(**done)
        torch.set_num_threads(self.spec.threads)
        venv = make_train_env(self.entry, self.spec.seed)
        model = make_model(self.entry, venv, self.spec.seed, threads=self.spec.threads)
        log(f"{self.spec.name}: training {self.spec.algo.upper()} on {self.spec.env_id} for {self.steps:,} steps")
        t0 = time.perf_counter()
        model.learn(self.steps, callback=_progress_callback(self.spec.name, self.steps, self.progress))
        wall = time.perf_counter() - t0
        model.save(str(self.dir / "model.tmp.zip"))  # then renamed: a model.zip is always whole
        (self.dir / "model.tmp.zip").replace(self.dir / "model.zip")
        if self.entry.normalize is not None:
            venv.save(str(self.dir / "vecnormalize.pkl"))  # type: ignore[attr-defined]
        venv.close()
        budget_note = ""
        if self.steps != self.entry.n_timesteps:
            budget_note = f"{self.steps:,} steps instead of the zoo's {self.entry.n_timesteps:,}"
        info = TrainInfo(self.steps, round(wall, 1), describe(self.entry), self.entry.source, budget_note)
        self.stages.record("train", asdict(info))
        log(f"{self.spec.name}: trained in {wall:.0f} s")
        return info

    def quantizes(self, fp32_mean: float, threshold: float) -> bool:
        """Whether this seed's quantized policies are built: always, or only past the gate (the spec says)."""
        return self.spec.quantize_failed_baselines or fp32_mean >= threshold

    def onnx_stage(self, threshold: float) -> list[PolicyEval]:
        """fp32 first, then (unless its baseline fails and the spec skips failed ones) fp16 / int8 / dynamic."""
        done = self.stages.done("onnx")
        if done is not None:
            return [PolicyEval(**p) for p in done["policies"]]
        # deferred: torch, onnx (via quarl.actor, quarl.export): seconds to import
        from quarl.actor import actor_from_model
        from quarl.export import export_actor, quantize_files

        model, vec_normalize = self.load_model()
        actor = actor_from_model(model, vec_normalize)
        fp32 = export_actor(actor, self.dir / "fp32.onnx", self.spec, self.entry)
        fp32_returns = self.evaluate(onnx_policy(fp32))
        files = {"fp32": (fp32, 0.0)}
        calibration_obs = 0
        if self.quantizes(float(np.mean(fp32_returns)), threshold):  # only quantization needs the calibration
            calib_protocol = EvalProtocol(self.spec.calibration_episodes, CALIBRATION_SEED, self.protocol.max_steps)
            calib = recorded_observations(onnx_policy(fp32), self.episode_env, calib_protocol)
            write_atomic(self.dir / "calibration_obs.npy", _npy_bytes(calib))
            calibration_obs = len(calib)
            files.update(quantize_files(fp32, calib, self.spec.ptq_targets, self.dir))
        evals = self.evaluate_files(files, fp32_returns)
        self.stages.record("onnx", {"policies": [asdict(e) for e in evals], "calibration_obs": calibration_obs})
        return evals

    def evaluate_files(
        self, files: dict[str, tuple[Path, float]], fp32_returns: list[float] | None
    ) -> list[PolicyEval]:
        """A PolicyEval per ONNX file {name: (path, seconds to build)} on the trial's episodes."""
        # deferred: onnx (via quarl.export): ~0.2 s to import, paid only where used
        from quarl.export import DYNAMIC_SCHEME, STATIC_SCHEMES

        evals = []
        for name, (path, seconds) in files.items():
            returns = fp32_returns if name == "fp32" and fp32_returns else self.evaluate(onnx_policy(path))
            detail: dict[str, Any] = {"bytes": path.stat().st_size}
            scheme = STATIC_SCHEMES.get(name) or (DYNAMIC_SCHEME if name == "int8-dynamic" else None)
            bits = {"fp32": 32, "fp16": 16}.get(name, 8)  # the weights' bits: 7 in the schemes with [-64, 64]
            if scheme:
                detail["scheme"] = scheme
                bits = 7 if INT8_SCHEMES[scheme].reduce_range else 8
            evals.append(PolicyEval(name, ONNX, name, bits, returns, seconds=round(seconds, 2), detail=detail))
            log(f"{self.spec.name}: {name:<12} mean return {np.mean(returns):9.2f} over {len(returns)} episodes")
        return evals

    def requantize(self, targets: tuple[str, ...]) -> list[PolicyEval] | None:
        """Rebuild ``targets`` (quarl.config.PTQ_TARGETS) from the kept fp32.onnx and calibration observations,
        evaluate them on the trial's episodes and put them into the onnx stage's record and trial.json in place
        of any earlier ones; nothing is trained. None when the trial has no calibration observations (its
        baseline failed and it was not quantized)."""
        # deferred: onnx (via quarl.export): ~0.2 s to import, paid only where used
        from quarl.export import quantize_files

        done = self.stages.done("onnx")
        if done is None or not (self.dir / "fp32.onnx").is_file():
            raise QuarlError(f"{self.spec.name}: no exported fp32 policy yet: finish the trial with `quarl run` first")
        calib_path = self.dir / "calibration_obs.npy"
        if not calib_path.is_file():
            return None
        files = quantize_files(self.dir / "fp32.onnx", np.load(calib_path), targets, self.dir)
        fresh = self.evaluate_files(files, None)

        def merged(old: list[PolicyEval]) -> list[PolicyEval]:
            by_name = {p.name: p for p in old} | {p.name: p for p in fresh}
            onnx_order = ("fp32", *PTQ_TARGETS)
            onnx = [by_name[n] for n in onnx_order if n in by_name and by_name[n].method == ONNX]
            return onnx + [p for p in old if p.name not in onnx_order]

        self.stages.record(
            "onnx", done | {"policies": [asdict(p) for p in merged([PolicyEval(**p) for p in done["policies"]])]}
        )
        trial_json = self.dir / "trial.json"
        if trial_json.is_file():
            result = TrialResult.load(trial_json)
            result = replace(result, policies=merged(result.policies))
            write_atomic(trial_json, result.to_json().encode())
        return fresh

    def ptq_stage(self, bits: int) -> PolicyEval:
        name = f"ptq-{bits}bit"
        done = self.stages.done(name)
        if done is not None:
            return PolicyEval(**done)
        # deferred: torch (via policies.actor, quarl.actor): seconds to import
        from policies.actor import torch_policy_fn
        from quarl.actor import actor_from_model, fake_quant_copy

        model, vec_normalize = self.load_model()
        calib = np.load(self.dir / "calibration_obs.npy")
        t0 = time.perf_counter()
        actor = fake_quant_copy(actor_from_model(model, vec_normalize), bits, self.spec.rounding, calib)
        seconds = time.perf_counter() - t0
        result = PolicyEval(
            name, PTQ, f"{bits}bit", bits, self.evaluate(torch_policy_fn(actor)), self.spec.rounding, round(seconds, 2)
        )
        self.stages.record(name, asdict(result))
        log(f"{self.spec.name}: {name:<12} mean return {result.mean:9.2f}")
        return result

    def qat_stage(self, bits: int) -> PolicyEval:
        name = f"qat-{bits}bit"
        done = self.stages.done(name)
        if done is not None:
            return PolicyEval(**done)
        # deferred: torch, stable_baselines3: seconds to import
        import torch
        from stable_baselines3.common.callbacks import BaseCallback

        # deferred: torch (via policies.actor, quantize.fakequant, quarl.actor): seconds to import
        from policies.actor import torch_policy_fn
        from quantize.fakequant import freeze_and_quantize
        from quarl.actor import actor_from_model, insert_into_model

        torch.set_num_threads(self.spec.threads)
        torch.manual_seed(self.spec.seed)
        steps = max(1, round(self.steps * self.spec.qat_steps_fraction))
        delay = round(steps * self.spec.qat_delay_fraction)
        model, vec_normalize = self.load_model(QAT_SEED_BASE + self.spec.seed * 100 + bits)
        lr = QAT_LR_FRACTION * _initial_rate(model.learning_rate)
        model.learning_rate = lr
        model._setup_lr_schedule()  # constant fine-tuning rate, not the zoo's schedule restarted
        if hasattr(model, "exploration_final_eps"):  # DQN: the trained policy explores as it ended, not from 1.0
            final_eps = float(model.exploration_final_eps)
            model.exploration_schedule = lambda _progress: final_eps
        if hasattr(model, "learning_starts"):  # off-policy: the replay buffer refills in the first half of the delay
            model.learning_starts = min(int(model.learning_starts), max(delay // 2, 1))
        calib = np.load(self.dir / "calibration_obs.npy")
        if self.entry.noise is not None:
            # deferred: torch, stable_baselines3 (via quarl.zoo): seconds to import
            from quarl.zoo import action_noise

            model.action_noise = action_noise(self.entry, int(np.prod(model.action_space.shape)))
        quantized = insert_into_model(model, bits, self.spec.rounding)
        froze_at = {"step": -1}

        def freeze(step: int) -> None:
            # The monitored ranges also cover what the fp32 policy meets in its own episodes: an off-policy
            # learner may not have acted yet (random actions before learning_starts).
            obs = calib.reshape(-1, *model.observation_space.shape)
            if vec_normalize is not None:
                obs = vec_normalize.normalize_obs(obs)
            model.policy.predict(obs, deterministic=True)
            freeze_and_quantize(quantized)
            froze_at["step"] = step

        class Freeze(BaseCallback):
            def _on_step(self) -> bool:
                if froze_at["step"] < 0 and self.num_timesteps >= delay:
                    freeze(int(self.num_timesteps))
                return True

        log(f"{self.spec.name}: QAT {bits}-bit, {steps:,} steps (delay {delay:,}), lr {lr:.3g}")
        t0 = time.perf_counter()
        model.learn(steps, callback=Freeze(), reset_num_timesteps=True)
        if froze_at["step"] < 0:
            freeze(int(model.num_timesteps))
        seconds = time.perf_counter() - t0
        actor = actor_from_model(model, vec_normalize)
        detail = {"steps": steps, "delay": delay, "froze_at": froze_at["step"], "learning_rate": lr}
        result = PolicyEval(
            name,
            QAT,
            f"{bits}bit",
            bits,
            self.evaluate(torch_policy_fn(actor)),
            self.spec.rounding,
            round(seconds, 2),
            detail,
        )
        self.stages.record(name, asdict(result))
        log(f"{self.spec.name}: {name:<12} mean return {result.mean:9.2f} ({seconds:.0f} s)")
        return result

    def run(self) -> TrialResult:
        # the gate first: a cell without a published score fails before its training, not after every stage;
        # MinAtar's random-policy gate plays the trial's own protocol (its episodes, seeds and step cap)
        protocol = self.protocol
        published, source, threshold = baseline_gate(
            self.spec.env_id,
            self.spec.algo,
            episodes=protocol.episodes,
            seed=protocol.seed,
            max_steps=protocol.max_steps,
        )
        info = self.train()
        policies = self.onnx_stage(threshold)
        fp32 = next(p for p in policies if p.name == "fp32")
        baseline = Baseline.judge(published, source, threshold, fp32.returns)
        if self.quantizes(fp32.mean, threshold):
            policies += [self.ptq_stage(b) for b in self.spec.ptq_bits]
            policies += [self.qat_stage(b) for b in self.spec.qat_bits]
        else:
            log(f"{self.spec.name}: fp32 {fp32.mean:.2f} below the gate {threshold:g}: not quantized")
        result = TrialResult(
            self.spec.env_id, self.spec.algo, self.spec.seed, info, self.protocol, baseline, policies, machine_record()
        )
        write_atomic(self.dir / "trial.json", result.to_json().encode())
        verdict = "passed" if baseline.passed else "FAILED (not used for quantization conclusions)"
        log(f"{self.spec.name}: done; fp32 {fp32.mean:.2f} vs threshold {threshold:g}: baseline {verdict}")
        return result


def run_trial(spec: TrialSpec, trial_dir: Path, progress: bool = True) -> TrialResult:
    """Every stage of one trial, resuming after the last one recorded in ``trial_dir``."""
    if not spec.env_id or not spec.algo:
        raise QuarlError("a trial needs an env and an algorithm")
    return Trial(spec, trial_dir, progress).run()


def algo_class(algo: str):
    # deferred: stable_baselines3: seconds to import
    import stable_baselines3 as sb3

    return {"a2c": sb3.A2C, "dqn": sb3.DQN, "ppo": sb3.PPO, "ddpg": sb3.DDPG, "td3": sb3.TD3, "sac": sb3.SAC}[algo]


def _initial_rate(rate: Any) -> float:
    return float(rate(1.0)) if callable(rate) else float(rate)


def _npy_bytes(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


def _progress_callback(name: str, total: int, enabled: bool):
    # deferred: stable_baselines3: seconds to import
    from stable_baselines3.common.callbacks import BaseCallback

    class Progress(BaseCallback):
        """A line at every tenth of the budget (trial logs are files: no bars)."""

        def __init__(self) -> None:
            super().__init__()
            self.next_mark, self.t0 = total / 10, time.perf_counter()

        def _on_step(self) -> bool:
            if enabled and self.num_timesteps >= self.next_mark:
                rate = self.num_timesteps / max(time.perf_counter() - self.t0, 1e-9)
                log(f"{name}: {self.num_timesteps:,}/{total:,} steps ({rate:,.0f} steps/s)")
                self.next_mark += total / 10
            return True

    return Progress()
