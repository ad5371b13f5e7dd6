"""A study's trials as Ray Tune trials: started, resumed, reported.

    from quarl.config import load_config
    from quarl.tune_runner import plan_study, run_study

    study = run_study(load_config("configs/quarl/cpu.toml"), "out/quarl/cpu")
    study.exit_code        # 0 every trial done, 1 one failed, 130 interrupted (rerun to resume)

Every ``TrialSpec`` of ``StudyConfig.trials()`` is one trial of one Tune experiment (``<out>/tune/<name>``,
``param_space={"trial": grid_search([spec.to_dict(), ...])}``), 1 CPU per ``spec.threads``, running
``run_trial(spec, <out>/trials/<name>/, progress)`` (default ``quarl.pipeline.run_trial``; the tests give their own
dotted path) in a fresh process per trial (``quarl.tune_trial``).

Resuming: the same ``--out`` again restores the experiment (``Tuner.restore(resume_errored=True)``): finished
trials are not rerun, errored and unfinished ones are run again, from scratch as far as Tune knows; the pipeline
itself resumes after its last finished stage (``<out>/trials/<name>/stages/``). The config must be the one the
study was started with (``study.json`` keeps its trials); ``fresh=True`` refuses an --out that holds a study at
all. Nothing recorded is ever deleted.

``<out>/study.json`` (written atomically when a session starts and when it ends; paths relative to ``<out>``)::

    {"schema": "quarl.study/1", "name", "config_file", "config": StudyConfig as JSON,
     "status": "running" | "done" | "failed" | "interrupted",
     "counts": {"trials", "done", "failed", "unfinished"},
     "trials": [{"name", "status": "done" | "failed" | "unfinished", "fp32_mean", "seconds", "error",
                 "trial_json", "log", "tune_dir", "spec": TrialSpec.to_dict()}],
     "errors": [{"trial", "error"}],                       # the failed trials' one-line errors
     "wall_s", "wall_s_total", "sessions": [{"started", "wall_s", "ran", "resumed", "ray"}],
     "machine": {...}, "tune": {"experiment", "max_concurrent", "trial_fn"}}
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import platform
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from airq_cli import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_OK, check_output_dir, json_text, write_json
from airq_cli.network import check_ray_head, ray_environment
from quarl.config import StudyConfig, TrialSpec
from quarl.errors import QuarlError
from quarl.tasks import task_family

DEFAULT_TRIAL_FN = "quarl.pipeline.run_trial"
INSTALL_HINT = "pip install 'airq[study]' (ray[tune]==2.60.0)"
SCHEMA = "quarl.study/1"
STUDY_JSON = "study.json"
TUNE_DIR = "tune"
TRIALS_DIR = "trials"

# Training env steps per second of one trial on one core with SB3 and the zoo's settings, as the study's own trials
# measure them (docs/results.md, "The QuaRL study": the runs, machine and versions behind each figure). For --dry-run's
# estimate only; entries missing here (e.g. SAC) are left out of the estimate and said so.
MEASURED_STEPS_PER_S: dict[str, dict[str, float]] = {
    "classic": {"ppo": 1890, "a2c": 4000, "dqn": 330, "ddpg": 45, "td3": 45},
    "minatar": {"ppo": 2270, "a2c": 3030, "dqn": 505},
    "atari": {"ppo": 113, "a2c": 154, "dqn": 28},
    "locomotion": {"ddpg": 53, "td3": 53},
}
QAT_RATE_FRACTION = 0.5  # QAT steps/s over training steps/s (the same trials: 0.43-0.60; MCC DDPG 0.86)
# everything in a trial but training and QAT (start, export, quantization, evaluation): the same trials' median;
# MinAtar episodes that run to the step cap cost far more
TRIAL_OVERHEAD_S = 25.0


# ------------------------------------------------------------------------------------------------ Ray
def require_ray() -> Any:
    """``ray`` with Ray Tune, or a one-line error naming the extra to install."""
    ray_environment()  # before Ray is imported
    try:
        # deferred: ray: optional extra, seconds to import
        import ray
        import ray.tune  # noqa: F401 - the [tune] part of the extra
    except ImportError as e:
        raise QuarlError(f"Ray Tune is not installed ({e}): {INSTALL_HINT}") from None
    return ray


def check_address(address: str, timeout_s: float = 5.0) -> None:
    """A clear error for an address nothing answers at, before Ray's own minute of retries."""
    if address.startswith("ray://"):
        raise QuarlError(
            f"--address {address}: Ray Client (ray://) is not supported: run on the head node with --address auto"
        )
    check_ray_head(address, QuarlError, timeout_s)


@dataclass
class RaySession:
    address: str  # "local" or the cluster's address
    nodes: int
    cpus: float
    node_cpus: float  # the largest node's: a trial must fit on one node
    owned: bool = False  # started here: shut down by stop()
    temp_dir: str | None = None

    def describe(self) -> dict[str, Any]:
        return {"address": self.address, "nodes": self.nodes, "cpus": self.cpus}


def _session_info(ray: Any, address: str, owned: bool, temp_dir: str | None) -> RaySession:
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    node_cpus = max((float(n.get("Resources", {}).get("CPU", 0.0)) for n in nodes), default=0.0)
    cpus = float(ray.cluster_resources().get("CPU", 0.0))
    return RaySession(address, len(nodes), cpus, node_cpus, owned, temp_dir)


def start_ray(address: str | None = None) -> RaySession:
    """The cluster at ``address`` (HOST:PORT or auto), or a local Ray with os.cpu_count() CPUs. A Ray already
    initialised in this process is used as it is (and left running)."""
    ray = require_ray()
    if ray.is_initialized():
        return _session_info(ray, address or "local", owned=False, temp_dir=None)
    if address:
        check_address(address)
        try:
            ray.init(address=address, logging_level="WARNING", log_to_driver=False)
        except Exception as e:
            first = (str(e).splitlines() or [type(e).__name__])[0][:200]
            raise QuarlError(f"--address {address}: cannot join the Ray cluster ({first})") from None
        return _session_info(ray, address, owned=True, temp_dir=None)
    # Ray's unix sockets live under its temp dir and their paths may not exceed 107 bytes: a short one in /tmp
    temp_dir = tempfile.mkdtemp(prefix="quarl-ray-", dir="/tmp")
    # The workers import quarl from where this process does (an editable install may point elsewhere): they inherit
    # the environment of the Ray started here. (Cheaper than a runtime_env, which slows every worker's start.)
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (_root_of("quarl"), saved) if p)
    try:
        ray.init(
            num_cpus=os.cpu_count() or 1,
            include_dashboard=False,
            logging_level="WARNING",
            log_to_driver=False,
            _temp_dir=temp_dir,
        )
    except BaseException:
        shutil.rmtree(temp_dir, ignore_errors=True)
        raise
    finally:
        if saved is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = saved
    return _session_info(ray, "local", owned=True, temp_dir=temp_dir)


def stop_ray(session: RaySession) -> None:
    """Shut down a Ray that start_ray started (and remove its temp dir); a Ray found running stays."""
    if not session.owned:
        return
    ray = require_ray()
    if ray.is_initialized():
        ray.shutdown()
    if session.temp_dir:
        shutil.rmtree(session.temp_dir, ignore_errors=True)


# ------------------------------------------------------------------------------------------------ checks
def _root_of(module: str) -> str:
    """The sys.path entry ``module`` is imported from ("" if it is not found or has no file)."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return ""
    if spec is None or not spec.origin or not os.path.isabs(spec.origin):
        return ""
    depth = module.count(".") + (2 if spec.submodule_search_locations is not None else 1)
    return str(Path(spec.origin).parents[depth - 1])


def check_trial_fn(dotted: str) -> list[str]:
    """The sys.path entries a worker needs to import ``dotted`` (``package.module.function``), found without
    importing the module itself (the pipeline imports torch); a one-line error if it cannot be found."""
    module, _, name = dotted.rpartition(".")
    if not module or not name:
        raise QuarlError(f"trial function {dotted!r}: expected package.module.function")
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError) as e:
        raise QuarlError(f"trial function {dotted}: cannot import {module} ({e})") from None
    if spec is None:
        raise QuarlError(f"trial function {dotted}: no module {module} here")
    root = _root_of(module)
    return [root] if root else []


def _normalised(value: Any) -> Any:
    return json.loads(json_text(value))  # tuples become lists, as read back from study.json


def _read_study(out: Path) -> dict[str, Any] | None:
    path = out / STUDY_JSON
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise QuarlError(f"{path}: unreadable ({e}): move it away to start over in {out}") from None
    if not isinstance(record, dict) or record.get("schema") != SCHEMA:
        raise QuarlError(f"{path}: not a quarl study record ({SCHEMA}): use another --out")
    return record


def _holds_a_study(out: Path) -> list[str]:
    found = [p for p in (STUDY_JSON, TUNE_DIR) if (out / p).exists()]
    trials = out / TRIALS_DIR
    if trials.is_dir() and any(trials.iterdir()):
        found.append(TRIALS_DIR + "/")
    return found


def check_out(config: StudyConfig, out: Path, fresh: bool) -> dict[str, Any] | None:
    """``out`` usable for this config: writable, and either new or holding this same study. Returns the study's
    record when there is one (a resume). Never deletes anything."""
    check_output_dir(out, "--out")
    if fresh:
        found = _holds_a_study(out)
        if found:
            raise QuarlError(
                f"--fresh: {out} already holds a study ({', '.join(found)}); nothing is deleted: "
                "use another --out, or move that one away yourself"
            )
        return None
    record = _read_study(out)
    if record is None:
        return None
    before = [t.get("spec") for t in record.get("trials", [])]
    now = _normalised([t.to_dict() for t in config.trials()])
    if before != now:
        differ = [TrialSpec.from_dict(s).name for s in now if s not in before] or [
            str(s.get("env_id", "?")) for s in before if s not in now
        ]
        raise QuarlError(
            f"{out} holds study {record.get('name')!r} of other trials ({len(differ)} differ, e.g. {differ[0]}): "
            "rerun it with its own config to resume it, or use another --out"
        )
    return record


def check_fits(config: StudyConfig, session: RaySession) -> None:
    """Refuse a cluster on which no node could ever hold a trial (Ray would wait forever)."""
    need = max(t.threads for t in config.trials())
    if session.node_cpus < need:
        raise QuarlError(
            f"each trial needs {need} CPUs (threads = {need}) on one node; the largest node of the Ray cluster "
            f"({session.address}) has {session.node_cpus:g}"
        )


# ------------------------------------------------------------------------------------------------ the plan
@dataclass(frozen=True)
class TrialPlan:
    spec: TrialSpec
    state: str  # "new", "done" (skipped), "retry" (failed before), "resume" (unfinished before)
    train_steps: int | None  # None: the RL Zoo's budget (not known before quarl.zoo resolves it)
    qat_steps: int | None  # all the QAT runs together
    policies: int  # evaluated policies: fp32, each PTQ file, each n-bit PTQ width, each QAT width
    eval_episodes: int  # all policies together
    core_hours: float | None  # train + QAT steps at the measured rates + overhead, x threads (None: no rate known)


def plan_trial(spec: TrialSpec, state: str = "new") -> TrialPlan:
    policies = 1 + len(spec.ptq_targets) + len(spec.ptq_bits) + len(spec.qat_bits)
    # deferred: torch, stable_baselines3 (via quarl.zoo): seconds to import
    from quarl.zoo import zoo_entry

    steps = spec.steps or zoo_entry(spec.env_id, spec.algo).n_timesteps
    qat = int(len(spec.qat_bits) * spec.qat_steps_fraction * steps)
    rate = MEASURED_STEPS_PER_S.get(task_family(spec.env_id), {}).get(spec.algo)
    seconds = None if rate is None else steps / rate + qat / (rate * QAT_RATE_FRACTION) + TRIAL_OVERHEAD_S
    hours = None if seconds is None else seconds / 3600 * spec.threads
    return TrialPlan(spec, state, steps, qat, policies, policies * spec.eval_episodes, hours)


@dataclass
class Plan:
    config: StudyConfig
    out: Path
    trials: list[TrialPlan]
    where: str  # "local (2 CPUs)" or the cluster
    cpus: float
    max_concurrent: int
    warnings: list[str] = field(default_factory=list)

    @property
    def slots(self) -> int:
        """Trials at once: --max-concurrent, or fewer when the CPUs run out."""
        return max(1, min(self.max_concurrent, int(self.cpus // max(1, self.config.trial.threads))))

    def lines(self) -> list[str]:
        c, trials = self.config, self.trials
        shared = c.trial
        todo = [t for t in trials if t.state != "done"]
        lines = [
            f"study {c.name}: {len(c.cells)} cells x {len(c.seeds)} seeds = {len(trials)} trials, "
            f"{len(todo)} to run, into {self.out}",
            f"each trial: train (SB3, RL Zoo hyperparameters) -> ONNX -> PTQ {', '.join(shared.ptq_targets)}"
            f" -> n-bit PTQ {','.join(map(str, shared.ptq_bits))} ({shared.rounding})"
            f" -> QAT {','.join(map(str, shared.qat_bits))} ({shared.qat_steps_fraction:g} x training steps each)"
            f" -> {shared.eval_episodes} eval episodes per policy",
            f"Ray: {self.where}; {shared.threads} CPU(s) per trial, {self.slots} at once",
            f"{'trial':<40} {'train steps':>12} {'QAT steps':>11} {'eval eps':>9} {'core-h':>7}  state",
        ]
        for t in trials:
            steps = f"{t.train_steps:,}" if t.train_steps is not None else "?"
            qat = f"{t.qat_steps:,}" if t.qat_steps is not None else "-"
            hours = f"{t.core_hours:.2f}" if t.core_hours is not None else "?"
            lines.append(f"{t.spec.name:<40} {steps:>12} {qat:>11} {t.eval_episodes:>9,} {hours:>7}  {t.state}")
        known = [t for t in todo if t.core_hours is not None]
        total = sum(t.core_hours or 0.0 for t in known)
        wall = _wall_hours([t.core_hours or 0.0 for t in known], self.slots, shared.threads)
        lines.append(
            f"estimate for the {len(known)} trials to run: {total:.1f} core-hours, ~{wall:.1f} h wall with {self.slots} "
            "at once (training + QAT at rates measured on a 2-core AVX2 VM, one core per trial, + "
            f"{TRIAL_OVERHEAD_S:.0f} s per trial for the rest; evaluations that play to an episode cap cost more)"
        )
        if len(known) < len(todo):
            lines.append(
                f"{len(todo) - len(known)} trials have no measured rate for their task and algorithm: not in the estimate"
            )
        return lines


def _wall_hours(core_hours: list[float], slots: int, threads: int) -> float:
    """Longest-first onto ``slots`` parallel trials."""
    loads = [0.0] * slots
    for h in sorted(core_hours, reverse=True):
        loads[loads.index(min(loads))] += h / threads
    return max(loads, default=0.0)


def _states(record: dict[str, Any] | None, out: Path) -> dict[str, str]:
    """Per trial name: what a run would do with it, from the study's record and the trial directories."""
    states: dict[str, str] = {}
    for t in (record or {}).get("trials", []):
        status = t.get("status")
        states[t["name"]] = {"done": "done", "failed": "retry"}.get(status, "resume")
    for d in (out / TRIALS_DIR).glob("*/"):
        states.setdefault(d.name, "resume")
    return states


def plan_study(
    config: StudyConfig,
    out: str | Path,
    *,
    address: str | None = None,
    max_concurrent: int | None = None,
    fresh: bool = False,
    trial_fn: str = DEFAULT_TRIAL_FN,
) -> Plan:
    """What run_study would do, checked as far as it can be without running a trial: the config, --out (and a
    study in it), Ray Tune importable, the trial function findable (a warning: it is code, not configuration),
    and with ``address`` the cluster joined for its size (then left). A local Ray is not started."""
    out = Path(out).absolute()
    record = check_out(config, out, fresh)
    if address:
        check_address(address)
    require_ray()
    warnings = []
    try:
        check_trial_fn(trial_fn)
    except QuarlError as e:
        warnings.append(f"{e}: a real run stops here")
    if address:
        session = start_ray(address)
        try:
            check_fits(config, session)
        finally:
            stop_ray(session)
        where, cpus = f"cluster {address}: {session.nodes} nodes, {session.cpus:g} CPUs", session.cpus
    else:
        cpus = float(os.cpu_count() or 1)
        where = f"local, {cpus:g} CPUs"
        check_fits(config, RaySession("local", 1, cpus, cpus))
    states = _states(record, out)
    trials = [plan_trial(s, states.get(s.name, "new")) for s in config.trials()]
    return Plan(config, out, trials, where, cpus, max_concurrent or max(1, int(cpus)), warnings)


# ------------------------------------------------------------------------------------------------ the run
def machine_info() -> dict[str, Any]:
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    # deferred: ray: optional extra, seconds to import
    import ray

    return {
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu": cpu,
        "logical_cpus": os.cpu_count(),
        "ray": ray.__version__,
    }


@dataclass
class Study:
    """What run_study did: the record written to ``path`` (study.json)."""

    path: Path
    record: dict[str, Any]

    @property
    def exit_code(self) -> int:
        return {"done": EXIT_OK, "interrupted": EXIT_INTERRUPTED}.get(self.record["status"], EXIT_FAILURE)

    def summary_lines(self) -> list[str]:
        r = self.record
        n = r["counts"]
        lines = [
            f"study {r['name']}: {n['trials']} trials, {n['done']} done, {n['failed']} failed"
            + (f", {n['unfinished']} unfinished" if n["unfinished"] else "")
            + f" (this session {r['wall_s']:.0f} s)"
        ]
        for t in r["trials"]:
            if t["status"] == "done":
                mean = t["fp32_mean"]
                lines.append(
                    f"  done       {t['name']:<40} fp32 mean {mean:.4g}  {t['trial_json']}"
                    if isinstance(mean, (int, float))
                    else f"  done       {t['name']:<40} {t['trial_json']}"
                )
            elif t["status"] == "failed":
                lines.append(f"  FAILED     {t['name']:<40} {t['error']}  (log: {t['log']})")
            else:
                lines.append(f"  unfinished {t['name']}")
        lines.append(f"record: {self.path}")
        if n["failed"] or n["unfinished"]:
            lines.append("rerun the same command to retry the failed and unfinished trials (finished ones are kept)")
        return lines


def _now() -> str:
    return datetime.now().astimezone().isoformat(timespec="seconds")


def _record(
    config: StudyConfig,
    config_file: str | None,
    out: Path,
    rows: list[dict[str, Any]],
    status: str,
    sessions: list[dict[str, Any]],
    tune_info: dict[str, Any],
) -> dict[str, Any]:
    counts = {
        "trials": len(rows),
        "done": sum(r["status"] == "done" for r in rows),
        "failed": sum(r["status"] == "failed" for r in rows),
        "unfinished": sum(r["status"] == "unfinished" for r in rows),
    }
    return {
        "schema": SCHEMA,
        "name": config.name,
        "config_file": config_file,
        "config": _normalised(asdict(config)),
        "status": status,
        "counts": counts,
        "trials": rows,
        "errors": [{"trial": r["name"], "error": r["error"]} for r in rows if r["status"] == "failed"],
        "wall_s": sessions[-1]["wall_s"],
        "wall_s_total": round(sum(s["wall_s"] for s in sessions), 1),
        "sessions": sessions,
        "machine": machine_info(),
        "tune": tune_info,
    }


def _row(
    spec: TrialSpec, out: Path, experiment: Path, status: str, metrics: dict[str, Any], error: str | None
) -> dict[str, Any]:
    trial_dir = out / TRIALS_DIR / spec.name
    trial_json = trial_dir / "trial.json"
    return {
        "name": spec.name,
        "status": status,
        "fp32_mean": metrics.get("fp32_mean") if status == "done" else None,
        "seconds": metrics.get("seconds"),
        "error": error,
        "trial_json": str(trial_json.relative_to(out)) if trial_json.is_file() else None,
        "log": str((trial_dir / "log.txt").relative_to(out)),
        "tune_dir": str((experiment / spec.name).relative_to(out)),
        "spec": _normalised(spec.to_dict()),
    }


def run_study(
    config: StudyConfig,
    out: str | Path,
    *,
    address: str | None = None,
    max_concurrent: int | None = None,
    fresh: bool = False,
    progress: bool = True,
    trial_fn: str = DEFAULT_TRIAL_FN,
    config_file: str | Path | None = None,
) -> Study:
    """Run (or resume) every trial of ``config`` with Ray Tune into ``out``; see the module's docstring.

    ``trial_fn``: dotted path of ``run_trial(spec, trial_dir, progress) -> TrialResult`` (the CLI always passes the
    default). ``max_concurrent``: trials at once (default: the cluster's CPUs). A failed trial does not stop the
    others; the returned Study says what happened (``exit_code``)."""
    t0 = time.monotonic()
    out = Path(out).absolute()
    record = check_out(config, out, fresh)
    if address:
        check_address(address)  # before anything starts
    require_ray()
    sys_path = check_trial_fn(trial_fn)
    # deferred: ray: optional extra, seconds to import
    from ray import tune

    # deferred: ray (via quarl.tune_trial): optional extra, seconds to import
    from quarl import tune_trial

    session = start_ray(address)
    try:
        check_fits(config, session)
        concurrent = max_concurrent or max(1, int(session.cpus))
        experiment = out / TUNE_DIR / config.name
        specs = config.trials()
        sessions = list((record or {}).get("sessions", []))
        resumed = tune.Tuner.can_restore(str(experiment))
        sessions.append({"started": _now(), "wall_s": 0.0, "ran": [], "resumed": resumed, "ray": session.describe()})
        tune_info = {
            "experiment": str(experiment.relative_to(out)),
            "max_concurrent": concurrent,
            "trial_fn": trial_fn,
        }
        cfg_file = str(Path(config_file).absolute()) if config_file else None
        before = {r["name"]: r for r in (record or {}).get("trials", [])}
        rows = [
            before.get(s.name) or _row(s, out, experiment, "unfinished", {}, None) for s in specs
        ]  # what is known before this session
        write_json(out / STUDY_JSON, _record(config, cfg_file, out, rows, "running", sessions, tune_info))

        run_params = {"out": str(out), "trial_fn": trial_fn, "sys_path": sys_path, "progress": progress}
        trainable = tune.with_resources(
            tune.with_parameters(tune_trial.trainable, run=run_params), tune_trial.resources
        )
        callback = tune_trial.ProgressLines(len(specs), quiet=not progress)
        if resumed:
            tuner = tune.Tuner.restore(str(experiment), trainable, resume_errored=True, restart_errored=False)
            _renew_restored(tuner, callback, concurrent)
            if progress:
                todo = sum(1 for r in rows if r["status"] != "done")
                print(f"resuming {experiment}: {len(specs) - todo} done, {todo} to run", file=sys.stderr, flush=True)
        else:
            tuner = tune.Tuner(
                trainable,
                param_space={"trial": tune.grid_search([s.to_dict() for s in specs])},
                tune_config=tune.TuneConfig(
                    max_concurrent_trials=concurrent,
                    reuse_actors=False,  # a fresh process per trial: torch's threads and memory start clean
                    trial_name_creator=tune_trial.trial_name,
                    trial_dirname_creator=tune_trial.trial_name,
                ),
                run_config=tune.RunConfig(
                    name=config.name,
                    storage_path=str(out / TUNE_DIR),
                    verbose=0,
                    callbacks=[callback],
                    failure_config=tune.FailureConfig(max_failures=0, fail_fast=False),
                ),
            )
        with _quiet_tune():
            grid = tuner.fit()
    finally:
        stop_ray(session)

    by_name: dict[str, tuple[str, dict[str, Any], str | None]] = {}
    for result in (grid[i] for i in range(len(grid))):
        spec = TrialSpec.from_dict((result.config or {})["trial"])
        metrics = dict(result.metrics or {})
        if result.error is not None:  # this attempt's error (metrics may hold an earlier attempt's)
            by_name[spec.name] = ("failed", metrics, tune_trial.error_line(result.error))
        elif metrics.get("status") == "done":
            by_name[spec.name] = ("done", metrics, None)
        else:
            by_name[spec.name] = ("unfinished", metrics, None)
    rows = [_row(s, out, experiment, *by_name.get(s.name, ("unfinished", {}, None))) for s in specs]
    ran = [s.name for s in specs if before.get(s.name, {}).get("status") != "done" and s.name in callback.started]
    sessions[-1] |= {"wall_s": round(time.monotonic() - t0, 1), "ran": ran}
    unfinished = any(r["status"] == "unfinished" for r in rows)
    failed = any(r["status"] == "failed" for r in rows)
    status = "interrupted" if unfinished else "failed" if failed else "done"
    path = write_json(out / STUDY_JSON, _record(config, cfg_file, out, rows, status, sessions, tune_info))
    return Study(path, json.loads(path.read_text()))


@contextlib.contextmanager
def _quiet_tune() -> Iterator[None]:
    """Tune's own output off: its tables (the legacy reporter, silent at verbose=0; the newer one prints the
    experiment's header and each error whatever the verbosity) and its log records of the failed trials, which
    the progress lines and the summary give in one line each (the traceback is in the trial's log.txt)."""
    saved = os.environ.get("RAY_AIR_NEW_OUTPUT")
    os.environ["RAY_AIR_NEW_OUTPUT"] = "0"
    loggers = [logging.getLogger(n) for n in ("ray.tune.tune", "ray.tune.execution.tune_controller")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)
        if saved is None:
            os.environ.pop("RAY_AIR_NEW_OUTPUT", None)
        else:
            os.environ["RAY_AIR_NEW_OUTPUT"] = saved


def _renew_restored(tuner: Any, callback: Any, max_concurrent: int) -> None:
    """Tuner.restore brings back the first session's RunConfig and TuneConfig (callbacks, max_concurrent_trials)
    with no public way to change them; this session's progress lines and --max-concurrent go in here (private
    attributes of ray 2.60.0's TunerInternal, checked so that a Ray that moved them fails loudly)."""
    internal = getattr(tuner, "_local_tuner", None)
    run_config = getattr(internal, "_run_config", None)
    tune_config = getattr(internal, "_tune_config", None)
    if run_config is None or tune_config is None or not hasattr(tune_config, "max_concurrent_trials"):
        raise RuntimeError("this Ray's Tuner keeps its restored configs elsewhere: update quarl.tune_runner")
    run_config.callbacks = [callback]
    tune_config.max_concurrent_trials = max_concurrent
