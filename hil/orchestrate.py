"""Flying a run: every policy of the setup over the same seeded episodes, one bridge session each, each episode
logged as it ends and report.json (+ figures) written after each policy; what the caller gets back
(:class:`RunResult`) and hears on the way (:class:`RunProgress`)."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import gymnasium as gym

from airq_cli import UserError
from airq_cli.journal import Journal
from firmware_bridge.client import BridgeError
from firmware_bridge.device import package_versions
from firmware_bridge.int8_kernels import Int8Kernels, saturation_warning
from firmware_bridge.protocol import sha256_hex
from hil.autopilot import prepare_vehicle
from hil.loop import ControlLink, Event, LoopRecord, PolicyUpload, event_record, run_closed_loop
from hil.report import PolicyResult, Report, record_from_rows, summarize_run, write_report
from hil.resume import RUN_LOG, EarlierSessions, start_log
from hil.session import BridgeSession
from hil.setup import LocalBridge, RunSetup
from nav_env.autopilot import AutopilotNavEnv
from nav_env.backends import get_backend
from nav_env.rollout import EpisodeResult, episode_row


@dataclass(frozen=True)
class RunResult:
    """What :func:`hil.run.run` did: the report it wrote (the JSON document of report.json) and where."""

    out_dir: Path
    report: dict[str, Any]
    already_complete: bool = False  # a finished run resumed: nothing flown, report.json left as it was
    notes: tuple[str, ...] = ()  # things done on the user's behalf (an earlier log kept beside)
    warnings: tuple[str, ...] = ()  # e.g. an int8 scheme the device's kernels do not compute exactly

    @property
    def report_path(self) -> Path:
        return self.out_dir / "report.json"

    @property
    def log_path(self) -> Path:
        return self.out_dir / RUN_LOG


class RunProgress:
    """Where :func:`hil.run.run` reports as it goes; the default says nothing (a library prints nothing).
    The command line passes one that draws a bar on a terminal and plain lines otherwise."""

    def note(self, text: str) -> None:
        """Something the user should know now (a warning, an earlier log kept)."""

    def policy_started(self, path: str, episodes: int) -> None:
        pass

    def episode_done(self, record: LoopRecord) -> None:
        pass

    def policy_ended(self) -> None:
        pass


def fly_run(setup: RunSetup, command: str, progress: RunProgress) -> RunResult:
    """Fly every policy's episodes not flown yet (all of them but for a --resume), logging each as it ends, and
    write report.json after each policy; a finished run resumed flies nothing and leaves its report as it is."""
    notes: list[str] = []

    def note(text: str) -> None:
        notes.append(text)
        progress.note(f"note: {text}")

    args = setup.args
    out_dir = Path(args.out)
    policy_bytes = [Path(path).read_bytes() for path in args.policy]
    earlier = EarlierSessions.of(args)
    existing = earlier.finished_report(out_dir, policy_bytes, args.episodes) if args.resume else None
    if existing is not None:  # nothing left to fly: no bridge, and the report the run wrote stays as it is
        return RunResult(out_dir, existing, already_complete=True)
    log = start_log(setup, command, policy_bytes, earlier, note)
    target = setup.target
    report = Report(
        command=command,
        date=time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        args=asdict(args),
        mode=target.mode,
        profile=asdict(target.profile) | {"emulated": target.profile.emulated()}
        if isinstance(target, LocalBridge)
        else None,
        level=setup.cfg.level,
        obs_dim=setup.cfg.obs_dim,
        deadline_ms=setup.deadline_s * 1e3,
        timing=setup.describe_timing(),
        run_log=str(log.path),
        host_versions=package_versions(),
        device=None,
        runs=[],
        comparisons=[],
        backend=args.backend,
    )
    flights = Flights(setup, log, progress)
    results: list[PolicyResult] = []
    try:
        for index, (path, onnx) in enumerate(zip(args.policy, policy_bytes)):
            rows = earlier.rows[index]
            finished = {row["episode"] for row in rows}
            todo = [j for j in range(args.episodes) if j not in finished]
            if todo:
                results.append(flights.fly_policy(index, onnx, todo, rows))
            else:
                # Finished in an earlier session: its summary comes from the log (the one that session
                # measured, or rebuilt from the episode rows); flying nothing would only measure nothing.
                summary = earlier.summary(index, path, onnx, setup.deadline_s)
                results.append(PolicyResult(summary, record_from_rows(rows), device=earlier.device.get(index)))
            report = replace(report.with_policies(results), vehicle=flights.vehicle())
            if todo:
                # The policy's summary goes to the log too (fsync'd): a resume takes it from there, not from
                # report.json, which may be missing (killed before writing it) or another run's.
                end = {"kind": "policy_end", "policy": path, "policy_index": index, "device": report.device}
                summary_json = results[-1].summary.to_json(episodes=False)
                log.append(end | {"episodes": sorted(finished | set(todo)), "summary": summary_json})
            if todo or index == len(policy_bytes) - 1:  # after each policy flown, and the last: nothing is lost
                write_report(out_dir, report, [r.record for r in results])
    finally:
        log.close()
    return RunResult(out_dir, report.to_json(), notes=tuple(notes), warnings=tuple(report.warnings))


class Flights:
    """What every policy of a session flies with: the setup, the simulator (made at the first flight, then flown by
    every policy), the log and the progress display."""

    def __init__(self, setup: RunSetup, log: Journal, progress: RunProgress) -> None:
        self.setup, self.log, self.progress = setup, log, progress
        self._env: gym.Env | None = None
        self._warned: set[str] = set()  # a warning is noted once per run, however many policies it concerns
        self._preflights: list[dict[str, Any]] = []  # --backend autopilot: getting the vehicle ready, per policy
        self._autopilot_status: dict[str, Any] | None = None  # the bridge's actuator map after the last policy

    def vehicle(self) -> dict[str, Any] | None:
        """--backend autopilot: which autopilot, firmware and frame flew, its clock's speed, what getting it ready
        took (report.json's ``vehicle``); None on a simulator."""
        if not isinstance(self._env, AutopilotNavEnv):
            return None
        return {
            **self._env.describe().to_json(),
            "preflight": self._preflights,
            "bridge_actuator": self._autopilot_status,
        }

    def fly_policy(
        self, index: int, onnx: bytes, episodes: list[int], prior_rows: list[dict[str, Any]]
    ) -> PolicyResult:
        """Start (or reach) the bridge, load the policy at ``index``, fly ``episodes``, log each as it ends; its
        result counts the ``prior_rows`` flown in earlier sessions too."""
        setup, log, args = self.setup, self.log, self.setup.args
        cfg, path, timing = setup.cfg, args.policy[index], setup.timings[index]
        # the autopilot's vehicle is reached through the bridge, which the env needs running first (ArduPilot SITL
        # starts its firmware only when its first serial port has a client: the bridge)
        if self._env is None and not get_backend(args.backend).bridge_first:
            self._env = self._make_env()
        self.progress.policy_started(path, len(episodes))
        with (session := BridgeSession(setup.target, args.timeout_s)) as client:

            def log_event(event: Event) -> None:
                log.append(event, durable=False)  # visible to readers at once; only episodes need fsync

            if session.process is not None:
                process = session.process
                log_event(event_record("bridge_started", policy=path, pid=process.pid, endpoint=process.endpoint))
            hello = client.hello()
            load = client.load_policy(onnx, name=Path(path).name)
            # model size, load time: for a rebuilt summary
            log_event(event_record("policy_loaded", policy=path, policy_index=index, load=load.to_json()))
            warning = _int8_warning(path, load.metadata, (hello.device or {}).get("int8_kernels"))
            if warning is not None and warning not in self._warned:
                self._warned.add(warning)
                self.progress.note(f"warning: {warning}")
            if load.obs_dim != cfg.obs_dim:
                raise UserError(
                    f"policy {path} takes {load.obs_dim} observations but level {cfg.level!r} gives {cfg.obs_dim}"
                )
            if load.sha256 != sha256_hex(onnx):
                raise BridgeError(
                    client.endpoint, f"bridge reports sha256 {load.sha256} for {path}, expected {sha256_hex(onnx)}"
                )
            deadline_s = setup.deadline_s
            if self._env is None:
                self._env = self._make_env()
            if isinstance(self._env, AutopilotNavEnv):
                preflight = prepare_vehicle(
                    client, self._env, args.takeoff_m, args.preflight_timeout_s, self.progress.note
                )
                self._preflights.append(preflight.to_json())
                # the deadline is a share of the autopilot's control period: a SITL running faster shortens it
                deadline_s /= self._env.telemetry.speedup() or 1.0
            link = ControlLink(
                client,
                deadline_s,
                PolicyUpload(onnx, Path(path).name),
                supervisor=session.supervisor(),
                on_event=log_event,
                max_outage_s=args.max_outage_s,
            )
            link.context["policy"] = path

            def on_episode(ep: EpisodeResult, rec: LoopRecord) -> None:
                log.append(
                    {
                        "kind": "episode",
                        "policy": path,
                        "policy_index": index,
                        **episode_row(ep),
                        **rec.episode_rows[-1],
                    }
                )
                self.progress.episode_done(rec)

            rec = run_closed_loop(
                client,
                cfg,
                episodes,
                args.seed,
                rate_hz=setup.pace_hz,
                on_episode=on_episode,
                env=self._env,
                link=link,
                timing=timing,
            )
            if isinstance(self._env, AutopilotNavEnv):
                self._autopilot_status = None if rec.status_end is None else rec.status_end.actuator
        self.progress.policy_ended()
        return PolicyResult(
            summarize_run(path, rec, load, prior_rows=prior_rows, deadline_s=setup.deadline_s),
            rec,
            device={
                "device": hello.device,
                "bridge_version": hello.bridge_version,
                "version": hello.version,
                "threads": hello.threads,
                "actuator": hello.actuator,
            },
            warning=warning,
            timing=None if timing.latency is None else timing.describe(),
        )

    def _make_env(self) -> gym.Env:
        backend = get_backend(self.setup.args.backend)
        try:
            return backend.make_env(self.setup.cfg, "rgb_array", backend.options_from(vars(self.setup.args)))
        except (ValueError, RuntimeError) as e:
            raise UserError(str(e)) from None


def _int8_warning(path: str, metadata: dict, device_kernels: dict | None) -> str | None:
    """Why the device's kernels do not compute a policy's int8 scheme exactly, or None if they do."""
    warning = saturation_warning(metadata, Int8Kernels.from_dict(device_kernels or {}))
    return f"{Path(path).name}: {warning}" if warning else None
