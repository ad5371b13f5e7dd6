"""Closed-loop speed of the HIL loop, sim-only, free-running, one env, TCP loopback.

    python -m hil.bench [--policy FILE ...] [--episodes 20] [--level default] [--out FILE]

For each policy it runs the real loop (bridge as a separate process, mock flight controller) and,
in the same run on the same seeded episodes, a baseline loop with onnxruntime inside the host
process (no bridge). It reports the closed-loop actuation rate, round trip, device inference and the
bridge's own overhead (round trip minus inference), and the ratio of the two loops' rates.
Without --policy it takes the shipped models that exist among models/policy{1,2,3}_{fp32,int8}.onnx.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from hil.client import BridgeError
from hil.loop import run_closed_loop
from hil.profiles import get_profile
from hil.report import percentiles_us, summarize_run
from hil.run import Device, RunArgs
from nav_env.config import ConfigError, load_level
from nav_env.env import NavEnv
from nav_env.render import write_atomic

SHIPPED = [f"models/policy{i}_{p}.onnx" for i in (1, 2, 3) for p in ("fp32", "int8")]


def in_process_rate(path: str, cfg, episodes: int, seed: int) -> tuple[float, dict]:
    """Steps/s of the same loop with the policy run by onnxruntime in this process."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    env = NavEnv(config=cfg)
    steps, loop_s, infer = 0, 0.0, []
    for j in range(episodes):
        obs, _ = env.reset(seed=seed + j)
        t0, done = time.perf_counter(), False
        while not done:
            t = time.perf_counter_ns()
            out = sess.run(None, {"obs": obs[None]})
            infer.append(time.perf_counter_ns() - t)
            action = int(out[names.index("action")][0]) if "action" in names else int(np.argmax(out[0][0]))
            obs, _, terminated, truncated, _ = env.step(action)
            done = terminated or truncated
            steps += 1
        loop_s += time.perf_counter() - t0
    return steps / loop_s, percentiles_us(infer)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hil.bench", description=__doc__.split("\n")[0])
    p.add_argument("--policy", action="append", help="ONNX policy (repeatable); default: the shipped models present")
    p.add_argument("--episodes", type=int, default=20)
    p.add_argument("--level", default="default")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="write the figures as JSON here")
    a = p.parse_args(argv)
    policies = a.policy or [m for m in SHIPPED if Path(m).is_file()]
    if not policies:
        print("error: no policy given and no shipped model found in models/; pass --policy FILE", file=sys.stderr)
        return 2
    missing = [m for m in policies if not Path(m).is_file()]
    if missing or a.episodes < 1:
        print(f"error: policy file not found: {missing[0]}" if missing else "error: --episodes must be >= 1", file=sys.stderr)
        return 2
    try:
        cfg = load_level(a.level)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    rows = []
    try:
        for path in policies:
            args = RunArgs(policy=[path], sim_only=True, level=a.level, episodes=a.episodes, seed=a.seed)
            with Device(args, get_profile("native")) as client:
                client.hello()
                load = client.load_policy(path)
                rec = run_closed_loop(client, cfg, a.episodes, a.seed, keep_trajectories=0)
            run = summarize_run(path, rec, load)
            local_hz, local_infer = in_process_rate(path, cfg, a.episodes, a.seed)
            rows.append({
                "policy": path, "steps": run["steps"], "actuation_hz": run["actuation_hz"], "in_process_hz": local_hz,
                "closed_loop_over_in_process": run["actuation_hz"] / local_hz,
                "round_trip_us": run["round_trip_us"], "device_inference_us": run["device_inference_us"],
                "overhead_us": run["overhead_us"], "in_process_inference_us": local_infer,
                "success_rate": run["outcomes"]["success_rate"],
            })
    except BridgeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    from nav_env.bench import _cpu_name

    print(f"hil.bench: sim-only, TCP loopback, free-running, one env, level {a.level}, {a.episodes} episodes; {_cpu_name()}")
    print(f"{'policy':<32}{'steps':>7}{'loop Hz':>9}{'in-proc Hz':>11}{'ratio':>7}{'rtt p50':>9}{'rtt p99':>9}{'infer p50':>10}{'ovh p50':>9}{'ovh p99':>9}")
    for r in rows:
        print(f"{Path(r['policy']).name:<32}{r['steps']:>7}{r['actuation_hz']:>9,.0f}{r['in_process_hz']:>11,.0f}"
              f"{r['closed_loop_over_in_process']:>7.2f}{r['round_trip_us']['p50']:>9.0f}{r['round_trip_us']['p99']:>9.0f}"
              f"{r['device_inference_us']['p50']:>10.1f}{r['overhead_us']['p50']:>9.0f}{r['overhead_us']['p99']:>9.0f}")
    print("Hz = env steps per second of flying; ratio = closed loop (bridge over TCP) / in-process onnxruntime; us = microseconds")
    if a.out:
        write_atomic(a.out, json.dumps({"level": a.level, "episodes": a.episodes, "cpu": _cpu_name(), "rows": rows}, indent=1).encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
