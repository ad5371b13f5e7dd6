"""Command-line plumbing shared by serve/systemd/bench: user errors are one line and exit 2."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

USAGE_ERROR_EXIT = 2


class UsageError(Exception):
    """A mistake the user can fix (bad flag value, missing file): reported as one line, exit 2."""


class OneLineArgumentParser(argparse.ArgumentParser):
    """argparse prints the whole usage block on error; on a Pi's journal one line reads better."""

    def error(self, message: str) -> NoReturn:
        fail(f"{message} (see --help)", prog=self.prog)


def fail(message: str, *, prog: str) -> NoReturn:
    print(f"{prog}: error: {message}", file=sys.stderr)
    sys.exit(USAGE_ERROR_EXIT)


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
