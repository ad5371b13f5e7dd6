"""The machine a study ran on, for every trial's record: CPU, its int8 instructions, package versions."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

from firmware_bridge.int8_kernels import cpu_int8_features
from policies.machine import machine_info


def machine_record() -> dict[str, Any]:
    record = machine_info() | {"int8_instructions": cpu_int8_features()}
    for name in ("onnxruntime", "stable_baselines3", "gymnasium", "ray", "minatar", "ale-py"):
        try:
            record[name] = version(name)
        except PackageNotFoundError:
            pass
    return record
