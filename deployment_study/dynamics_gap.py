"""The gap between nav_env's kinematic vehicle and the rigid-body quadrotor, flown by the shipped policies.

    python -m deployment_study.dynamics_gap [--episodes 1000] [--levels default hard] [--seed 0]
        [--sweep-ms 0 50 100 200 300 500] [--sweep-episodes 300] [--trained-in-mujoco MODEL ...]
        [--out out/dynamics_gap]

1. **Backends**: every model flies the same seeded episodes (episode j is seed SEED + j on every simulator) on
   the embedded backend, on the embedded backend with the kinematic model's ``vehicle.tau`` fitted to the
   quadrotor (nav_env.dynamics.identify: before/after a system identification), and on the mujoco backend.
   Per model: success on each, the paired difference mujoco - embedded (Newcombe's interval, McNemar's exact
   p), and the mean time to goal over the episodes both simulators fly to the goal.
2. **Latency**: Policy I fp32 and int8 with every action landing a fixed delay (0-500 ms, the latency contract
   of nav_env.env), on both backends, level default.
3. **Trained in MuJoCo** (``--trained-in-mujoco``, fp32/int8 of a policy trained in the mujoco backend): flown
   as in 1, beside the shipped Policy I.

Each cell (model, level, simulator, delay) is saved under OUT/cells/ when it finishes, so a rerun goes on where
one stopped; gap.json and gap.md are written atomically at the end.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import hashlib
import json
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from airq_cli import ArgumentParser, UserError, output_dir, run, write_atomic, write_json
from firmware_bridge.device import cpu_model, format_versions, package_versions
from nav_env.backends import get_backend
from nav_env.config import load_level, with_policy_observation
from nav_env.dynamics.config import load_dynamics
from nav_env.dynamics.identify import identify
from nav_env.latency import offline_latency
from nav_env.rollout import run_episodes
from nav_env.stats import paired_difference, wilson_interval
from policies.loading import check_obs_dim, load_policy

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = [str(ROOT / "models" / f"policy{i}_{p}.onnx") for i in (1, 2, 3) for p in ("fp32", "int8")]
SWEEP_MODELS = [str(ROOT / "models" / f"policy1_{p}.onnx") for p in ("fp32", "int8")]


@dataclass
class GapArgs:
    models: list[str] = field(default_factory=lambda: list(SHIPPED))
    levels: list[str] = field(default_factory=lambda: ["default", "hard"])
    episodes: int = 1000
    seed: int = 0
    num_envs: int = 32
    sweep_ms: list[float] = field(default_factory=lambda: [0.0, 50.0, 100.0, 200.0, 300.0, 500.0])
    sweep_episodes: int = 300
    sweep_models: list[str] = field(default_factory=lambda: list(SWEEP_MODELS))
    trained_in_mujoco: list[str] = field(default_factory=list)
    dynamics: str | None = None  # a dynamics TOML for the mujoco backend (default: nav_env/dynamics/iris.toml)
    out: str = "out/dynamics_gap"


@dataclass(frozen=True)
class Cell:
    """One model's seeded episodes on one simulator: per-episode outcome and flight time."""

    model: str
    level: str
    simulator: str  # embedded, embedded-fitted, mujoco
    delay_ms: float | None  # None: lockstep
    tau_s: float  # the embedded vehicle's tau (mujoco: the level's, unused)
    success: list[bool]
    collision: list[bool]
    flight_time_s: list[float]
    wall_s: float
    # the airframe's tilt per episode (mean and largest over its control periods, deg); empty on the point mass
    tilt_mean_deg: list[float] = field(default_factory=list)
    tilt_max_deg: list[float] = field(default_factory=list)


def _cell_path(out: Path, key: dict[str, Any]) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return out / "cells" / f"{Path(key['model']).stem}_{key['level']}_{key['simulator']}_{digest}.json"


def fly(
    out: Path, model: str, level: str, simulator: str, episodes: int, seed: int, num_envs: int, tau: float,
    delay_ms: float | None = None, dynamics: str | None = None,
) -> Cell:  # fmt: skip
    """The cell, from OUT/cells/ if an earlier run finished it, else flown now (and saved)."""
    key = {"model": model, "sha256": _sha256(model), "level": level, "simulator": simulator, "episodes": episodes,
           "seed": seed, "tau": tau, "delay_ms": delay_ms}  # fmt: skip
    # a cell's simulator is its backend, a variant after "-" (embedded-fitted: the embedded vehicle, the fitted tau)
    backend = get_backend(simulator.split("-")[0])
    if backend.dynamics_config:
        key["records"] = ["tilt"]  # a cell saved before the tilt was recorded is flown again
        if dynamics is not None:
            key["dynamics"] = {"path": dynamics, "sha256": _sha256(dynamics)}
    path = _cell_path(out, key)
    if path.is_file():
        return Cell(**json.loads(path.read_text())["cell"])

    cfg = load_level(level, {"vehicle.tau": tau})
    policy = load_policy(model, "best", cfg)
    cfg = with_policy_observation(cfg, policy.metadata)
    check_obs_dim(policy, cfg.obs_dim, cfg.level)
    latency = offline_latency(f"fixed:{delay_ms:g}") if delay_ms else None
    t0 = time.perf_counter()
    results = sorted(
        run_episodes(
            policy.act,
            cfg,
            episodes,
            seed,
            num_envs,
            latency,
            backend.name,
            dynamics if backend.dynamics_config else None,
        ),
        key=lambda r: r.episode,
    )
    cell = Cell(
        model=model, level=level, simulator=simulator, delay_ms=delay_ms, tau_s=tau,
        success=[r.success for r in results], collision=[r.outcome == "collision" for r in results],
        flight_time_s=[float(r.flight_time or 0.0) for r in results], wall_s=round(time.perf_counter() - t0, 1),
        tilt_mean_deg=[r.tilt["mean_deg"] for r in results if r.tilt is not None],
        tilt_max_deg=[r.tilt["max_deg"] for r in results if r.tilt is not None],
    )  # fmt: skip
    write_json(path, {"key": key, "cell": asdict(cell)})
    return cell


def _sha256(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def tilt_of(cell: Cell) -> dict[str, float | None]:
    """The cell's tilt over its episodes: the mean of each episode's mean and of each episode's largest (deg); None
    on the point mass, which flies level."""
    if not cell.tilt_mean_deg:
        return {"tilt_mean_deg": None, "tilt_max_deg": None}
    return {"tilt_mean_deg": float(np.mean(cell.tilt_mean_deg)), "tilt_max_deg": float(np.mean(cell.tilt_max_deg))}


def compare(first: Cell, second: Cell) -> dict[str, Any]:
    """Success of each, the paired difference second - first, and mean time to goal where both reach it."""
    a, b = np.array(first.success), np.array(second.success)
    both = a & b
    t1, t2 = np.array(first.flight_time_s)[both], np.array(second.flight_time_s)[both]
    n = len(a)
    return {
        "first": {"success": float(a.mean()), "ci95": wilson_interval(int(a.sum()), n),
                  "collision": float(np.mean(first.collision)), **tilt_of(first)},
        "second": {"success": float(b.mean()), "ci95": wilson_interval(int(b.sum()), n),
                   "collision": float(np.mean(second.collision)), **tilt_of(second)},
        "paired": paired_difference(a, b),
        "both_reach_goal": int(both.sum()),
        "time_to_goal_s": [float(t1.mean()), float(t2.mean())] if both.any() else None,
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="python -m deployment_study.dynamics_gap", description=__doc__.split("\n")[0])
    p.add_argument("--models", nargs="+", metavar="ONNX", help="default: Policies I-III, fp32 and int8")
    p.add_argument("--levels", nargs="+")
    p.add_argument("--episodes", type=int)
    p.add_argument("--seed", type=int)
    p.add_argument("--num-envs", type=int)
    p.add_argument("--sweep-ms", nargs="*", type=float, help="fixed delays of the latency sweep (none: no sweep)")
    p.add_argument("--sweep-episodes", type=int)
    p.add_argument("--sweep-models", nargs="+", metavar="ONNX")
    p.add_argument("--trained-in-mujoco", nargs="+", metavar="ONNX", help="Policy I trained in the mujoco backend")
    p.add_argument(
        "--dynamics", metavar="TOML", help="the mujoco backend's airframe and controller (default: the Iris)"
    )
    p.add_argument("--out", type=output_dir)
    ns = {k: v for k, v in vars(p.parse_args(argv)).items() if v is not None}
    args = GapArgs(**ns)
    if args.episodes < 1 or args.sweep_episodes < 1 or args.num_envs < 1:
        raise UserError("--episodes, --sweep-episodes and --num-envs must be >= 1")
    for m in [*args.models, *args.sweep_models, *args.trained_in_mujoco]:
        if not Path(m).is_file():
            raise UserError(f"model not found: {m}")

    dyn = load_dynamics(args.dynamics)  # a bad file: one line, before any flying
    if any(d < 0 for d in args.sweep_ms):
        raise UserError(f"--sweep-ms must be >= 0, got {args.sweep_ms}")

    out = Path(args.out)
    ident = identify(dyn)
    t_start = time.perf_counter()
    result: dict[str, Any] = {
        "command": "python -m deployment_study.dynamics_gap " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "args": asdict(args),
        "identification": asdict(ident),
        "machine": {"cpu": cpu_model(), "cores": os.cpu_count()},
        "versions": package_versions(),
        "backends": [],
        "sweep": [],
        "trained_in_mujoco": [],
    }
    fitted = round(ident.velocity_tau_s["all"], 3)
    jobs = [(m, lvl) for lvl in args.levels for m in [*args.models, *args.trained_in_mujoco]]
    for k, (model, level) in enumerate(jobs, 1):
        tau = load_level(level).vehicle.tau
        cells = {
            "embedded": fly(out, model, level, "embedded", args.episodes, args.seed, args.num_envs, tau),
            "embedded-fitted": fly(
                out, model, level, "embedded-fitted", args.episodes, args.seed, args.num_envs, fitted
            ),
            "mujoco": fly(
                out, model, level, "mujoco", args.episodes, args.seed, args.num_envs, tau, None, args.dynamics
            ),
        }
        row: dict[str, Any] = {
            "model": Path(model).name, "level": level, "trained_in_mujoco": model in args.trained_in_mujoco,
            "vs_embedded": compare(cells["embedded"], cells["mujoco"]),
            "vs_fitted": compare(cells["embedded-fitted"], cells["mujoco"]),
            "wall_s": {s: c.wall_s for s, c in cells.items()},
        }  # fmt: skip
        result["backends"].append(row)
        v = row["vs_embedded"]
        print(
            f"[{k}/{len(jobs)}] {level} {Path(model).name}: embedded {v['first']['success']:.1%}, mujoco "
            f"{v['second']['success']:.1%} ({v['paired']['diff']:+.1%}), fitted tau {fitted} s "
            f"{row['vs_fitted']['first']['success']:.1%}",
            file=sys.stderr,
        )
    sweep_jobs = [(m, d) for m in args.sweep_models for d in args.sweep_ms]
    for k, (model, delay) in enumerate(sweep_jobs, 1):
        tau = load_level("default").vehicle.tau
        emb = fly(out, model, "default", "embedded", args.sweep_episodes, args.seed, args.num_envs, tau, delay or None)
        rigid = fly(
            out, model, "default", "mujoco", args.sweep_episodes, args.seed, args.num_envs, tau, delay or None,
            args.dynamics,
        )  # fmt: skip
        c = compare(emb, rigid)
        result["sweep"].append({"model": Path(model).name, "delay_ms": delay, "compare": c})
        print(
            f"[sweep {k}/{len(sweep_jobs)}] {Path(model).name} {delay:g} ms: embedded {c['first']['success']:.1%}, "
            f"mujoco {c['second']['success']:.1%}",
            file=sys.stderr,
        )
    result["wall_s"] = round(time.perf_counter() - t_start, 1)
    write_json(out / "gap.json", result)
    md = render_markdown(result)
    write_atomic(out / "gap.md", md.encode())
    print(md)
    print(f"wrote {out / 'gap.json'} and {out / 'gap.md'}")
    return 0


def _pct(x: float) -> str:
    return f"{x:.1%}"


def render_markdown(r: dict[str, Any]) -> str:
    ident = r["identification"]
    a = r["args"]
    lines = [
        "# The kinematic vehicle against the rigid-body quadrotor",
        "",
        f"`{r['command']}` - {r['date']}; {r['machine']['cpu']} ({r['machine']['cores']} cores); "
        f"{format_versions(r['versions'])}",
        "",
        f"Episodes: seeds {a['seed']}-{a['seed'] + a['episodes'] - 1} on every simulator (the latency sweep: the "
        f"first {a['sweep_episodes']}). Fitted tau: {ident['velocity_tau_s']['all']:.3f} s, the kinematic model's "
        f"time constant fitted to the quadrotor's velocity steps (the level's: {ident['embedded_tau_s']:.3f} s; "
        "`python -m nav_env.dynamics.identify`). The quadrotor: "
        f"{a['dynamics'] or 'nav_env/dynamics/iris.toml'}.",
        "",
        "| level | model | embedded | embedded, fitted tau | mujoco | mujoco - embedded (95% CI), McNemar p | "
        "mujoco - fitted | collisions emb. / mujoco | time to goal emb. / mujoco (s) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in r["backends"]:
        v, f = row["vs_embedded"], row["vs_fitted"]
        pd, pf = v["paired"], f["paired"]
        ttg = v["time_to_goal_s"]
        name = row["model"] + (" (trained in mujoco)" if row["trained_in_mujoco"] else "")
        lines.append(
            f"| {row['level']} | {name} | {_pct(v['first']['success'])} | {_pct(f['first']['success'])} | "
            f"{_pct(v['second']['success'])} | {pd['diff']:+.1%} ({pd['low']:+.1%} to {pd['high']:+.1%}), "
            f"p={pd['mcnemar_p']:.2g} | {pf['diff']:+.1%} (p={pf['mcnemar_p']:.2g}) | "
            f"{_pct(v['first']['collision'])} / {_pct(v['second']['collision'])} | "
            + (f"{ttg[0]:.2f} / {ttg[1]:.2f} |" if ttg else "- |")
        )
    if r["sweep"]:
        lines += [
            "",
            "Latency sweep (level default; every action lands the delay late, nav_env's latency contract):",
            "",
            "| model | delay (ms) | embedded | mujoco | mujoco - embedded (95% CI) | collisions emb. / mujoco | "
            "mujoco tilt: mean / largest per episode (deg) |",
            "|---|---|---|---|---|---|---|",
        ]
        for row in r["sweep"]:
            c = row["compare"]
            pd = c["paired"]
            quad = c["second"]
            tilt = (
                f"{quad['tilt_mean_deg']:.1f} / {quad['tilt_max_deg']:.1f}"
                if quad.get("tilt_mean_deg") is not None
                else "-"
            )
            lines.append(
                f"| {row['model']} | {row['delay_ms']:g} | {_pct(c['first']['success'])} | "
                f"{_pct(c['second']['success'])} | {pd['diff']:+.1%} ({pd['low']:+.1%} to {pd['high']:+.1%}) | "
                f"{_pct(c['first']['collision'])} / {_pct(quad['collision'])} | {tilt} |"
            )
    lines += ["", f"Wall time {r['wall_s'] / 60:.1f} min (cells flown in earlier runs are read back, not timed)."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(run(main))
