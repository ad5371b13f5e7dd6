"""User errors of the quantize CLI: one line on stderr, exit code 2, never a traceback."""
from __future__ import annotations

import sys
from typing import Callable


class QuantizeError(Exception):
    """Bad input from the user (a file, a size, a bit width): printed as one line, exit code 2."""


def run_cli(main: Callable[[list[str] | None], int], argv: list[str] | None = None) -> int:
    """Call ``main``; a QuantizeError (or the env's / policies' user errors) becomes 'error: ...' + exit 2."""
    from nav_env.config import ConfigError

    user_errors: tuple[type[BaseException], ...] = (QuantizeError, ConfigError)
    try:  # policies is optional at import time: qat/sweep use it, ptq/bench/inspect do not
        from policies.errors import UserError

        user_errors += (UserError,)
    except ImportError:
        pass
    try:
        return main(argv)
    except user_errors as e:
        print(f"error: {str(e).splitlines()[0] if str(e) else type(e).__name__}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
