"""Small real inputs for quarl.report's tests: TrialResult JSON files with chosen returns and fp32.onnx files
exported from tiny torch models (an MLP; a Conv + Gemm net for the MinAtar-like cells)."""

from __future__ import annotations

import json
import warnings
from dataclasses import asdict
from pathlib import Path

from quarl.config import env_slug
from quarl.published import baseline_gate
from quarl.results import ONNX, PTQ, QAT, Baseline, EvalProtocol, PolicyEval, TrainInfo, TrialResult

EPISODES = 4


def returns_with_mean(mean: float, spread: float = 2.0) -> list[float]:
    """EPISODES returns whose mean is exactly ``mean`` (pairs mean - spread, mean + spread)."""
    return [mean - spread, mean + spread] * (EPISODES // 2)


def make_trial(
    env_id: str,
    algo: str,
    seed: int,
    fp32: float,
    onnx: dict[str, float],
    ptq: dict[int, float] | None = None,
    qat: dict[int, float] | None = None,
    passed: bool | None = None,
    threshold: float | None = None,
    episode_returns: dict[str, list[float]] | None = None,
) -> TrialResult:
    """A TrialResult: fp32 and ``onnx`` (fp16/int8/int8-dynamic) mean returns, PTQ/QAT means per bit width.
    The gate is quarl.published's unless ``threshold`` is given; ``passed`` defaults to fp32 >= threshold."""
    if threshold is None:
        published, source, threshold = baseline_gate(env_id, algo)
    else:
        published, source = float("nan"), "test threshold"
    passed = fp32 >= threshold if passed is None else passed
    episode_returns = episode_returns or {}

    def pe(name: str, method: str, precision: str, bits: int, mean: float) -> PolicyEval:
        returns = episode_returns.get(name, returns_with_mean(mean))
        return PolicyEval(name, method, precision, bits, returns, rounding="nearest" if method != ONNX else "")

    policies = [pe("fp32", ONNX, "fp32", 32, fp32)]
    policies += [pe(name, ONNX, name, 16 if name == "fp16" else 8, m) for name, m in onnx.items()]
    policies += [pe(f"ptq-{b}bit", PTQ, f"{b}bit", b, m) for b, m in (ptq or {}).items()]
    policies += [pe(f"qat-{b}bit", QAT, f"{b}bit", b, m) for b, m in (qat or {}).items()]
    return TrialResult(
        env_id=env_id,
        algo=algo,
        seed=seed,
        train=TrainInfo(steps=1000, wall_s=1.0, hyperparams={}, hyperparams_source="test"),
        protocol=EvalProtocol(episodes=EPISODES, seed=1_000_000, max_steps=None),
        baseline=Baseline(published, source, threshold, passed),
        policies=policies,
        machine={},
    )


def trial_dir(study: Path, trial: TrialResult) -> Path:
    return study / "trials" / f"{env_slug(trial.env_id)}_{trial.algo}_s{trial.seed}"


def write_trial(study: Path, trial: TrialResult, model: Path | None = None) -> Path:
    d = trial_dir(study, trial)
    d.mkdir(parents=True, exist_ok=True)
    (d / "trial.json").write_text(json.dumps(asdict(trial), indent=1))
    if model is not None:
        (d / "fp32.onnx").write_bytes(model.read_bytes())
    return d


def export_mlp(path: Path, obs_dim: int = 4, n_out: int = 2, scale: float = 1.0, seed: int = 0) -> Path:
    """A tiny MLP (Gemm layers) as fp32 ONNX; ``scale`` widens its weights."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(obs_dim, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, n_out))
    with torch.no_grad():
        for p in net.parameters():
            p.mul_(scale)
    with warnings.catch_warnings():  # the TorchScript exporter's deprecation notices
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(net, (torch.zeros(1, obs_dim),), str(path), input_names=["obs"], dynamo=False)
    return path


def export_cnn(path: Path, channels: int = 4, n_out: int = 3, seed: int = 0) -> Path:
    """A tiny Conv + Gemm net on a 10x10 MinAtar-like image as fp32 ONNX."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    net = nn.Sequential(nn.Conv2d(channels, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 8 * 8, 32), nn.ReLU())
    net.append(nn.Linear(32, n_out))
    with warnings.catch_warnings():  # the TorchScript exporter's deprecation notices
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(net, (torch.zeros(1, channels, 10, 10),), str(path), input_names=["obs"], dynamo=False)
    return path
