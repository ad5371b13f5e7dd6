"""python -m deployment_study.autopilot_table: the same policies on the same seeded episodes flown by the embedded
point mass, the MuJoCo quadrotor and real autopilots (ArduCopter and PX4 SITL builds the caller gives), through the
real bridge, and what each vehicle costs in success.

For each autopilot given (``--ardupilot BIN --ardupilot-params copter.parm``, ``--px4 BIN``): its SITL is started
(hil.sitl; ``--speedup`` where the autopilot has one) and ``python -m hil.run --sim-only --backend autopilot
--takeoff-m 5`` flies every model's episodes, the bridge a local process with ``--actuator mavlink``; then
``hil.run --backend mujoco`` and ``--backend embedded`` fly the same models on the same seeds. Each vehicle's
report.json lands in ``OUT/<vehicle>/``; ``autopilot_table.json`` and ``autopilot_table.md`` (written when all is
flown) hold, per model: success with its Wilson interval, the failures, steps to the goal, the act rate and round
trip, and each vehicle's paired difference against the embedded simulator and the MuJoCo quadrotor (Newcombe's
interval, McNemar's exact p). A vehicle already flown (its report.json there, with the same models, level, seed and
episodes) is not flown again: a rerun finishes what a stopped one left.

SITL listens on every interface: run this as root in a private network namespace, ``sudo unshare -n python -m
deployment_study.autopilot_table ...`` (it refuses to start SITL beside any interface but loopback).
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from airq_cli import ArgumentParser, UserError, output_dir, run, write_atomic, write_json
from hil.sitl import LINKS, check_binary, start_sitl, stop_sitl
from nav_env.stats import paired_difference, wilson_interval

PROG = "deployment_study.autopilot_table"
SIMULATED = ("embedded", "mujoco")
NAMES = {"embedded": "embedded point mass", "mujoco": "MuJoCo quadrotor", "ardupilot": "ArduCopter SITL",
         "px4": "PX4 SITL (SIH)"}  # fmt: skip
TAKEOFF_M = 5.0


@dataclass
class Args:
    models: list[str]
    ardupilot: str | None = None
    ardupilot_params: str | None = None
    px4: str | None = None
    level: str = "default"
    episodes: int = 30
    seed: int = 0
    speedup: float = 1.0
    out: Path = field(default_factory=lambda: Path("out/autopilot_table"))
    quiet: bool = False


def parse(argv: list[str] | None = None) -> Args:
    p = ArgumentParser(prog=f"python -m {PROG}", description=__doc__.split("\n\n")[0].split(": ", 1)[1])
    p.add_argument("--models", nargs="+", required=True, metavar="ONNX", help="the policies (int8 as shipped)")
    p.add_argument("--ardupilot", metavar="BIN", help="an arducopter SITL binary")
    p.add_argument("--ardupilot-params", metavar="PARM", help="its Tools/autotest/default_params/copter.parm")
    p.add_argument("--px4", metavar="BIN", help="a PX4 SITL px4 binary (its build's etc/ beside bin/)")
    p.add_argument("--level", default="default")
    p.add_argument("--episodes", type=int, default=30)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--speedup", type=float, default=1.0, help="the SITL clock against the wall clock")
    p.add_argument("--out", type=output_dir, default=Path("out/autopilot_table"))
    p.add_argument("--quiet", action="store_true")
    a = p.parse_args(argv)
    if not a.ardupilot and not a.px4:
        p.error("give --ardupilot BIN --ardupilot-params PARM, --px4 BIN, or both")
    if a.episodes < 1:
        p.error(f"--episodes must be at least 1, got {a.episodes}")
    if not 0.1 <= a.speedup <= 20:
        p.error(f"--speedup must be within 0.1..20, got {a.speedup}")
    return Args(**{**vars(a), "out": Path(a.out)})


def only_loopback() -> bool:
    """Whether this process's network namespace has loopback alone (where SITL's listening sockets stay)."""
    return [name for _, name in socket.if_nameindex()] == ["lo"]


def vehicles(a: Args) -> list[str]:
    return [v for v, binary in (("ardupilot", a.ardupilot), ("px4", a.px4)) if binary] + list(SIMULATED)


def flown(folder: Path, a: Args) -> dict[str, Any] | None:
    """The vehicle's report.json if it flew exactly these models, level, seed and episodes."""
    try:
        report = json.loads((folder / "report.json").read_text())
    except (OSError, ValueError):
        return None
    args = report.get("args", {})
    same = (
        [r["policy"] for r in report.get("runs", [])] == a.models
        and args.get("level") == a.level and args.get("seed") == a.seed and args.get("episodes") == a.episodes
        and all(len(r["episodes"]) == a.episodes for r in report["runs"])
    )  # fmt: skip
    return report if same else None


def hil_run(a: Args, vehicle: str, out: Path) -> None:
    cmd = [sys.executable, "-m", "hil.run", *[x for m in a.models for x in ("--policy", m)], "--sim-only",
           "--level", a.level, "--episodes", str(a.episodes), "--seed", str(a.seed), "--out", str(out)]  # fmt: skip
    if vehicle in SIMULATED:
        cmd += ["--backend", vehicle]
    else:
        link = LINKS[vehicle]
        cmd += ["--backend", "autopilot", "--fc", link.fc, "--telemetry", link.telemetry, "--takeoff-m", str(TAKEOFF_M)]
    done = subprocess.run(
        cmd + (["--quiet"] if a.quiet else []), check=False, stdout=None if not a.quiet else subprocess.DEVNULL
    )
    if done.returncode != 0:
        raise UserError(f"{NAMES[vehicle]}: hil.run exited {done.returncode} (its run.jsonl in {out} says what it did)")


def fly(a: Args, vehicle: str) -> dict[str, Any]:
    out = a.out / vehicle
    report = flown(out, a)
    if report is not None:
        print(f"{NAMES[vehicle]}: flown already ({out / 'report.json'})", file=sys.stderr)
        return report
    t0 = time.monotonic()
    print(f"{NAMES[vehicle]}: {len(a.models)} models x {a.episodes} episodes on {a.level} ...", file=sys.stderr)
    if vehicle in SIMULATED:
        hil_run(a, vehicle, out)
    else:
        work = Path(tempfile.mkdtemp(prefix=f"airq-{vehicle}-"))
        binary, params = (a.ardupilot, a.ardupilot_params) if vehicle == "ardupilot" else (a.px4, None)
        assert binary is not None  # vehicles() lists an autopilot only with its binary
        try:
            sitl = start_sitl(vehicle, binary, params, work, a.speedup)
        except ValueError as e:
            shutil.rmtree(work, ignore_errors=True)
            raise UserError(f"{NAMES[vehicle]}: {e}") from None
        try:
            hil_run(a, vehicle, out)
        finally:
            stop_sitl(sitl)
            if out.is_dir():
                shutil.copy(work / "sitl.log", out / "sitl.log")
            shutil.rmtree(work, ignore_errors=True)
    print(f"{NAMES[vehicle]}: {time.monotonic() - t0:.0f} s", file=sys.stderr)
    report = flown(out, a)
    if report is None:
        raise UserError(f"{NAMES[vehicle]}: {out / 'report.json'} does not hold the episodes asked for")
    return report


def successes(run: dict[str, Any]) -> list[bool]:
    return [e["outcome"] == "success" for e in sorted(run["episodes"], key=lambda e: e["seed"])]


def row(
    vehicle: str, report: dict[str, Any], run: dict[str, Any], reports: dict[str, dict[str, Any]], i: int
) -> dict[str, Any]:
    won = successes(run)
    n, k = len(won), sum(won)
    low, high = wilson_interval(k, n)
    goals = [e["steps"] for e in run["episodes"] if e["outcome"] == "success"]
    failures = [f"{e['outcome']} in {e['seed']}" for e in run["episodes"] if e["outcome"] != "success"]
    against = {}
    for base in SIMULATED:
        if base != vehicle and base in reports:
            against[base] = paired_difference(successes(reports[base]["runs"][i]), won)
    return {
        "vehicle": vehicle,
        "policy": run["policy"],
        "episodes": n,
        "successes": k,
        "success_rate": k / n,
        "wilson_low": low,
        "wilson_high": high,
        "failures": failures,
        "outcomes": {str(e["seed"]): e["outcome"] for e in sorted(run["episodes"], key=lambda e: e["seed"])},
        "mean_steps_to_goal": sum(goals) / len(goals) if goals else None,
        "actuation_hz": run["actuation_hz"] if vehicle not in SIMULATED else None,
        "round_trip_us": {q: run["round_trip_us"][q] for q in ("p50", "p99")},
        "device_inference_us_p50": run["device_inference_us"]["p50"],
        "vehicle_link_errors": run["reliability"].get("vehicle_link_errors", 0),
        "deadline_misses": run["deadline_misses"],
        "against": against,
        "autopilot": {k: report["vehicle"][k] for k in ("autopilot", "firmware", "frame", "clock_speed")
                      if k in report.get("vehicle", {})} if vehicle not in SIMULATED else None,
    }  # fmt: skip


def table(a: Args, reports: dict[str, dict[str, Any]]) -> dict[str, Any]:
    rows = [row(v, reports[v], run, reports, i) for i in range(len(a.models)) for v in reports
            for run in [reports[v]["runs"][i]]]  # fmt: skip
    any_report = next(iter(reports.values()))
    return {
        "command": "python -m " + PROG + " " + " ".join(sys.argv[1:]),
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(a).items()},
        "device": any_report.get("device"),
        "host_versions": any_report.get("host_versions"),
        "rows": rows,
    }


def pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def markdown(data: dict[str, Any]) -> str:
    head = ("| policy | flown by | success (Wilson 95%) | against the embedded simulator | against the MuJoCo quadrotor "
            "| failures | mean steps to the goal | act rate | round trip p50 / p99 |")  # fmt: skip
    lines = [head, "|" + "---|" * 9]
    for r in data["rows"]:
        vs = []
        for base in SIMULATED:
            d = r["against"].get(base)
            vs.append(
                "-"
                if d is None
                else f"{100 * d['diff']:+.1f} ({100 * d['low']:+.1f}..{100 * d['high']:+.1f}), p = {d['mcnemar_p']:.2g}"
            )
        fails = ", ".join(r["failures"]) if r["failures"] else "-"
        steps = "-" if r["mean_steps_to_goal"] is None else f"{r['mean_steps_to_goal']:.1f}"
        hz = "(lockstep)" if r["actuation_hz"] is None else f"{r['actuation_hz']:.2f} Hz"
        rtt = f"{r['round_trip_us']['p50']:.0f} / {r['round_trip_us']['p99']:.0f} us"
        lines.append(
            f"| {Path(r['policy']).stem} | {NAMES[r['vehicle']]} | {r['successes']} / {r['episodes']}, "
            f"{pct(r['success_rate'])} ({pct(r['wilson_low'])}-{pct(r['wilson_high'])}) | {vs[0]} | {vs[1]} | {fails} "
            f"| {steps} | {hz} | {rtt} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    for vehicle in ("ardupilot", "px4"):
        binary = a.ardupilot if vehicle == "ardupilot" else a.px4
        if binary:
            try:
                check_binary(vehicle, binary, a.ardupilot_params)
            except ValueError as e:
                raise UserError(f"--{vehicle}: {e}") from None
    for m in a.models:
        if not Path(m).is_file():
            raise UserError(f"--models: {m} is not a file")
    if not only_loopback():
        raise UserError("SITL listens on every interface: run this in a private network namespace "
                        f"(sudo unshare -n python -m {PROG} ...)")  # fmt: skip
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    a.out.mkdir(parents=True, exist_ok=True)
    reports = {v: fly(a, v) for v in vehicles(a)}
    data = table(a, reports)
    write_json(a.out / "autopilot_table.json", data)
    write_atomic(a.out / "autopilot_table.md", markdown(data).encode())
    print(markdown(data), end="")
    print(f"table: {a.out / 'autopilot_table.md'} (+ autopilot_table.json)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
