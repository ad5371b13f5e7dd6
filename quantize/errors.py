"""The quantize CLI's user errors: airq_cli's contract (one line, exit 2)."""

from __future__ import annotations

from airq_cli import UserError, run


class QuantizeError(UserError):
    """Bad input from the user (a file, a size, a bit width): printed as one line, exit code 2."""


run_cli = run  # quantize.errors.run_cli(main, argv): kept for callers and tests that use the old name

__all__ = ["QuantizeError", "run_cli"]
