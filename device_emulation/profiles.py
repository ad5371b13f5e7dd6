"""Pi-like resource profiles for a local bridge process (device_emulation/profiles.toml).

The profiles file is package data (it ships in the wheel); ``AIRQ_CONFIG_DIR=DIR`` reads
``DIR/device_emulation/profiles.toml`` instead.
"""

from __future__ import annotations

import os
import shutil
import tomllib
from dataclasses import dataclass
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path

PROFILES_FILE: Traversable = (
    Path(os.environ["AIRQ_CONFIG_DIR"]) / "device_emulation" / "profiles.toml"
    if os.environ.get("AIRQ_CONFIG_DIR")
    else files("device_emulation") / "profiles.toml"
)


# A board's cited figures and the field holding each one's source (URL + what was measured).
FIGURES = (
    ("memory_bandwidth_gbs", "memory_bandwidth_source"),
    ("compute_gflops", "compute_source"),
    ("int8_gops", "int8_source"),
    ("cache_kb", "cache_source"),
    ("fixed_us", "fixed_source"),
)


class ProfileError(ValueError):
    pass


@dataclass(frozen=True)
class DeviceProfile:
    name: str
    description: str
    cpus: int = 0  # cores the bridge may run on; 0 = all
    threads: int = 1  # onnxruntime intra-op threads
    memory_mb: int = 0  # address-space cap of the bridge process; 0 = none
    # Roofline figures for a real board (device_emulation.roofline, deployment_study.study): one core, each with its source.
    memory_bandwidth_gbs: float | None = None  # DRAM streaming bandwidth
    memory_bandwidth_source: str = ""
    compute_gflops: float | None = None  # fp32 multiply-add throughput (2 ops per multiply-add)
    compute_source: str = ""
    int8_gops: float | None = None  # int8 matrix-product throughput (2 ops per multiply-add)
    int8_source: str = ""
    cache_kb: int = 0  # last-level cache: weights that fit there do not stream from DRAM
    cache_source: str = ""
    fixed_us: float | None = None  # the runtime's fixed cost per inference (None: not known, the prediction omits it)
    fixed_source: str = ""
    source: str = ""  # general notes

    def throughput_gops(self, precision: str) -> float | None:
        """Compute throughput for a weight precision (fp32 / int8); None where no figure is known."""
        return {"fp32": self.compute_gflops, "int8": self.int8_gops}.get(precision)

    def has_roofline(self) -> bool:
        return bool(self.memory_bandwidth_gbs or self.compute_gflops or self.int8_gops)

    def launch_prefix(self) -> list[str]:
        """Command prefix that applies the limits (taskset, prlimit), skipping tools that are absent."""
        prefix: list[str] = []
        if self.cpus and shutil.which("taskset"):
            n = min(self.cpus, os.cpu_count() or 1)
            prefix += ["taskset", "-c", f"0-{n - 1}" if n > 1 else "0"]
        if self.memory_mb and shutil.which("prlimit"):
            prefix += ["prlimit", f"--as={self.memory_mb * 1024 * 1024}", "--"]
        return prefix

    def emulated(self) -> str:
        parts = [f"{self.cpus} core(s)" if self.cpus else "all cores", f"{self.threads} onnxruntime thread(s)"]
        if self.memory_mb:
            parts.append(f"address space <= {self.memory_mb} MB")
        return ", ".join(parts) + "; not emulated: clock speed, caches, memory bandwidth, swap"


def load_profiles(path: Path | Traversable = PROFILES_FILE) -> dict[str, DeviceProfile]:
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ProfileError(f"cannot read device profiles {path}: {e}") from None
    known = set(DeviceProfile.__dataclass_fields__) - {"name"}
    profiles = {}
    for name, values in data.items():
        unknown = set(values) - known
        if unknown:
            raise ProfileError(f"{path}: profile {name!r} has unknown key {sorted(unknown)[0]!r}")
        p = DeviceProfile(name=name, **values)
        if p.cpus < 0 or p.threads < 1 or p.memory_mb < 0 or p.cache_kb < 0:
            raise ProfileError(f"{path}: profile {name!r}: cpus, memory_mb and cache_kb must be >= 0 and threads >= 1")
        for figure, source in FIGURES:
            value = getattr(p, figure)
            if value is not None and not isinstance(value, int | float) or isinstance(value, bool):
                raise ProfileError(f"{path}: profile {name!r}: {figure} must be a number")
            if value and value <= 0:
                raise ProfileError(f"{path}: profile {name!r}: {figure} must be positive")
            if value and not getattr(p, source).strip():
                raise ProfileError(f"{path}: profile {name!r}: {figure} needs its {source} (URL + what was measured)")
        profiles[name] = p
    return profiles


def get_profile(name: str) -> DeviceProfile:
    profiles = load_profiles()
    if name not in profiles:
        raise ProfileError(f"unknown device profile {name!r} (known: {', '.join(profiles)})")
    return profiles[name]
