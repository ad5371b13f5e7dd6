"""The policies CLIs' user errors: airq_cli's (one line, exit 2), under the names this package used."""

from __future__ import annotations

from airq_cli import UserError, run

run_cli = run  # policies.errors.run_cli(main, argv): kept for callers and tests that use the old name

__all__ = ["UserError", "run_cli"]
