"""User errors: reported as one line on stderr with exit code 2, never a traceback."""
from __future__ import annotations

import sys
from typing import Callable


class UserError(Exception):
    """Bad input from the user (a path, a name, a mismatch): printed as one line, exit code 2."""


def run_cli(main: Callable[[list[str] | None], int], argv: list[str] | None = None) -> int:
    """Call ``main`` and turn a UserError (or the env's ConfigError) into 'error: ...' and exit code 2."""
    from nav_env.config import ConfigError

    try:
        return main(argv)
    except (UserError, ConfigError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
