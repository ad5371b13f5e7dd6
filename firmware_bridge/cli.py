"""Command-line plumbing of the device-side tools (serve, keys, bench, systemd).

The same contract as the host tools' airq_cli, copied because the Pi install is firmware_bridge
alone (it imports nothing else of the repo); tests/test_cli_contract.py checks the two agree:
exit 0 done, 1 the work failed, 2 the user's mistake, 130 interrupted; a user error is exactly one
stderr line ``error: <message>``; usage lines say ``python -m ...``; --help shows every default;
output paths are checked before any work.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, NoReturn

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
USAGE_ERROR_EXIT = EXIT_USAGE  # the name the bridge's tools and the systemd unit (RestartPreventExitStatus) use
MODULE_PREFIX = "python -m "


class UsageError(Exception):
    """A mistake the user can fix (bad flag value, missing file): reported as one line, exit 2."""


def error_line(error: BaseException | str) -> str:
    text = str(error).strip()
    first = text.splitlines()[0] if text else type(error).__name__
    return f"error: {first}"


def default_note(action: argparse.Action) -> str:
    default = action.default
    if default is None or default is argparse.SUPPRESS or action.help == argparse.SUPPRESS or action.required:
        return ""
    if not action.option_strings and action.nargs not in ("?", "*"):
        return ""
    if action.nargs == 0 and not isinstance(action, argparse.BooleanOptionalAction):
        return ""
    if isinstance(default, (list, tuple)):
        shown = " ".join(map(str, default)) or "none"
    elif default == "":
        shown = '""'
    else:
        shown = str(default)
    return f" (default: {shown.replace('%', '%%')})"


class HelpFormatter(argparse.HelpFormatter):
    """Every option with a default says it, unless its help already talks about its default."""

    def _format_action(self, action: argparse.Action) -> str:
        if not action.help and default_note(action):
            action = copy.copy(action)
            action.help = default_note(action).strip()
        return super()._format_action(action)

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        return text if "default" in text.lower() else text + default_note(action)


class OneLineArgumentParser(argparse.ArgumentParser):
    """argparse prints the whole usage block on error; on a Pi's journal one line reads better."""

    def __init__(self, *, prog: str, **kwargs: Any) -> None:
        if not prog.startswith(MODULE_PREFIX):
            prog = MODULE_PREFIX + prog
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(prog=prog, **kwargs)

    def error(self, message: str) -> NoReturn:
        print(error_line(f"{message} (see {self.prog} --help)"), file=sys.stderr)
        sys.exit(EXIT_USAGE)


def fail(message: str, *, prog: str | None = None) -> NoReturn:
    """Report a user error and exit 2. ``prog`` is accepted for existing callers; the contract's
    line is ``error: <message>`` alone (journald already names the unit)."""
    print(error_line(message), file=sys.stderr)
    sys.exit(EXIT_USAGE)


def _check_writable_in(folder: Path, shown: str) -> None:
    anchor = folder
    while not anchor.exists() and anchor != anchor.parent:
        anchor = anchor.parent
    if not anchor.is_dir():
        raise UsageError(f"{shown}: {anchor} is a file, not a directory")
    try:  # tried for real: os.access says yes to root even for /proc
        fd, probe = tempfile.mkstemp(dir=anchor, prefix=".airq-write-check-")
    except OSError as e:
        raise UsageError(f"{shown}: cannot write in {anchor} ({e.strerror or e})") from None
    os.close(fd)
    os.unlink(probe)


def check_output_file(path: str | os.PathLike[str], flag: str = "") -> Path:
    p = Path(path)
    shown = f"{flag} {p}" if flag else str(p)
    if p.is_dir():
        raise UsageError(f"{shown}: is a directory, expected a file name")
    _check_writable_in(p.parent, shown)
    return p


def check_output_dir(path: str | os.PathLike[str], flag: str = "") -> Path:
    p = Path(path)
    shown = f"{flag} {p}" if flag else str(p)
    if p.exists() and not p.is_dir():
        raise UsageError(f"{shown}: is a file, expected a directory")
    _check_writable_in(p, shown)
    return p


def write_atomic(path: Path, data: bytes) -> None:
    """airq_cli.files.write_atomic's copy for the device install: a result file via a temporary file in its
    folder (made if missing) and a rename, with the mode open() would give (0666 minus the umask); a path that
    cannot be written is a UsageError (one line, exit 2)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from exc
    try:
        with os.fdopen(fd, "wb") as handle:
            umask = os.umask(0)
            os.umask(umask)
            os.fchmod(handle.fileno(), 0o666 & ~umask)
            handle.write(data)
        os.replace(temporary, path)
    except BaseException as exc:
        Path(temporary).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from exc
        raise


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{value} must be positive")
    return value


# First line the bridge prints on stdout once its socket is bound; launchers wait for it.
READY_PREFIX = "airq-bridge listening on "
