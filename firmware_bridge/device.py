"""What the device is and how much it is using: fields for the hello and status replies.

Linux /proc is the source of truth (the target is Raspberry Pi OS); every reader
degrades to None elsewhere instead of failing.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import resource
import socket
from typing import Any

from firmware_bridge.procfs import read_text


def cpu_model() -> str:
    """'Cortex-A76'-ish on a Pi (whose /proc/cpuinfo has no 'model name'), the brand string on x86."""
    cpuinfo = read_text("/proc/cpuinfo") or ""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() not in fields:
            fields[key.strip()] = value.strip()
    for key in ("model name", "Model", "Hardware", "cpu model", "Processor"):
        if fields.get(key):
            return fields[key]
    return platform.processor() or "unknown"


def board_model() -> str | None:
    """'Raspberry Pi 5 Model B Rev 1.0' on a Pi; None on boards without a device tree."""
    text = read_text("/proc/device-tree/model")
    return text.rstrip("\x00\n") if text else None


def total_ram_bytes() -> int | None:
    for line in (read_text("/proc/meminfo") or "").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return None


# The packages whose versions a result depends on (distribution names), in report order after airq and python.
KEY_PACKAGES = (
    "numpy",
    "onnxruntime",
    "onnx",
    "torch",
    "stable-baselines3",
    "gymnasium",
    "pyzmq",
    "msgpack",
    "mujoco",
    "numba",
)


def package_versions() -> dict[str, str]:
    """Installed versions of the project's key packages: airq itself, python, then KEY_PACKAGES.

    Read from the installed distributions' metadata (importlib.metadata), so nothing heavy is
    imported; packages that are not installed (torch on a Pi, airq where only the bridge was
    copied) are omitted.
    """
    out: dict[str, str] = {}
    for name in ("airq", "python", *KEY_PACKAGES):
        if name == "python":
            out[name] = platform.python_version()
            continue
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


def format_versions(versions: dict[str, str]) -> str:
    """'airq 0.1.0, python 3.11.7, numpy 2.4.6, ...': one line for reports and cards."""
    return ", ".join(f"{name} {v}" for name, v in versions.items())


def device_info(bridge_version: str) -> dict[str, Any]:
    # deferred: this module imports only the standard library (nav_env and policies import it; tests/test_lock.py)
    import msgpack
    import numpy
    import onnxruntime
    import zmq

    # deferred: numpy (via firmware_bridge.int8_kernels): as above
    from firmware_bridge.int8_kernels import int8_kernels

    usable_cores: int | None
    try:
        usable_cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        usable_cores = os.cpu_count()
    return {
        "hostname": socket.gethostname(),
        "board": board_model(),
        "cpu_model": cpu_model(),
        "machine": platform.machine(),
        "cores": os.cpu_count(),
        "usable_cores": usable_cores,
        "ram_bytes": total_ram_bytes(),
        "os": platform.platform(),
        "python_version": platform.python_version(),
        "onnxruntime_version": onnxruntime.__version__,
        "numpy_version": numpy.__version__,
        "pyzmq_version": zmq.__version__,
        "libzmq_version": zmq.zmq_version(),
        "msgpack_version": ".".join(map(str, msgpack.version)),
        "bridge_version": bridge_version,
        "int8_kernels": int8_kernels().as_dict(),  # whether this device's onnxruntime computes int8 exactly
    }


def process_memory_bytes() -> tuple[int | None, int | None]:
    """(RSS, peak RSS) of this process in bytes, from /proc/self/status VmRSS / VmHWM."""
    rss = peak = None
    for line in (read_text("/proc/self/status") or "").splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) * 1024
        elif line.startswith("VmHWM:"):
            peak = int(line.split()[1]) * 1024
    if peak is None:
        # ru_maxrss is KiB on Linux (bytes on macOS, but the bridge targets Linux).
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return rss, peak


def cpu_times_s() -> tuple[float, float]:
    """(user, system) CPU seconds consumed by this process."""
    times = os.times()
    return times.user, times.system
