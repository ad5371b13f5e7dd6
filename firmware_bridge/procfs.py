"""Reading the kernel's /proc files: the one reader the device's descriptions share (device.py, int8_kernels.py).

Standard library only, and it imports nothing of the bridge, so every module that describes the machine can
sit on it.
"""

from __future__ import annotations

from pathlib import Path


def read_text(path: str) -> str | None:
    """The file's text, or None where it does not exist or cannot be read (a kernel without it, not Linux)."""
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return None
