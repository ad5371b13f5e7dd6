"""The Atari pipeline end to end at toy scale: what a full Atari study (configs/quarl/atari_cluster.toml) runs per
trial, checked on this machine in minutes instead of days.

1. Train the zoo's Atari agent (AtariWrapper, 4-frame stack, Nature CNN) for a few thousand steps.
2. Export its acting network (quarl.export: the flat observation reshaped to 4x84x84 inside the graph).
3. Record real frames: the fp32 policy plays the evaluation env (full games, raw rewards); the first half of
   the frames calibrates static int8, the second half is held out.
4. Static int8 (quarl.export.quantize_files: QLinearConv / QGemm, logits layer in float) and dynamic int8.
5. Check the int8 graph: every Conv and every hidden Gemm quantized, only the logits layer in float.
6. Size, batch-1 latency (quantize.bench, interleaved, one thread: ratios within this run) and the int8
   policy's action agreement with fp32 on the held-out frames.

A toy agent's actions say nothing about Atari scores; the check is that the pipeline, the operators and the
agreement measure work on real frames.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from airq_cli import write_json
from quantize.affine import sqnr_db
from quarl.config import TrialSpec
from quarl.errors import QuarlError
from quarl.machine import machine_record
from quarl.pipeline import CALIBRATION_SEED, onnx_policy
from quarl.tasks import EpisodeEnv, make_train_env, task_family


@dataclass(frozen=True)
class AtariCheck:
    env_id: str
    algo: str
    train_steps: int
    train_s: float
    frames_calibration: int
    frames_heldout: int
    ops: dict[str, dict[str, int]]  # per file: operator counts
    float_convs_left: int  # Conv nodes in float in the static int8 file (0 expected)
    float_gemms_left: int  # Gemm/MatMul nodes in float in the static int8 file (1 expected: the logits layer)
    bytes: dict[str, int]
    latency_p50_us: dict[str, float]
    speedup_vs_fp32: dict[str, float]
    agreement_vs_fp32: dict[str, float]  # share of held-out frames where the file picks fp32's action
    fp32_distinct_actions: int  # how many different actions fp32 picks on those frames (1: agreement says little)
    logits_sqnr_db: dict[str, float]  # fp32 logits against the file's on those frames: 10 log10(|ref|^2 / |ref - q|^2)
    machine: dict


def record_frames(policy, env_id: str, frame_stack: int | None, frames: int, seed: int) -> np.ndarray:
    """Observations the policy meets playing (episodes seeded seed, seed + 1, ... until ``frames``)."""
    env = EpisodeEnv(env_id, frame_stack)
    seen: list[np.ndarray] = []
    episode = 0
    try:
        while len(seen) < frames:
            obs, done = env.reset(seed + episode), False
            while not done and len(seen) < frames:
                seen.append(obs)
                obs, _, done = env.step(int(policy(obs[None])[0]))
            episode += 1
    finally:
        env.close()
    return np.stack(seen).astype(np.float32)


def run_check(env_id: str, algo: str, steps: int, frames: int, out: Path, seed: int = 0) -> AtariCheck:
    if task_family(env_id) != "atari":
        raise QuarlError(f"{env_id} is not an Atari env (<Game>NoFrameskip-v4)")
    if steps < 1 or frames < 20:
        raise QuarlError(f"need --steps >= 1 and --frames >= 20, got {steps} and {frames}")
    # deferred: onnx, onnxruntime, torch, stable_baselines3 (via quantize.bench, quantize.runtime, quarl.actor, quarl.export, quarl.zoo): ~0.2 s to import, paid only where used
    from quantize.bench import bench
    from quantize.runtime import run_logits, session
    from quarl.actor import actor_from_model
    from quarl.export import export_actor, quantize_files
    from quarl.zoo import make_model, zoo_entry

    entry = zoo_entry(env_id, algo)
    out.mkdir(parents=True, exist_ok=True)
    venv = make_train_env(entry, seed)
    model = make_model(entry, venv, seed)
    print(f"training {algo.upper()} on {env_id} for {steps:,} steps (toy scale)", flush=True)
    t0 = time.perf_counter()
    model.learn(steps)
    train_s = time.perf_counter() - t0
    venv.close()
    spec = TrialSpec(env_id, algo, seed, steps=steps)
    fp32 = export_actor(actor_from_model(model), out / "fp32.onnx", spec, entry)
    print(f"recording {frames} real frames with the fp32 policy", flush=True)
    obs = record_frames(onnx_policy(fp32), env_id, entry.frame_stack, frames, CALIBRATION_SEED)
    calib, heldout = obs[: len(obs) // 2], obs[len(obs) // 2 :]
    files = {"fp32": fp32} | {k: p for k, (p, _) in quantize_files(fp32, calib, ("int8", "int8-dynamic"), out).items()}
    ops = {k: dict(Counter(n.op_type for n in _graph(p).node)) for k, p in files.items()}
    static = ops["int8"]
    print("timing batch-1 inference, interleaved", flush=True)
    rows = {r.precision: r for r in bench([str(p) for p in files.values()], calls=200, block=20, warmup=20)}
    reference = onnx_policy(fp32)(heldout)

    def logits(path: Path) -> np.ndarray:
        return run_logits(session(path.read_bytes()), heldout)[1]

    agreement = {k: float(np.mean(onnx_policy(p)(heldout) == reference)) for k, p in files.items() if k != "fp32"}
    check = AtariCheck(
        env_id,
        algo,
        steps,
        round(train_s, 1),
        len(calib),
        len(heldout),
        ops,
        static.get("Conv", 0),
        static.get("Gemm", 0) + static.get("MatMul", 0),
        {k: p.stat().st_size for k, p in files.items()},
        {k: round(rows[k].p50_us, 1) for k in files},
        {k: round(rows["fp32"].p50_us / rows[k].p50_us, 2) for k in files if k != "fp32"},
        agreement,
        int(len(np.unique(reference))),
        {k: round(sqnr_db(logits(files["fp32"]), logits(p)), 1) for k, p in files.items() if k != "fp32"},
        machine_record(),
    )

    write_json(out / "atari_check.json", asdict(check))
    return check


def _graph(path: Path):
    # deferred: onnx: ~0.2 s to import, paid only where used
    import onnx

    return onnx.load(str(path)).graph


def format_check(c: AtariCheck) -> str:
    lines = [
        f"{c.env_id} {c.algo.upper()}: {c.train_steps:,} training steps in {c.train_s:.0f} s (toy scale)",
        f"static int8 ops: {c.ops['int8']}",
        f"float Conv left: {c.float_convs_left}; float Gemm/MatMul left: {c.float_gemms_left} (the logits layer)",
    ]
    for k in ("int8", "int8-dynamic"):
        lines.append(
            f"{k:<13} {c.bytes[k] / c.bytes['fp32']:.2f}x the fp32 size, batch-1 p50 {c.latency_p50_us[k]:.0f} us "
            f"vs fp32 {c.latency_p50_us['fp32']:.0f} us ({c.speedup_vs_fp32[k]:.2f}x), action agreement "
            f"{c.agreement_vs_fp32[k]:.1%} on {c.frames_heldout} held-out frames, logits SQNR {c.logits_sqnr_db[k]:.1f} dB"
        )
    lines.append(
        f"fp32 picks {c.fp32_distinct_actions} different action(s) on the held-out frames"
        + (" (a toy agent: agreement says little)" if c.fp32_distinct_actions == 1 else "")
    )
    lines.append(f"machine: {c.machine.get('cpu')} ({c.machine.get('int8_instructions')})")
    return "\n".join(lines)
