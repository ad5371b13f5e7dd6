"""Closed-loop speed of the HIL loop, sim-only, free-running, one env, TCP loopback.

    python -m hil.bench [--policy FILE ...] [--episodes 20] [--repeats 3] [--spin-us US ...] [--out FILE]

For each policy it runs the real loop (bridge as a separate process, mock flight controller) and,
in the same run on the same seeded episodes, a baseline loop with onnxruntime inside the host
process (no bridge). It reports the closed-loop actuation rate, round trip, device inference and the
bridge's own overhead (round trip minus inference), and the closed loop's rate over the in-process
loop's and over the echo loop's (below).

Right after each closed loop the same client code flies the same number of steps against a bare
ZeroMQ + msgpack echo process (``firmware_bridge.bench --echo-server``: unpack, answer, nothing else),
so "overhead" can be read against the price of the transport itself, measured under the same
conditions (an env step between messages) in the same minute. Everything is repeated ``--repeats``
times, interleaved, and the overhead is reported per repeat: a distribution, not one lucky run.
``--spin-us`` given more than once compares client reply-wait strategies (firmware_bridge.client) A/B in the
same run, alternating their order from repeat to repeat.
Without --policy it takes the shipped models that exist among models/policy{1,2,3}_{fp32,int8}.onnx.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from airq_cli import EXIT_FAILURE, MISSING, ArgumentParser, UserError, error_line, output_file, run, write_json
from device_emulation.profiles import get_profile
from firmware_bridge.bench import EchoProcess, percentiles_us
from firmware_bridge.client import DEFAULT_SPIN_US, BridgeClient, BridgeError
from firmware_bridge.device import cpu_model, format_versions, package_versions
from firmware_bridge.int8_kernels import int8_kernels
from hil.loop import ControlLink, default_deadline_s, failsafe_action, run_closed_loop
from hil.report import summarize_run
from hil.session import BridgeSession
from hil.setup import LocalBridge
from nav_env.config import NavConfig, load_level
from nav_env.env import NavEnv

SHIPPED = [f"models/policy{i}_{p}.onnx" for i in (1, 2, 3) for p in ("fp32", "int8")]
ECHO_MAX_ACTS = 5000  # the echo loop flies as many steps as the closed loop did, up to this


def in_process_rate(path: str, cfg: NavConfig, episodes: int, seed: int) -> tuple[float, dict]:
    """Steps/s of the same loop with the policy run by the bridge's own inference code (one onnxruntime thread)
    in this process: no transport, no bridge."""
    # deferred: onnxruntime (through firmware_bridge.policy): a bad argument is reported before it loads
    from firmware_bridge.policy import load_policy_file

    policy = load_policy_file(path, threads=1)
    env = NavEnv(config=cfg)
    steps, loop_s, infer = 0, 0.0, []
    for j in range(episodes):
        obs, _ = env.reset(seed=seed + j)
        t0, done = time.perf_counter(), False
        while not done:
            t = time.perf_counter_ns()
            action, _, _ = policy.act(obs[None])
            infer.append(time.perf_counter_ns() - t)
            obs, _, terminated, truncated, _ = env.step(action)
            done = terminated or truncated
            steps += 1
        loop_s += time.perf_counter() - t0
    return steps / loop_s, percentiles_us(infer)


def echo_loop(client: BridgeClient, cfg: NavConfig, acts: int, seed: int) -> tuple[list[int], int, float]:
    """(round trips in ns, deadline misses, steps/s) of ``acts`` steps of the closed loop's act path
    against the echo.

    The same ControlLink.act and env.step per step as the real loop; the echo answers action 0 and
    the vehicle is flown with hover, since only the timing of the exchange matters here. A miss (only
    on a badly overloaded machine) counts like in the real loop and has no round trip. The rate counts
    the steps' time only, as the closed loop's actuation rate does (resets excluded).
    """
    env = NavEnv(config=cfg)
    link = ControlLink(client, default_deadline_s(cfg, None))
    hover = failsafe_action(cfg)
    rtt: list[int] = []
    obs, _ = env.reset(seed=seed)
    episode, flying_ns = 0, 0
    t0 = time.perf_counter_ns()
    for _ in range(acts):
        result = link.act(obs)
        if result is not None:
            rtt.append(result.rtt_ns)
        obs, _, terminated, truncated, _ = env.step(hover)
        if terminated or truncated:
            flying_ns += time.perf_counter_ns() - t0
            episode += 1
            obs, _ = env.reset(seed=seed + episode)
            t0 = time.perf_counter_ns()
    flying_ns += time.perf_counter_ns() - t0
    if not rtt:
        raise BridgeError(client.endpoint, f"echo server at {client.endpoint} answered none of {acts} acts in time")
    return rtt, link.stats.deadline_misses, acts / (flying_ns / 1e9)


def _median(values: list[float]) -> float:
    return float(np.median(values)) if values else math.nan


def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="python -m hil.bench", description=__doc__.split("\n")[0])
    p.add_argument("--policy", action="append", help="ONNX policy (repeatable); default: the shipped models present")
    p.add_argument("--episodes", type=int, default=20)
    p.add_argument("--repeats", type=int, default=3, help="closed loop + echo runs per policy, interleaved (default 3)")
    p.add_argument(
        "--spin-us",
        type=float,
        action="append",
        help=f"client reply wait: check without blocking this long first (default {DEFAULT_SPIN_US:g}); "
        "repeat the flag to compare values A/B in the same run",
    )
    p.add_argument("--no-echo", action="store_true", help="skip the bare ZeroMQ + msgpack echo loops")
    p.add_argument("--level", default="default")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=output_file, help="write the figures as JSON here")
    a = p.parse_args(argv)
    policies = a.policy or [m for m in SHIPPED if Path(m).is_file()]
    if not policies:
        raise UserError("no policy given and no shipped model found in models/; pass --policy FILE")
    missing = [m for m in policies if not Path(m).is_file()]
    spins = a.spin_us or [DEFAULT_SPIN_US]
    problem = (
        f"policy file not found: {missing[0]}"
        if missing
        else "--episodes must be >= 1"
        if a.episodes < 1
        else "--repeats must be >= 1"
        if a.repeats < 1
        else "--spin-us must be >= 0 microseconds"
        if not all(s >= 0 for s in spins)
        else "--spin-us values must differ"
        if len(set(spins)) != len(spins)
        else None
    )
    if problem:
        raise UserError(problem)
    cfg = load_level(a.level)
    runs: dict[tuple[str, float], list[dict[str, Any]]] = {(path, s): [] for path in policies for s in spins}
    samples: dict[tuple[str, float], dict[str, list[int]]] = {key: {"rtt": [], "infer": [], "echo": []} for key in runs}
    echo = echo_client = None
    native = get_profile("native")
    try:
        if not a.no_echo:
            echo = EchoProcess().start()
            echo_client = BridgeClient(echo.endpoint, timeout_s=5.0)
        for rep in range(a.repeats):
            order = spins if rep % 2 == 0 else spins[::-1]
            for path in policies:
                with BridgeSession(LocalBridge(native, native.threads), timeout_s=1.0) as client:
                    client.hello()
                    load = client.load_policy(path)
                    for spin in order:
                        client.spin_ns = int(spin * 1000)
                        rec = run_closed_loop(client, cfg, a.episodes, a.seed, keep_trajectories=0)
                        run = summarize_run(path, rec, load)
                        row = {
                            "repeat": rep,
                            "actuation_hz": run.actuation_hz,
                            "steps": run.steps,
                            "deadline_misses": run.deadline_misses,
                            "overhead_p50_us": run.overhead_us["p50"],
                            "round_trip_p50_us": run.round_trip_us["p50"],
                            "device_inference_p50_us": run.device_inference_us["p50"],
                            "success_rate": run.outcomes["success_rate"],
                        }
                        got = samples[(path, spin)]
                        got["rtt"] += rec.rtt_ns
                        got["infer"] += rec.infer_ns
                        if echo_client is not None:
                            echo_client.spin_ns = int(spin * 1000)
                            echo_rtt, echo_misses, echo_hz = echo_loop(
                                echo_client, cfg, min(len(rec.rtt_ns), ECHO_MAX_ACTS), a.seed
                            )
                            got["echo"] += echo_rtt
                            row["echo_round_trip_p50_us"] = percentiles_us(echo_rtt)["p50"]
                            row["echo_deadline_misses"] = echo_misses
                            row["echo_hz"] = echo_hz
                        runs[(path, spin)].append(row)
                local_hz, local_infer = in_process_rate(path, cfg, a.episodes, a.seed)
                for spin in spins:
                    runs[(path, spin)][-1]["in_process_hz"] = local_hz
                    runs[(path, spin)][-1]["in_process_inference_p50_us"] = local_infer["p50"]
    except BridgeError as e:
        print(error_line(e), file=sys.stderr)
        return EXIT_FAILURE
    finally:
        if echo_client is not None:
            echo_client.close()
        if echo is not None:
            echo.close()
    rows = [
        summarize_rows(path, spin, runs[(path, spin)], samples[(path, spin)]) for path in policies for spin in spins
    ]
    print_table(rows, a, spins)
    if a.out:
        machine = {"cpu": cpu_model(), "int8_kernels": int8_kernels().as_dict(), "versions": package_versions()}
        write_json(a.out, {"level": a.level, "episodes": a.episodes, "repeats": a.repeats, **machine, "rows": rows})
    return 0


def summarize_rows(path: str, spin: float, reps: list[dict[str, Any]], got: dict[str, list[int]]) -> dict[str, Any]:
    """One (policy, spin) row: medians across repeats, and pooled percentiles of every act."""
    hz = _median([r["actuation_hz"] for r in reps])
    local_hz = _median([r["in_process_hz"] for r in reps])
    overhead = [r - i for r, i in zip(got["rtt"], got["infer"])]
    ovh_by_rep = [r["overhead_p50_us"] for r in reps]
    echo_by_rep = [r["echo_round_trip_p50_us"] for r in reps if "echo_round_trip_p50_us" in r]
    row: dict[str, Any] = {
        "policy": path,
        "spin_us": spin,
        "repeats": reps,
        "steps": reps[0]["steps"],
        "actuation_hz": hz,
        "in_process_hz": local_hz,
        "closed_loop_over_in_process": hz / local_hz,
        "round_trip_us": percentiles_us(got["rtt"]),
        "device_inference_us": percentiles_us(got["infer"]),
        "overhead_us": percentiles_us(overhead),
        "overhead_p50_us_by_repeat": ovh_by_rep,
        "in_process_inference_us": {"p50": _median([r["in_process_inference_p50_us"] for r in reps])},
        "success_rate": reps[0]["success_rate"],
    }
    if echo_by_rep:
        echo_hz = _median([r["echo_hz"] for r in reps])
        row["echo_hz"] = echo_hz
        row["closed_loop_over_echo"] = hz / echo_hz
        row["echo_round_trip_us"] = percentiles_us(got["echo"])
        row["echo_round_trip_p50_us_by_repeat"] = echo_by_rep
        # Per repeat, measured minutes apart at most: the bridge's price over the bare transport.
        row["overhead_minus_echo_p50_us_by_repeat"] = [o - e for o, e in zip(ovh_by_rep, echo_by_rep)]
    return row


def print_table(rows: list[dict[str, Any]], a: argparse.Namespace, spins: list[float]) -> None:
    print(
        f"hil.bench: sim-only, TCP loopback, free-running, one env, level {a.level}, {a.episodes} episodes "
        f"x {a.repeats} repeat(s); {cpu_model()}: {int8_kernels().describe()}; {format_versions(package_versions())}"
    )
    spin_col = len(spins) > 1
    print(
        f"{'policy':<24}{'spin':>6}" * spin_col
        + f"{'policy':<24}" * (not spin_col)
        + f"{'steps':>6}{'loop Hz':>8}{'in-proc Hz':>11}{'ratio':>6}{'echo Hz':>8}{'ratio':>6}{'rtt p50':>8}"
        f"{'infer p50':>10}{'ovh p50 (min-max)':>19}{'ovh p99':>8}{'echo p50 (min-max)':>19}"
    )
    for r in rows:
        ovh = r["overhead_p50_us_by_repeat"]
        echo = r.get("echo_round_trip_p50_us_by_repeat") or []
        echo_text = f"{_median(echo):.0f} ({min(echo):.0f}-{max(echo):.0f})" if echo else MISSING
        echo_hz = f"{r['echo_hz']:,.0f}" if "echo_hz" in r else MISSING
        echo_ratio = f"{r['closed_loop_over_echo']:.2f}" if "closed_loop_over_echo" in r else MISSING
        print(
            f"{Path(r['policy']).name:<24}"
            + (f"{r['spin_us']:>6g}" if spin_col else "")
            + f"{r['steps']:>6}{r['actuation_hz']:>8,.0f}{r['in_process_hz']:>11,.0f}"
            f"{r['closed_loop_over_in_process']:>6.2f}{echo_hz:>8}{echo_ratio:>6}"
            f"{r['round_trip_us']['p50']:>8.0f}{r['device_inference_us']['p50']:>10.1f}"
            f"{f'{_median(ovh):.0f} ({min(ovh):.0f}-{max(ovh):.0f})':>19}{r['overhead_us']['p99']:>8.0f}{echo_text:>19}"
        )
    print(
        "Hz = env steps per second of flying (median of repeats); ratio = closed loop (bridge over TCP) / in-process "
        "onnxruntime, then / the echo loop (the same loop against a bare ZeroMQ + msgpack echo: no policy, no bridge); "
        "ovh = round trip - device inference, p50 of each repeat: median (min-max); echo p50 = that loop's round trip, "
        "per repeat; spin = client reply wait (us); us = microseconds"
    )


if __name__ == "__main__":
    sys.exit(run(main))
