"""The quarl CLI's user errors: airq_cli's contract (one line, exit 2)."""

from __future__ import annotations

from airq_cli import UserError


class QuarlError(UserError):
    """A bad config value, an unknown task or algorithm, an unusable output path: one line, exit 2."""
