"""policies: train the QuaRL / Air Learning MLP navigation policies with Stable-Baselines3, export
the actor to ONNX, and evaluate any policy (run directory or ONNX file) on seeded episodes.

    python -m policies.train --policy policy1 --algo ppo --level default --out runs/p1
    python -m policies.export runs/p1 -o models/policy1_fp32.onnx
    python -m policies.evaluate models/policy1_fp32.onnx runs/p1 --episodes 1000 --seed 0
    python -m policies.bench
"""

from policies.presets import ALGORITHMS, PRESETS, Preset, get_preset

__all__ = ["ALGORITHMS", "PRESETS", "Preset", "get_preset"]
