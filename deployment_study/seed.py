"""The seed's numbers, written once: QuaRL's Table 4 (Air Learning Policies I-III on a Raspberry Pi 3b, fp32 vs int8).

Krishnan et al., "QuaRL: Quantization for Fast and Environmentally Sustainable Reinforcement Learning"
(SysML 2020 / TMLR 2022), Table 4: the Raspberry Pi 3b (4x Cortex-A53 @ 1.2 GHz, ~900 MB RAM), inference
time and success rate of each policy at fp32 and int8. study.json carries it as "seed" beside our measurements.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SeedPolicy:
    """One row of the seed's Table 4."""

    name: str  # the seed's name of the policy: I, II, III
    layers: str  # its hidden layers
    fp32_ms: float  # inference time on the Pi 3b
    fp32_success: float  # success rate on Air Learning's arena
    int8_ms: float
    int8_success: float
    speedup: float  # fp32_ms / int8_ms as the seed reports it


@dataclass(frozen=True)
class SeedTable:
    source: str
    table: dict[str, SeedPolicy]  # our policy group (models/GROUP_PRECISION.onnx) -> the seed's row


SOURCE = "QuaRL (Krishnan et al., SysML 2020 / TMLR 2022), Table 4: Raspberry Pi 3b, fp32 vs int8"
TABLE4 = SeedTable(
    source=SOURCE,
    table={
        "policy1": SeedPolicy(
            "I", "3 x 64", fp32_ms=0.147, fp32_success=0.60, int8_ms=0.124, int8_success=0.45, speedup=1.18
        ),
        "policy2": SeedPolicy(
            "II", "3 x 256", fp32_ms=133.49, fp32_success=0.74, int8_ms=9.53, int8_success=0.60, speedup=14.0
        ),
        "policy3": SeedPolicy(
            "III",
            "4096, 512, 1024",
            fp32_ms=208.115,
            fp32_success=0.86,
            int8_ms=11.036,
            int8_success=0.75,
            speedup=18.85,
        ),
    },
)


# a group of another vehicle's models of the same preset (models/policy1_quadrotor_*.onnx) stands beside the seed's
# row of that preset: the seed's Air Learning policies flew a quadrotor too
VEHICLE_SUFFIXES = ("_quadrotor",)


def seed_group(group: str) -> str | None:
    """The seed's row a policy group stands beside (its key in :data:`TABLE4`), or None."""
    for suffix in ("", *VEHICLE_SUFFIXES):
        if group.endswith(suffix) and group.removesuffix(suffix) in TABLE4.table:
            return group.removesuffix(suffix) if suffix else group
    return None


def label(group: str) -> str:
    """How tables name a policy group: the seed's name where it has one ("Policy III"; "Policy III, quadrotor" for
    the quadrotor-trained group), else the group."""
    key = seed_group(group)
    if key is None:
        return group
    vehicle = group.removeprefix(key).removeprefix("_")
    return f"Policy {TABLE4.table[key].name}" + (f", {vehicle}" if vehicle else "")
