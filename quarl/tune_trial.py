"""The Ray side of ``quarl.tune_runner``: the function trainable every trial runs, its resources, its name, and the
driver's progress lines. Imports Ray at the top, so only ``tune_runner`` imports it, after ``require_ray()``.

A trial runs ``run_trial(spec, trial_dir, progress) -> TrialResult`` (``quarl.pipeline.run_trial``, or the dotted path
``run_study`` was given) with its stdout and stderr, at the file-descriptor level (child processes and C libraries
too), appended to ``<out>/trials/<name>/log.txt``; the trial directory is the study's, not Tune's, so a retried
trial resumes from the stage files the pipeline left there. An exception becomes :class:`TrialFailed` carrying one
line (``ValueError: ...``); the full traceback is in the log.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import socket
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from ray import tune
from ray.tune.execution.placement_groups import PlacementGroupFactory

from airq_cli import write_atomic
from quarl.config import TrialSpec
from quarl.results import TrialResult

LOG_NAME = "log.txt"
TRIAL_JSON = "trial.json"
MAX_ERROR_CHARS = 300


class TrialFailed(RuntimeError):
    """A trial's exception on its way to the driver: one line naming the original type (importable by the driver,
    whatever module the original came from)."""


def one_line(error: BaseException) -> str:
    text = str(error).strip()
    first = text.splitlines()[0] if text else ""
    line = f"{type(error).__name__}: {first}" if first else type(error).__name__
    return line if len(line) <= MAX_ERROR_CHARS else line[: MAX_ERROR_CHARS - 3] + "..."


def resolve(dotted: str, sys_path: list[str]) -> Callable[..., Any]:
    """``package.module.function``, importable in this (worker) process once ``sys_path`` is on sys.path."""
    for entry in reversed(sys_path):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    module, _, name = dotted.rpartition(".")
    fn = getattr(importlib.import_module(module), name)
    if not callable(fn):
        raise TypeError(f"{dotted} is not callable")
    return fn


@contextlib.contextmanager
def output_to(path: Path) -> Iterator[None]:
    """File descriptors 1 and 2 (and so sys.stdout, sys.stderr, logging, child processes) appended to ``path``."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    try:
        with open(path, "ab", buffering=0) as log:
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            try:
                yield
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os.dup2(saved[0], 1)
                os.dup2(saved[1], 2)
    finally:
        os.close(saved[0])
        os.close(saved[1])


def trainable(config: dict[str, Any], *, run: dict[str, Any]) -> None:
    """One trial. ``run``: ``out`` (absolute), ``trial_fn`` (dotted path), ``sys_path``, ``progress``."""
    spec = TrialSpec.from_dict(config["trial"])
    trial_dir = Path(run["out"]) / "trials" / spec.name
    trial_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    error = None
    with output_to(trial_dir / LOG_NAME):
        stamp = datetime.now().astimezone().isoformat(timespec="seconds")
        print(f"--- {spec.name}: started {stamp} on {socket.gethostname()} (pid {os.getpid()})", flush=True)
        try:
            fn = resolve(run["trial_fn"], run["sys_path"])
            result = fn(spec, trial_dir, run["progress"])
            if not isinstance(result, TrialResult):
                raise TypeError(f"{run['trial_fn']} returned {type(result).__name__}, not a TrialResult")
            trial_json = trial_dir / TRIAL_JSON
            if not trial_json.is_file():  # the pipeline writes it; a trial is not done without it
                write_atomic(trial_json, result.to_json().encode())
            fp32_mean = result.policy("fp32").mean
        except Exception as e:
            traceback.print_exc()
            error = one_line(e)
        seconds = time.monotonic() - t0
        end = (
            f"failed after {seconds:.1f} s: {error}" if error else f"done in {seconds:.1f} s, fp32 mean {fp32_mean:.4g}"
        )
        print(f"--- {spec.name}: {end}", flush=True)
    if error is not None:
        tune.report({"status": "failed", "error": error, "seconds": seconds})
        raise TrialFailed(error) from None
    tune.report({"status": "done", "fp32_mean": fp32_mean, "trial_json": str(trial_json), "seconds": seconds})


def resources(config: dict[str, Any]) -> PlacementGroupFactory:
    """1 CPU per thread of the trial (``TrialSpec.threads``)."""
    return PlacementGroupFactory([{"CPU": int(config["trial"]["threads"])}])


def trial_name(trial: Any) -> str:
    """Tune's name and directory of a trial: the spec's name, as under ``<out>/trials/``."""
    return TrialSpec.from_dict(trial.config["trial"]).name


def error_line(error: Any) -> str:
    """One line from what Tune kept of a trial's error: a RayTaskError around TrialFailed (or around anything
    else), a RayActorError (the process died), or the text of error.txt."""
    if error is None:
        return ""
    if isinstance(error, str):
        lines = [line.strip() for line in error.strip().splitlines() if line.strip()]
        return lines[-1][:MAX_ERROR_CHARS] if lines else "unknown error"
    cause = getattr(error, "cause", None)
    if isinstance(cause, BaseException):
        error = cause
    if isinstance(error, TrialFailed):
        return str(error)
    return one_line(error)


def trial_error(trial: Any) -> str:
    """The one-line error of an errored trial, as the driver sees it: the error Tune stored for this attempt (the
    last result may be an earlier attempt's), else what the trainable reported before raising."""
    for read in (trial.get_pickled_error, trial.get_error):
        try:
            found = read()
        except Exception:  # an error Tune cannot unpickle here: try the text
            continue
        if found:
            return error_line(found)
    return str((trial.last_result or {}).get("error") or "unknown error (see the trial's log.txt)")


def _duration(s: float) -> str:
    if s < 60:
        return f"{s:.1f} s"
    if s < 3600:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.2f} h"


class ProgressLines(tune.Callback):
    """One line on stderr per trial start and end: the time since the session began, what remains, what runs."""

    def __init__(self, total: int, quiet: bool = False) -> None:
        self.total, self.quiet = total, quiet
        self.t0 = time.monotonic()
        self.started: dict[str, float] = {}  # the trials started in this session

    def setup(
        self, stop: Any = None, num_samples: int | None = None, total_num_samples: int | None = None, **info: Any
    ):
        self.t0 = time.monotonic()  # this session's start (a restored experiment brings its callbacks back too)

    def _say(self, trials: list[Any], trial: Any, text: str, ended: bool) -> None:
        if self.quiet:
            return
        # Tune calls back before it changes the trial's status: count it as it is about to be
        finished = sum(1 for t in trials if t is not trial and t.status in ("TERMINATED", "ERROR")) + ended
        running = sum(1 for t in trials if t is not trial and t.status == "RUNNING") + (not ended)
        print(
            f"[{_duration(time.monotonic() - self.t0):>8}] {text} "
            f"({self.total - finished} of {self.total} remain, {running} running)",
            file=sys.stderr,
            flush=True,
        )

    def _took(self, name: str) -> str:
        return _duration(time.monotonic() - self.started.get(name, self.t0))

    def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        name = trial_name(trial)
        self.started[name] = time.monotonic()
        self._say(trials, trial, f"start  {name}", ended=False)

    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        name = trial_name(trial)
        mean = (trial.last_result or {}).get("fp32_mean")
        shown = f", fp32 mean {mean:.4g}" if isinstance(mean, (int, float)) else ""
        self._say(trials, trial, f"done   {name} in {self._took(name)}{shown}", ended=True)

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        name = trial_name(trial)
        self._say(trials, trial, f"FAILED {name} after {self._took(name)}: {trial_error(trial)}", ended=True)
