"""Why the int8 files keep their logits layer fp32: how often a quantized logits layer ties the top two actions.

Run from the repo root (no root needed; about a minute on 2 cores for the five shipped policies):

    .venv/bin/python scripts/logit_ties.py [POLICY ...]     # default: policy1 policy1_hard policy2 policy2_hard policy3

For each policy it re-quantizes models/POLICY_fp32.onnx with the recipe of the shipped models/POLICY_int8.onnx
(scheme, per-channel, float split sum, read from its metadata; the same 100 calibration episodes) plus
``--quantize-logits``, then flies the fp32 policy for the held-out episodes ``quantize ptq`` measures agreement
on (50 per level, seeds 3,000,000+, the model's level) and runs the three files on those observations. A tie is
an observation whose two largest logits are exactly equal: with an int8 logits layer the outputs sit on the
output scale's grid, so two actions can get the same code and the argmax is decided by index order, not by
the network. Prints the machine (CPU model, its int8 instructions) and package versions first, then per
policy the share of tied observations, the action agreement with fp32 and the batch-1 p50 latency (as
``quantize bench``: interleaved, one thread) of each file.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from firmware_bridge.device import cpu_model, format_versions, package_versions  # noqa: E402
from firmware_bridge.int8_kernels import int8_kernels  # noqa: E402

POLICIES = ("policy1", "policy1_hard", "policy2", "policy2_hard", "policy3")
HELDOUT_EPISODES = 50  # as the shipped files' ptq (scripts/int8_schemes.sh)
CALIBRATION_EPISODES = 100
BENCH_CALLS = 2000  # per file, as `quantize bench` (interleaved blocks)


def top2_tied(logits: np.ndarray) -> np.ndarray:
    """Per row: the two largest logits are exactly equal."""
    top = np.sort(logits, axis=1)[:, -2:]
    return top[:, 0] == top[:, 1]


def measure(policy: str, tmp: Path) -> str:
    from nav_env.config import load_level, observation_overrides_from_metadata
    from quantize.bench import bench
    from quantize.calibration import HELDOUT_SEED
    from quantize.model_io import load_policy
    from quantize.options import StaticInt8Options
    from quantize.ptq import collect_levels, quantize_file, resolve_levels
    from quantize.runtime import policy_fn, run_logits, session

    fp32_path, shipped_path = ROOT / "models" / f"{policy}_fp32.onnx", ROOT / "models" / f"{policy}_int8.onnx"
    shipped = load_policy(shipped_path).metadata
    recipe = StaticInt8Options(
        per_channel=shipped["airq.quant.per_channel"] == "true",
        float_split_sum=shipped.get("airq.quant.float_split_sum") == "true",
        scheme=shipped["airq.quant.scheme"],
        keep_last_layer_fp32=False,
    )
    quantized_logits = tmp / f"{policy}_int8_logits.onnx"
    quantize_file(
        fp32_path,
        "int8",
        quantized_logits,
        calibration_episodes=CALIBRATION_EPISODES,
        heldout_episodes=0,
        options=recipe,
    )
    src = load_policy(fp32_path)
    fp32_session = session(src.data)
    cfgs = [
        load_level(name, observation_overrides_from_metadata(src.metadata) or None)
        for name in resolve_levels(None, src.metadata)
    ]
    held = collect_levels(policy_fn(fp32_session), cfgs, HELDOUT_EPISODES, HELDOUT_SEED, 20_000)
    ref_actions, ref_logits = run_logits(fp32_session, held)
    parts = [
        f"{policy} ({len(held)} held-out obs, scheme {recipe.scheme}):",
        f"fp32 ties {top2_tied(ref_logits).mean():.2%}",
    ]
    files = (("int8 shipped (logits fp32)", shipped_path), ("int8 + quantized logits", quantized_logits))
    timing = bench([str(path) for _, path in files], calls=BENCH_CALLS)  # interleaved, batch 1, one thread
    for (name, path), row in zip(files, timing):
        actions, logits = run_logits(session(str(path)), held)
        parts.append(
            f"{name}: ties {top2_tied(logits).mean():.2%}, agreement {np.mean(actions == ref_actions):.2%}, "
            f"batch-1 p50 {row.p50_us:.1f} us"
        )
    return " ".join(parts[:1]) + " " + "; ".join(parts[1:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("policies", nargs="*", default=list(POLICIES), metavar="POLICY")
    args = parser.parse_args()
    kernels = int8_kernels()
    print(
        f"machine: {cpu_model()}, {len(os.sched_getaffinity(0))} usable cores, int8 instructions: "
        f"{kernels.cpu_features}; {kernels.describe()}; kernel {platform.release()}\n"
        f"versions: {format_versions(package_versions())}\n"
        f"date: {datetime.datetime.now(datetime.UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="airq-ties-") as tmp:
        for policy in args.policies:
            print(measure(policy, Path(tmp)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
