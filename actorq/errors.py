"""One error type for actorq's checks: a user error (one ``error: ...`` line from a command)."""

from __future__ import annotations

from airq_cli import UserError


class ActorQError(UserError):
    """A network, template, weight version or model actorq cannot use; the message says which and why."""
