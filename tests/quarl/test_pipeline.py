"""quarl.pipeline.run_trial end to end at toy budgets, on real SB3 training, real ONNX files and onnxruntime sessions:

* a PPO CartPole trial: every policy, its files and operators, trial.json, the machine record; evaluation that is
  deterministic and paired (every policy plays the same seeded episodes); a rerun after a lost QAT stage redoing
  only that stage; n-bit fake quantization that really quantizes weights and activations;
* QAT on TD3 (off-policy, tanh-squashed continuous actor): the freeze after the delay, actions within the bounds,
  the ONNX action equal to the torch actor's and to SB3's own;
* a CNN (MinAtar Breakout, PPO): static int8 with QLinearConv, int8 actions agreeing with fp32;
* VecNormalize folded into the exported network (MountainCarContinuous PPO, which the zoo normalizes).

The budgets are far too small to learn the tasks; every check here is about the pipeline, not the scores.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import math
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from quantize.fakequant import ActivationQuant, QuantLinear, freeze_and_quantize, weight_quantizers
from quantize.model_io import load_policy
from quarl.actor import actor_from_model, fake_quant_copy, insert_into_model
from quarl.config import TrialSpec
from quarl.evaluate import episode_returns
from quarl.pipeline import CALIBRATION_SEED, ONNX_NAMES, Trial, onnx_policy, run_trial
from quarl.results import ONNX, PTQ, QAT, TrialResult
from quarl.tasks import EpisodeEnv

CARTPOLE = TrialSpec(
    "CartPole-v1", "ppo", 0, steps=3000, eval_episodes=5, ptq_bits=(8, 4), qat_bits=(4,), calibration_episodes=3
)
ALL_POLICIES = [*ONNX_NAMES, "ptq-8bit", "ptq-4bit", "qat-4bit"]


def _ops(path: Path) -> Counter:
    return Counter(node.op_type for node in onnx.load(str(path)).graph.node)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def cartpole(tmp_path_factory) -> tuple[Path, TrialResult]:
    trial_dir = tmp_path_factory.mktemp("cartpole") / CARTPOLE.name
    return trial_dir, run_trial(CARTPOLE, trial_dir, progress=False)


# ------------------------------------------------------------------------------------------------ CartPole PPO
def test_every_policy_is_evaluated_and_its_files_are_what_they_claim(cartpole):
    trial_dir, result = cartpole
    assert [p.name for p in result.policies] == ALL_POLICIES
    methods = {p.name: p.method for p in result.policies}
    assert methods == {**dict.fromkeys(ONNX_NAMES, ONNX), "ptq-8bit": PTQ, "ptq-4bit": PTQ, "qat-4bit": QAT}
    assert [p.bits for p in result.policies] == [32, 16, 8, 7, 7, 8, 4, 4]  # int8-dynamic: u8s7 weights
    for p in result.policies:
        # CartPole pays 1 per step: an episode's return is its length, a whole number >= 1
        assert len(p.returns) == CARTPOLE.eval_episodes, p.name
        assert all(r >= 1 and r == int(r) for r in p.returns), (p.name, p.returns)

    files = {name: trial_dir / f"{name}.onnx" for name in ONNX_NAMES}
    for name, path in files.items():
        policy = load_policy(path, expected_obs_dim=4)  # the airq policy contract: obs -> action, logits
        assert policy.n_actions == 2, name
        meta = policy.metadata
        precision = "int8" if name == "int8-w7" else name
        assert (
            meta["airq.precision"] == precision and meta["airq.env_id"] == "CartPole-v1" and meta["airq.algo"] == "ppo"
        )
        assert result.policy(name).detail["bytes"] == path.stat().st_size
    static, dynamic, fp32 = _ops(files["int8"]), _ops(files["int8-dynamic"]), _ops(files["fp32"])
    assert static["QGemm"] == 2 and static["Gemm"] == 1, static  # two hidden layers int8, the logits layer float
    assert _ops(files["int8-w7"]) == static
    # the weights' bits are what the names say, read from the files' integers: 8-bit weights reach +-127 in some
    # channel (per-channel scales put each channel's largest weight at the top code), 7-bit ones stop at +-64
    from quantize.inspect_model import int8_scheme_from_weights

    schemes = {n: int8_scheme_from_weights(onnx.load(str(files[n]))) for n in ("int8", "int8-w7", "int8-dynamic")}
    assert schemes["int8"]["scheme"] == "s8s8" and schemes["int8"]["largest_weight_code"] == 127, schemes
    assert schemes["int8-w7"]["scheme"] == "u8s7" and schemes["int8-w7"]["largest_weight_code"] <= 64, schemes
    assert schemes["int8-dynamic"]["largest_weight_code"] <= 64, schemes
    for name, scheme in (("int8", "s8s8"), ("int8-w7", "u8s7"), ("int8-dynamic", "u8s7")):
        assert result.policy(name).detail["scheme"] == load_policy(files[name]).metadata["airq.quant.scheme"] == scheme
    assert dynamic["MatMulInteger"] == 3 and "Gemm" not in dynamic, dynamic  # the seed's: every layer's weights
    assert not {"QGemm", "MatMulInteger", "QuantizeLinear"} & set(fp32), fp32
    assert files["fp16"].stat().st_size < 0.75 * files["fp32"].stat().st_size
    # the trial's calibration observations are the fp32 policy's own, from the calibration seeds
    calib = np.load(trial_dir / "calibration_obs.npy")
    assert calib.dtype == np.float32 and calib.shape[1] == 4 and len(calib) >= CARTPOLE.calibration_episodes


def test_trial_json_round_trips_and_names_the_machine(cartpole):
    trial_dir, result = cartpole
    loaded = TrialResult.load(trial_dir / "trial.json")
    assert loaded == result
    assert (loaded.env_id, loaded.algo, loaded.seed) == ("CartPole-v1", "ppo", 0)
    assert loaded.train.steps == 3000 and "3,000 steps instead of the zoo's 100,000" in loaded.train.budget_note
    assert loaded.protocol.episodes == 5 and loaded.protocol.seed == CARTPOLE.eval_seed
    assert loaded.baseline.threshold == 475 and loaded.baseline.passed == (loaded.policy("fp32").mean >= 475)
    cpuinfo = Path("/proc/cpuinfo").read_text()
    flags = {f for line in cpuinfo.splitlines() if line.split(":")[0].strip() in ("flags", "Features")
             for f in line.split(":", 1)[1].split()}  # fmt: skip
    machine = loaded.machine
    assert isinstance(machine["cpu"], str) and machine["cpu"] and machine["cpu"] != "unknown"
    model_names = [line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")]
    if model_names:  # x86: the brand string
        assert machine["cpu"] == model_names[0]
    instructions = machine["int8_instructions"].split()
    assert instructions and set(instructions) <= flags, (instructions, sorted(flags)[:20])
    assert ("avx2" in flags) == ("avx2" in instructions)
    assert machine["onnxruntime"] and machine["stable_baselines3"] and machine["torch"]


class FirstObservations:
    """A policy wrapper that keeps the first batch it is asked about: with at most evaluate.BATCH episodes, every
    episode starts at once, so that batch is the first observation of each episode, in episode order."""

    def __init__(self, policy):
        self.policy, self.first = policy, None

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        if self.first is None:
            self.first = obs.copy()
        return self.policy(obs)


def test_evaluation_is_deterministic_and_every_policy_plays_the_same_episodes(cartpole):
    trial_dir, result = cartpole
    trial = Trial(CARTPOLE, trial_dir, progress=False)
    fp32 = onnx_policy(trial_dir / "fp32.onnx")
    first = episode_returns(fp32, trial.episode_env, trial.protocol)
    assert episode_returns(fp32, trial.episode_env, trial.protocol) == first
    assert first == result.policy("fp32").returns  # what the trial recorded, played again
    assert len(set(first)) > 1  # different seeds, different episodes: the comparison below can fail

    starts = {}
    for name in ("fp32", "int8-dynamic"):
        recorder = FirstObservations(onnx_policy(trial_dir / f"{name}.onnx"))
        returns = episode_returns(recorder, trial.episode_env, trial.protocol)
        assert returns == result.policy(name).returns
        starts[name] = recorder.first
    assert starts["fp32"].shape == (CARTPOLE.eval_episodes, 4)
    np.testing.assert_array_equal(starts["fp32"], starts["int8-dynamic"])
    assert len({row.tobytes() for row in starts["fp32"]}) == CARTPOLE.eval_episodes  # one start per episode
    env = EpisodeEnv("CartPole-v1", None)  # episode i is reset with eval_seed + i
    try:
        expected = np.stack([env.reset(CARTPOLE.eval_seed + i) for i in range(CARTPOLE.eval_episodes)])
        calib_start = env.reset(CALIBRATION_SEED)
    finally:
        env.close()
    np.testing.assert_array_equal(starts["fp32"], expected)
    assert not np.array_equal(calib_start, expected[0])  # calibration episodes are not evaluation episodes


def test_a_rerun_after_a_lost_qat_stage_redoes_only_qat(cartpole, tmp_path, capsys):
    original, result = cartpole
    trial_dir = tmp_path / CARTPOLE.name
    shutil.copytree(original, trial_dir)  # copy2: file times kept
    kept = ["stages/train.json", "stages/onnx.json", "stages/ptq-8bit.json", "stages/ptq-4bit.json"]
    kept += ["model.zip", "calibration_obs.npy", *(f"{n}.onnx" for n in ONNX_NAMES)]
    before = {name: (_sha(trial_dir / name), (trial_dir / name).stat().st_mtime_ns) for name in kept}
    (trial_dir / "stages" / "qat-4bit.json").unlink()
    (trial_dir / "trial.json").unlink()
    capsys.readouterr()

    again = run_trial(CARTPOLE, trial_dir, progress=True)

    out = capsys.readouterr().out
    assert "QAT 4-bit" in out and "training PPO" not in out, out
    evaluated = [line for line in out.splitlines() if "mean return" in line]
    assert len(evaluated) == 1 and "qat-4bit" in evaluated[0], out  # recorded stages are not evaluated again
    assert {name: (_sha(trial_dir / name), (trial_dir / name).stat().st_mtime_ns) for name in kept} == before
    assert (trial_dir / "stages" / "qat-4bit.json").is_file() and (trial_dir / "trial.json").is_file()
    assert TrialResult.load(trial_dir / "trial.json") == again
    assert again.train == result.train  # the recorded wall_s too: training did not run again
    assert again.policies[:-1] == result.policies[:-1]
    qat, qat_before = again.policy("qat-4bit"), result.policy("qat-4bit")
    assert len(qat.returns) == CARTPOLE.eval_episodes and qat.detail["froze_at"] >= qat.detail["delay"]
    # seeded: the same fine-tuning gives the same policy and returns
    assert qat.returns == qat_before.returns and qat.detail == qat_before.detail


def _quantized_weights(module: QuantLinear) -> torch.Tensor:
    """The weights ``module`` computes with, read through its forward: the identity in, on a copy without bias."""
    probe = copy.deepcopy(module)
    probe.linear.register_parameter("bias", None)
    with torch.no_grad():
        return probe(torch.eye(probe.linear.in_features)).T


def _activation_outputs(actor, obs: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
    """What each ActivationQuant of ``actor`` hands on, and the logits, for ``obs``."""
    seen: list[torch.Tensor] = []
    quants = [m for m in actor.modules() if isinstance(m, ActivationQuant)]
    hooks = [m.register_forward_hook(lambda _m, _i, out: seen.append(out)) for m in quants]
    try:
        with torch.no_grad():
            logits = actor(obs)[1]
    finally:
        for h in hooks:
            h.remove()
    return seen, logits


def test_a_failed_baseline_is_not_quantized_when_the_spec_says_so_and_the_report_still_shows_it(tmp_path):
    from quarl.report import build_report

    # 3,000 PPO steps cannot balance CartPole for 475 steps: the gate fails
    spec = dataclasses.replace(CARTPOLE, quantize_failed_baselines=False)
    study = tmp_path / "study"
    result = run_trial(spec, study / "trials" / spec.name, progress=False)
    assert not result.baseline.passed and result.policy("fp32").mean < 475
    assert [p.name for p in result.policies] == ["fp32"]
    assert sorted(f.name for f in (study / "trials" / spec.name).glob("*.onnx")) == ["fp32.onnx"]
    report = build_report(study, figures=False, warn=lambda line: None)
    cell = report.cell("CartPole-v1", "ppo")
    assert not cell.counted and cell.status == "baseline failed"
    assert "**baseline failed**" in (study / "table2.md").read_text()


def test_fake_quant_really_quantizes_weights_and_activations(cartpole):
    trial_dir, _ = cartpole
    model, vec_normalize = Trial(CARTPOLE, trial_dir, progress=False).load_model()
    actor = actor_from_model(model, vec_normalize)
    calib = np.load(trial_dir / "calibration_obs.npy")
    obs = torch.as_tensor(calib)
    with torch.no_grad():
        float_logits = actor(obs)[1]

    for bits in (2, 4, 16):
        q = fake_quant_copy(actor, bits, "nearest", calib)
        quantizers = weight_quantizers(q)
        assert len(quantizers) == 3  # two hidden layers and the logits layer
        for m in quantizers:
            assert isinstance(m, QuantLinear)
            w = _quantized_weights(m)
            distinct = len(torch.unique(w))
            assert 2 <= distinct <= 2**bits, (bits, distinct)
            if bits <= 4:
                assert not torch.allclose(w, m.linear.weight, atol=1e-6)
        seen, logits = _activation_outputs(q, obs)
        assert len(seen) == 3  # the observation and each hidden Tanh's output
        assert all(len(torch.unique(out)) <= 2**bits for out in seen)
        scale = float(float_logits.abs().max())
        if bits == 16:
            assert torch.allclose(logits, float_logits, atol=1e-3 * scale), (logits - float_logits).abs().max()
        elif bits == 2:
            assert (logits - float_logits).abs().max() > 1e-2 * scale
    # the float actor itself is untouched by its quantized copies
    with torch.no_grad():
        assert torch.equal(actor(obs)[1], float_logits)


# ------------------------------------------------------------------------------------------------ TD3 QAT
def test_qat_on_td3_freezes_after_the_delay_and_keeps_actions_in_bounds(tmp_path):
    # 1,500 steps are all before the zoo's learning_starts (10,000): training only collects. QAT lowers
    # learning_starts to half its delay, so the fine-tuning does train, with the quantizers in.
    spec = TrialSpec(
        "Pendulum-v1",
        "td3",
        0,
        steps=1500,
        eval_episodes=3,
        ptq_targets=(),
        ptq_bits=(),
        qat_bits=(4,),
        qat_steps_fraction=0.15,
        calibration_episodes=1,
    )
    result = run_trial(spec, tmp_path / spec.name, progress=False)
    assert [p.name for p in result.policies] == ["fp32", "qat-4bit"]
    qat = result.policy("qat-4bit")
    steps, delay = round(1500 * 0.15), round(round(1500 * 0.15) * spec.qat_delay_fraction)
    assert qat.detail["steps"] == steps and qat.detail["delay"] == delay and delay > 0
    assert delay <= qat.detail["froze_at"] < steps
    assert len(qat.returns) == 3 and all(-16.3 * 200 <= r <= 0 for r in qat.returns)  # Pendulum's reward range
    assert result.baseline.published == -151.9  # the zoo's TD3 Pendulum-v1 score gates the baseline

    trial = Trial(spec, tmp_path / spec.name, progress=False)
    model, _ = trial.load_model()
    actor = actor_from_model(model)
    assert actor.output == "tanh"
    high = np.array([1.0, 1.0, 8.0], dtype=np.float32)
    obs = (np.random.default_rng(0).uniform(-3, 3, (512, 3)) * high).astype(np.float32)  # well past the bounds
    onnx_action = onnx_policy(tmp_path / spec.name / "fp32.onnx")(obs)
    with torch.no_grad():
        torch_action = actor(torch.as_tensor(obs))[0].numpy()
    sb3_action, _ = model.predict(obs, deterministic=True)
    assert onnx_action.shape == (512, 1)
    np.testing.assert_allclose(onnx_action, torch_action, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(onnx_action, sb3_action, rtol=1e-5, atol=1e-5)
    assert np.all(np.abs(onnx_action) <= 2.0)

    # the QAT actor as qat_stage builds it: quantizers in the live model, frozen on the calibration observations
    calib = np.load(tmp_path / spec.name / "calibration_obs.npy")
    quantized = insert_into_model(model, 4, "nearest")
    model.policy.predict(calib, deterministic=True)
    freeze_and_quantize(quantized)
    qat_actor = actor_from_model(model)
    with torch.no_grad():
        action, logits = qat_actor(torch.as_tensor(obs))
    assert torch.all(action.abs() <= 2.0)
    # the tanh squash is not quantized: far more than 2**4 distinct actions
    assert len(torch.unique(action)) > 2**4 and len(torch.unique(logits)) > 2**4
    sb3_qat, _ = model.predict(obs, deterministic=True)
    np.testing.assert_allclose(action.numpy(), sb3_qat, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------------------------ MinAtar CNN
def test_minatar_cnn_static_int8_has_qlinearconv_and_agrees_with_fp32(tmp_path):
    spec = TrialSpec(
        "MinAtar/Breakout-v1",
        "ppo",
        0,
        steps=2000,
        eval_episodes=3,
        ptq_targets=("int8",),
        ptq_bits=(),
        qat_bits=(),
        calibration_episodes=3,
    )
    trial_dir = tmp_path / spec.name
    result = run_trial(spec, trial_dir, progress=False)
    assert [p.name for p in result.policies] == ["fp32", "int8"]
    assert result.protocol.max_steps == 10_000 and math.isnan(result.baseline.published)
    assert "over 3 seeded episodes" in result.baseline.published_source  # the gate played the trial's protocol
    static = _ops(trial_dir / "int8.onnx")
    assert static["QLinearConv"] == 1 and "Conv" not in static, static
    assert static["QGemm"] == 1 and static["Gemm"] == 1, static  # the dense layer int8, the logits layer float
    assert (trial_dir / "int8.onnx").stat().st_size < 0.35 * (trial_dir / "fp32.onnx").stat().st_size

    calib = np.load(trial_dir / "calibration_obs.npy")
    assert calib.shape[1] == 10 * 10 * 4
    fp32, int8 = onnx_policy(trial_dir / "fp32.onnx"), onnx_policy(trial_dir / "int8.onnx")
    assert np.mean(fp32(calib) == int8(calib)) >= 0.9
    # An untrained PPO's logits are tiny and nearly equal (its action_net starts with gain 0.01) and it picks
    # the same action on most of its own frames, so agreement there says little alone: the int8 logits must
    # track fp32's (relative to each frame's mean), and the actions agree where fp32's actions vary.
    from quantize.runtime import session

    def logits(name: str) -> np.ndarray:
        out = session((trial_dir / f"{name}.onnx").read_bytes()).run(["logits"], {"obs": calib})[0]
        return out - out.mean(axis=1, keepdims=True)

    ref, got = logits("fp32"), logits("int8")
    sqnr_db = 10 * np.log10(np.sum(ref**2) / np.sum((ref - got) ** 2))
    assert sqnr_db > 20, sqnr_db
    planes = (np.random.default_rng(0).random((500, 400)) < 0.1).astype(np.float32)  # sparse 0/1 planes
    ref_actions = fp32(planes)
    assert len(set(ref_actions.tolist())) >= 2
    assert np.mean(ref_actions == int8(planes)) >= 0.9


# ------------------------------------------------------------------------------------------------ VecNormalize
def test_vecnormalize_is_folded_into_the_exported_network(tmp_path):
    import gymnasium as gym
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    spec = TrialSpec(
        "MountainCarContinuous-v0",
        "ppo",
        0,
        steps=500,
        eval_episodes=1,
        ptq_targets=(),
        ptq_bits=(),
        qat_bits=(),
        calibration_episodes=1,
    )
    trial_dir = tmp_path / spec.name
    run_trial(spec, trial_dir, progress=False)
    # the model and its statistics loaded as SB3 users do, not through the pipeline
    venv = DummyVecEnv([lambda: gym.make("MountainCarContinuous-v0")])
    vec_normalize = VecNormalize.load(str(trial_dir / "vecnormalize.pkl"), venv)
    vec_normalize.training = False
    model = PPO.load(str(trial_dir / "model.zip"), device="cpu")
    assert not np.allclose(vec_normalize.obs_rms.mean, 0) and not np.allclose(vec_normalize.obs_rms.var, 1)

    rng = np.random.default_rng(0)
    raw = np.concatenate(
        [
            np.load(trial_dir / "calibration_obs.npy")[::10],  # real observations
            np.stack([rng.uniform([-1.2, -0.07], [0.6, 0.07]) for _ in range(200)]),  # the whole observation box
        ]
    ).astype(np.float32)
    got = onnx_policy(trial_dir / "fp32.onnx")(raw)
    want, _ = model.predict(vec_normalize.normalize_obs(raw), deterministic=True)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    unnormalized, _ = model.predict(raw, deterministic=True)
    assert np.abs(got - unnormalized).max() > 1e-2  # the folding matters: raw observations act otherwise
    venv.close()


def test_every_cell_the_zoo_knows_has_a_baseline_gate():
    # run_trial gates the fp32 policy on a published score; a cell the zoo trains but the gate does not know
    # used to fail only at the very end of its trial (Pendulum-v1, and SAC on MountainCarContinuous and
    # HalfCheetahBullet). Now the gate comes first, and every cell has one.
    from quarl import published, zoo

    for env_id, algo in zoo.known_cells():
        if env_id.startswith("MinAtar/"):  # the gate plays a random policy: game and algorithm must be known
            game = env_id.removeprefix("MinAtar/").rsplit("-v", 1)[0]
            assert game in published.MINATAR_GAMES and algo in published.MINATAR_ALGOS
            continue
        value, source, threshold = published.baseline_gate(env_id, algo)
        assert math.isfinite(value) and math.isfinite(threshold) and source, (env_id, algo)


# ------------------------------------------------------------------------------------------------ requantize
def test_requantize_rebuilds_the_static_int8_files_without_training(cartpole, tmp_path):
    """A study from before the 7-bit-weight file existed (its int8-w7 taken out of a copy of the trial) gets it
    from the kept fp32.onnx and calibration observations: the same bytes and the same returns as the full
    pipeline made, put back into trial.json and the onnx stage in Table 2's order; the model is never loaded
    for training (model.zip is gone from the copy)."""
    import json

    from quarl.requantize import requantize_study

    trial_dir, result = cartpole
    study = tmp_path / "study"
    copy_dir = study / "trials" / CARTPOLE.name
    shutil.copytree(trial_dir, copy_dir)
    (copy_dir / "model.zip").unlink()
    (copy_dir / "int8-w7.onnx").unlink()
    for record in (copy_dir / "trial.json", copy_dir / "stages" / "onnx.json"):
        d = json.loads(record.read_text())
        d["policies"] = [p for p in d["policies"] if p["name"] != "int8-w7"]
        record.write_text(json.dumps(d))
    rows = [{"name": CARTPOLE.name, "status": "done", "spec": CARTPOLE.to_dict()}]
    rows.append(
        {"name": "unfinished_one", "status": "unfinished", "spec": dataclasses.replace(CARTPOLE, seed=9).to_dict()}
    )
    (study / "study.json").write_text(json.dumps({"trials": rows}))

    results = requantize_study(study, ("int8-w7",), workers=1, progress=False)
    assert sorted(r.status for r in results) == ["done", "unfinished"]
    assert _sha(copy_dir / "int8-w7.onnx") == _sha(trial_dir / "int8-w7.onnx")
    again = TrialResult.load(copy_dir / "trial.json")
    assert [p.name for p in again.policies] == ALL_POLICIES
    assert again.policy("int8-w7") == dataclasses.replace(
        result.policy("int8-w7"), seconds=again.policy("int8-w7").seconds
    )
    onnx_stage = json.loads((copy_dir / "stages" / "onnx.json").read_text())
    assert [p["name"] for p in onnx_stage["policies"]] == list(ONNX_NAMES)


def test_requantize_says_what_is_wrong_in_one_line(tmp_path):
    from quarl.errors import QuarlError
    from quarl.requantize import requantize_study

    with pytest.raises(QuarlError, match="no study.json"):
        requantize_study(tmp_path)
    (tmp_path / "study.json").write_text("{}")
    with pytest.raises(QuarlError, match="not a study record"):
        requantize_study(tmp_path)
    with pytest.raises(QuarlError, match="--targets must be among"):
        requantize_study(tmp_path, ("int4",))
