"""Output paths checked while the arguments are parsed, before any long work: a file where a folder
is needed, a folder where a file is, a place nobody can write. Also the mode results are written with."""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from airq_cli.contract import OutputError


def _nearest_existing(path: Path) -> Path:
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return probe


def _check_writable_in(folder: Path, shown: str) -> None:
    """``folder``, or its nearest existing ancestor (the folders are made later), must be a directory
    this process can create files in. Tried for real: os.access says yes to root even for /proc."""
    anchor = _nearest_existing(folder)
    if not anchor.is_dir():
        raise OutputError(f"{shown}: {anchor} is a file, not a directory")
    try:
        fd, probe = tempfile.mkstemp(dir=anchor, prefix=".airq-write-check-")
    except OSError as e:
        raise OutputError(f"{shown}: cannot write in {anchor} ({e.strerror or e})") from None
    os.close(fd)
    os.unlink(probe)


def check_output_file(path: str | os.PathLike[str], flag: str = "") -> Path:
    """A file we will (re)write: not a directory, under a writable folder (made if missing)."""
    p = Path(path)
    shown = f"{flag} {p}" if flag else str(p)
    if p.is_dir():
        raise OutputError(f"{shown}: is a directory, expected a file name")
    _check_writable_in(p.parent, shown)
    return p


def check_output_dir(path: str | os.PathLike[str], flag: str = "") -> Path:
    """A folder we will write into (made if missing): not an existing file, and writable."""
    p = Path(path)
    shown = f"{flag} {p}" if flag else str(p)
    if p.exists() and not p.is_dir():
        raise OutputError(f"{shown}: is a file, expected a directory")
    _check_writable_in(p, shown)
    return p


def _as_type(check):
    def convert(text: str) -> str:
        try:
            check(text)
        except OutputError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        return text

    convert.__name__ = check.__name__.removeprefix("check_")  # argparse names the type in some messages
    return convert


# argparse ``type=`` converters: the value stays a str (callers build Paths as before).
output_file = _as_type(check_output_file)
output_dir = _as_type(check_output_dir)


def current_umask() -> int:
    """The process umask without changing it (Linux: /proc/self/status), else set-and-restore."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def file_mode() -> int:
    """The mode open() would give a new file: 0666 minus the umask (mkstemp's 0600 hides results)."""
    return 0o666 & ~current_umask()
