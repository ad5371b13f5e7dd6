"""Pi-like resource profiles for a local bridge process (configs/hil/profiles.toml)."""
from __future__ import annotations

import os
import shutil
import tomllib
from dataclasses import dataclass
from pathlib import Path

PROFILES_FILE = Path(os.environ.get("AIRQ_CONFIG_DIR", Path(__file__).resolve().parents[1] / "configs")) / "hil" / "profiles.toml"


class ProfileError(ValueError):
    pass


@dataclass(frozen=True)
class DeviceProfile:
    name: str
    description: str
    cpus: int = 0  # cores the bridge may run on; 0 = all
    threads: int = 1  # onnxruntime intra-op threads
    memory_mb: int = 0  # address-space cap of the bridge process; 0 = none
    memory_bandwidth_gbs: float | None = None
    compute_gflops: float | None = None
    source: str = ""

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


def load_profiles(path: Path = PROFILES_FILE) -> dict[str, DeviceProfile]:
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
        if p.cpus < 0 or p.threads < 1 or p.memory_mb < 0:
            raise ProfileError(f"{path}: profile {name!r}: cpus and memory_mb must be >= 0 and threads >= 1")
        profiles[name] = p
    return profiles


def get_profile(name: str) -> DeviceProfile:
    profiles = load_profiles()
    if name not in profiles:
        raise ProfileError(f"unknown device profile {name!r} (known: {', '.join(profiles)})")
    return profiles[name]
