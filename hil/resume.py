"""The run log, and continuing a run from it.

The run log (``run.jsonl`` in the output directory) is what makes results survive anything: one JSON object per
line - a ``run`` header (the arguments and each policy's sha256, or a ``resume`` record for a later session), every
``episode`` as soon as it ends, and ``event``s (fail-safes, outages, bridge restarts) - appended with write() +
fsync() (:class:`airq_cli.journal.Journal`), so a run killed at any instant leaves every finished episode on disk; a
line torn by the kill is ignored and ``--resume`` cuts it off before appending. ``--resume DIR`` reads the arguments back
from the header and what earlier sessions flew and summarized from the rest; a new run keeps an earlier run's log
beside rather than overwriting it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from airq_cli import ArgumentParser, UserError, output_dir
from airq_cli.journal import Journal, read_journal, repair_journal
from firmware_bridge.client import PolicyInfo, ReplyFieldError
from firmware_bridge.protocol import sha256_hex
from hil.args import RunArgs
from hil.loop import LoopRecord
from hil.report import PolicySummary, report_row, summarize_run
from hil.setup import RunSetup

RUN_LOG = "run.jsonl"
RUN_LOG_VERSION = 1


def parse_resume_args(argv: list[str]) -> RunArgs:
    """``--resume DIR [--quiet]``: everything else comes from DIR/run.jsonl's header."""
    p = ArgumentParser(prog="python -m hil.run --resume", description="Continue an interrupted run.")
    p.add_argument(
        "--resume", required=True, type=output_dir, metavar="DIR", help="output directory of the interrupted run"
    )
    p.add_argument("--quiet", action="store_true")
    ns = p.parse_args(argv)
    log_path = Path(ns.resume) / RUN_LOG
    if not log_path.is_file():
        raise UserError(f"nothing to resume: {log_path} does not exist")
    records, _ = read_journal(log_path)
    header = next((r for r in records if r.get("kind") == "run"), None)
    if header is None or header.get("log_version") != RUN_LOG_VERSION:
        raise UserError(f"{log_path} has no run header this version understands")
    known = {f.name for f in fields(RunArgs)}
    values = {k: v for k, v in header["args"].items() if k in known}
    args = RunArgs(**values | {"out": ns.resume, "quiet": ns.quiet, "resume": True})
    for entry in header["policies"]:
        path = Path(entry["path"])
        if not path.is_file():
            raise UserError(f"cannot resume: policy file {path} is gone")
        if sha256_hex(path.read_bytes()) != entry["sha256"]:
            raise UserError(f"cannot resume: policy file {path} changed since the run started (sha256 differs)")
    return args


@dataclass
class EarlierSessions:
    """What the sessions before a --resume left in the log, by policy index (nothing for a new run)."""

    rows: dict[int, list[dict[str, Any]]]  # episode rows
    ends: dict[int, dict[str, Any]] = field(default_factory=dict)  # policy_end records (summary as measured)
    loads: dict[int, dict[str, Any]] = field(default_factory=dict)  # the bridge's load_policy replies
    device: dict[int, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, args: RunArgs) -> EarlierSessions:
        earlier = cls({i: [] for i in range(len(args.policy))})
        for r in repair_journal(Path(args.out) / RUN_LOG) if args.resume else []:
            index = int(r.get("policy_index") or 0)  # every record with one of these kinds names its policy
            if r.get("kind") == "episode":
                earlier.rows[index].append({k: v for k, v in r.items() if k not in ("kind", "policy", "policy_index")})
            elif r.get("kind") == "policy_end":
                earlier.ends[index] = r
                earlier.device[index] = r.get("device")
            elif r.get("kind") == "event" and r.get("event") == "policy_loaded":
                earlier.loads[index] = r.get("load") or {}
        return earlier

    def finished_report(self, out_dir: Path, policy_bytes: list[bytes], episodes: int) -> dict[str, Any] | None:
        """report.json's document if every episode was flown and the report holds every policy with every episode
        in the log (a finished run resumed); else None."""
        if not all(len({r["episode"] for r in rows}) >= episodes for rows in self.rows.values()):
            return None
        try:
            report = json.loads((out_dir / "report.json").read_text())
            runs = report.get("runs") or []
            matches = len(runs) == len(policy_bytes) and all(
                run.get("sha256") == sha256_hex(onnx)
                and [e.get("episode") for e in run.get("episodes") or []] == sorted(r["episode"] for r in self.rows[i])
                for i, (run, onnx) in enumerate(zip(runs, policy_bytes))
            )
        except (OSError, ValueError, AttributeError, TypeError):  # no report, or not one this version wrote
            return None
        return report if matches else None

    def summary(self, index: int, path: str, onnx: bytes, deadline_s: float) -> PolicySummary:
        """A finished policy's summary: the one its session wrote to the log, with the episode rows;
        if that session was killed before writing it, rebuilt from the rows (latency from their samples)."""
        rows = sorted(self.rows[index], key=lambda r: r["episode"])
        end = self.ends.get(index)
        if end is not None and end.get("episodes") == [r["episode"] for r in rows]:
            return PolicySummary.from_json(end["summary"] | {"episodes": [report_row(r) for r in rows]})
        try:
            load = PolicyInfo.from_reply(self.loads[index]) if index in self.loads else None
        except ReplyFieldError:  # a log line cut short: the policy's file says its sha256 and size
            load = None
        summary = summarize_run(path, LoopRecord(), load, prior_rows=rows, deadline_s=deadline_s)
        return summary if load is not None else replace(summary, sha256=sha256_hex(onnx), model_bytes=len(onnx))


def start_log(
    setup: RunSetup, command: str, policy_bytes: list[bytes], earlier: EarlierSessions, note: Callable[[str], None]
) -> Journal:
    """The run log, opened for appending with its first record: the header of a new run (what --resume reads back),
    or a resumed session's ``resume`` record. The file is created with the first episode, not before: a run that
    fails before flying anything (a user error, no bridge) leaves no log, and an earlier run's log stays where it
    is, resumable."""
    args = setup.args
    log_path = Path(args.out) / RUN_LOG
    log = Journal(log_path, on_create=None if args.resume else lambda: _keep_earlier_log(log_path, note))
    if args.resume:
        finished = {str(i): len(rows) for i, rows in earlier.rows.items()}
        record = {"kind": "resume", "t_wall": time.time(), "finished": finished}
    else:
        policies = [{"path": p, "sha256": sha256_hex(b)} for p, b in zip(args.policy, policy_bytes)]
        record = {"kind": "run", "log_version": RUN_LOG_VERSION, "args": asdict(args), "command": command}
        record |= {"t_wall": time.time(), "deadline_ms": setup.deadline_s * 1e3, "policies": policies}
    log.append(record, durable=False)
    return log


def _keep_earlier_log(log_path: Path, note: Callable[[str], None]) -> None:
    """Called when a new run records its first episode: an earlier log in its folder is kept beside."""
    if not log_path.exists():
        return
    if not any(r.get("kind") == "episode" for r in read_journal(log_path)[0]):
        log_path.unlink()  # a run that flew nothing (killed before its first episode, older versions): nothing to keep
        return
    # A new run never destroys an old log: it is kept beside, e.g. run.20260101-120000.jsonl.
    kept = log_path.with_name(f"run.{time.strftime('%Y%m%d-%H%M%S', time.localtime(log_path.stat().st_mtime))}.jsonl")
    log_path.rename(kept)
    note(f"previous run log kept as {kept} (use --resume {log_path.parent} to continue a run instead)")
