"""Shared helpers for the reliability tests (a uniquely named module, so it never clashes with other conftests)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import zmq

from firmware_bridge.protocol import pack, unpack

# Matches the embedded simulator's levels, so hil.run can fly these policies.
NAV_OBS_DIM = 1032


def hil_run_command(*args: object) -> list[str]:
    return [sys.executable, "-m", "hil.run", "--quiet", *map(str, args)]


def finish(process: subprocess.Popen, timeout_s: float) -> tuple[int, str, str]:
    """Wait for a hil.run process: (exit code, stdout, stderr); kill it and fail after ``timeout_s``."""
    try:
        out, err = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        raise AssertionError(f"hil.run did not finish in {timeout_s} s: {err[-2000:]}") from None
    return process.returncode, out, err


@contextmanager
def killed_on_exit(process: subprocess.Popen) -> Iterator[subprocess.Popen]:
    """``with killed_on_exit(Popen(...)) as run:``: a failing test never leaves the process running
    (Popen's own context manager would wait for it instead)."""
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()


def run_log(out_dir: Path) -> list[dict[str, Any]]:
    """Whole lines of OUT/run.jsonl (a torn last line is skipped, as hil.run itself does)."""
    path = out_dir / "run.jsonl"
    if not path.exists():
        return []
    records = []
    for line in path.read_bytes().splitlines(keepends=True):
        if not line.endswith(b"\n"):
            break
        records.append(json.loads(line))
    return records


def wait_for_log(
    out_dir: Path, predicate: Any, timeout_s: float, process: subprocess.Popen | None = None
) -> list[dict[str, Any]]:
    """Poll the run log until ``predicate(records)`` holds; fail after timeout_s or if the run exits."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        records = run_log(out_dir)
        if predicate(records):
            return records
        if process is not None and process.poll() is not None:
            raise AssertionError(f"hil.run exited with {process.returncode} before the log showed what was awaited")
        time.sleep(0.02)
    raise AssertionError(f"run log in {out_dir} did not reach the awaited state within {timeout_s} s")


def episodes(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r.get("kind") == "episode"]


def events(records: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [r for r in records if r.get("kind") == "event" and r.get("event") == name]


class RawDealer:
    """A bare DEALER socket that sends arbitrary frames and waits a bounded time for one reply."""

    def __init__(self, endpoint: str, curve: Any = None) -> None:
        self.socket = zmq.Context.instance().socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        if curve is not None:
            curve.apply(self.socket)
        self.socket.connect(endpoint)

    def send_frames(self, frames: list[bytes], timeout_ms: int = 5000) -> bool:
        """Queue the frames; False if no connection would take them within timeout_ms.

        A DEALER blocks on send while it has no pipe (e.g. its CurveZMQ handshake was refused),
        so never send blocking: a test must not hang on the very thing it checks.
        """
        try:
            self.socket.send_multipart(frames, flags=zmq.NOBLOCK)
            return True
        except zmq.Again:
            if not self.socket.poll(timeout_ms, zmq.POLLOUT):
                return False
            try:
                self.socket.send_multipart(frames, flags=zmq.NOBLOCK)
                return True
            except zmq.Again:
                return False

    def receive(self, timeout_ms: int) -> list[bytes] | None:
        if not self.socket.poll(timeout_ms):
            return None
        return self.socket.recv_multipart()

    def call(self, message: dict[str, Any], timeout_ms: int = 5000) -> dict[str, Any] | None:
        if not self.send_frames([b"", pack(message)], timeout_ms):
            return None
        frames = self.receive(timeout_ms)
        return None if frames is None else unpack(frames[-1])

    def close(self) -> None:
        self.socket.close(linger=0)


def rss_bytes(pid: int) -> int:
    """The resident set of process ``pid`` (VmRSS), in bytes."""
    match = re.search(r"VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text())
    assert match is not None, f"no VmRSS for pid {pid}"
    return int(match.group(1)) * 1024
