"""Exit codes, the user-error type and the one wrapper every ``__main__`` goes through."""

from __future__ import annotations

import sys
from collections.abc import Callable

EXIT_OK = 0
EXIT_FAILURE = 1  # the work itself failed (a bridge died, the network went away)
EXIT_USAGE = 2  # the user's mistake: a flag, a path, a file; argparse uses 2 as well
EXIT_INTERRUPTED = 130  # Ctrl-C / SIGTERM, as a shell reports it


class UserError(Exception):
    """A mistake the user can fix (a flag, a path, a file): one line on stderr, exit 2."""


class OutputError(UserError, OSError):
    """An output path cannot be written. Also an OSError, so callers that handle OSError still do."""


def error_line(error: BaseException | str) -> str:
    """``error: <first line of the message>``: one line whatever the exception carries."""
    text = str(error).strip()
    first = text.splitlines()[0] if text else type(error).__name__
    return f"error: {first}"


def run(
    main: Callable[[list[str] | None], int],
    argv: list[str] | None = None,
    failures: tuple[type[BaseException], ...] = (),
) -> int:
    """Call ``main(argv)`` and return its exit code: a UserError becomes one line and exit 2, one of
    ``failures`` one line and exit 1, Ctrl-C exit 130, argparse's exit (--help, a bad flag) its code,
    so in-process callers always get an int. Anything else is a bug and keeps its traceback."""
    try:
        return main(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else EXIT_OK if e.code is None else EXIT_FAILURE
    except UserError as e:
        print(error_line(e), file=sys.stderr)
        return EXIT_USAGE
    except failures as e:
        print(error_line(e), file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
