"""Append-only JSON Lines files that survive a kill at any instant: one JSON object per line, each line one write()
(O_APPEND: it lands whole at the end, never interleaved) and fsync'd when it must last. A line torn by a kill is the
last one: :func:`read_journal` ignores it and :func:`repair_journal` cuts it off before a resumed run appends."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from airq_cli.files import json_text


class Journal:
    """Append-only JSON Lines; every line is on disk (fsync) before :meth:`append` returns, if durable.

    The file is created only by the first durable record; lines before it are held in memory and written with it.
    A run that fails or is killed before recording anything durable leaves no file, and ``on_create`` (e.g. keep
    an earlier file aside) runs only then, so such a run does not displace what was there either."""

    def __init__(self, path: Path, on_create: Callable[[], None] | None = None) -> None:
        self.path = path
        self._fd = -1
        self._pending: list[bytes] | None = []
        self._on_create = on_create

    def _open(self) -> None:
        if self._on_create is not None:
            self._on_create()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def append(self, record: dict[str, Any], durable: bool = True) -> None:
        line = (json_text(record, indent=None) + "\n").encode()
        if self._pending is not None:
            self._pending.append(line)
            if not durable:
                return
            self._open()
            line, self._pending = b"".join(self._pending), None
        os.write(self._fd, line)
        if durable:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = -1


def read_journal(path: Path) -> tuple[list[dict[str, Any]], int]:
    """(records, bytes of whole valid lines). Stops at the first torn or unreadable line."""
    records, good = [], 0
    for line in path.read_bytes().splitlines(keepends=True):
        if not line.endswith(b"\n"):
            break  # torn by a kill mid-write
        try:
            record = json.loads(line)
        except ValueError:
            break
        if not isinstance(record, dict):
            break
        records.append(record)
        good += len(line)
    return records, good


def repair_journal(path: Path) -> list[dict[str, Any]]:
    """Drop a torn last line (if any) so appends start on a clean line; return the records (none: no file)."""
    if not path.exists():
        return []
    records, good = read_journal(path)
    if good != path.stat().st_size:
        with open(path, "r+b") as f:
            f.truncate(good)
            os.fsync(f.fileno())
    return records
