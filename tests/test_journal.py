"""airq_cli.journal: the append-only JSON Lines file of hil.run's run log and actorq's metrics, killed at any
instant."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from airq_cli.journal import Journal, read_journal, repair_journal


def test_nothing_is_created_before_the_first_durable_record(tmp_path):
    created = []
    journal = Journal(tmp_path / "sub" / "log.jsonl", on_create=lambda: created.append(True))
    journal.append({"kind": "run"}, durable=False)
    assert not journal.path.exists() and not created
    journal.append({"kind": "episode", "n": 1})
    journal.append({"kind": "event"}, durable=False)
    journal.close()
    assert created == [True]
    assert read_journal(journal.path)[0] == [{"kind": "run"}, {"kind": "episode", "n": 1}, {"kind": "event"}]


def test_a_torn_last_line_is_ignored_then_cut_before_appending(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_bytes(b'{"a": 1}\n{"b": 2}\n{"c": 3, "d"')
    records, good = read_journal(path)
    assert records == [{"a": 1}, {"b": 2}] and good == len(b'{"a": 1}\n{"b": 2}\n')
    assert repair_journal(path) == records and path.stat().st_size == good
    journal = Journal(path)
    journal.append({"e": 4})
    journal.close()
    assert read_journal(path)[0] == [{"a": 1}, {"b": 2}, {"e": 4}]
    assert repair_journal(tmp_path / "none.jsonl") == []


def test_a_line_that_is_not_an_object_ends_the_readable_part(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_bytes(b'{"a": 1}\n[1, 2]\n{"b": 2}\n')
    assert read_journal(path)[0] == [{"a": 1}]


def test_every_durable_line_survives_a_kill(tmp_path):
    """A writer killed with SIGKILL mid-stream: every line it had appended is whole; at most the last is torn."""
    path = tmp_path / "log.jsonl"
    writer = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path; from airq_cli.journal import Journal\n"
            "j = Journal(Path(sys.argv[1]))\n"
            "for n in range(10**9):\n"
            "    j.append({'n': n, 'pad': 'x' * 500})\n"
            "    if n == 50: print('ok', flush=True)\n",
            str(path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert writer.stdout is not None and writer.stdout.readline() == "ok\n"
    os.kill(writer.pid, signal.SIGKILL)
    writer.wait()
    records = repair_journal(path)
    assert len(records) > 50 and [r["n"] for r in records] == list(range(len(records)))
    assert path.read_bytes().endswith(b"\n") and json.loads(path.read_bytes().splitlines()[-1])["n"] == len(records) - 1
