"""The control loop over a broken link, and the device watchdog: the figures of docs/reliability.md, "Measured".

Run from the repo root, as root (network namespace, nftables; the Debian packages iproute2 and nftables):

    .venv/bin/python scripts/network_faults.py                   # the watchdog and the four link rows, ~3.5 min
    .venv/bin/python scripts/network_faults.py --only watchdog   # no root needed

Prints the machine (CPU model, its int8 instructions, the int8 kernel probe) and the package versions, then
one line per scenario. The link is made as in tests/reliability/test_network_faults.py (whose helpers are
used): the bridge in its own network namespace behind a veth pair, packet loss by nftables inside it,
delay and jitter by the userspace proxy fault_proxy.py; hil.run flies a toy 1032-32-25 fp32 MLP on level
easy. The watchdog: a bridge with --hold-timeout-ms 200 gets one act, then none; the time from that act
to the hover command is read from the bridge's status (actuator last_command_ns / last_hold_ns).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "reliability")]

import numpy as np  # noqa: E402
import zmq  # noqa: E402
from fault_proxy import FaultProxy  # noqa: E402
from netns_link import NetnsLink, netns_unavailable_reason  # noqa: E402
from reliability_helpers import NAV_OBS_DIM, hil_run_command  # noqa: E402

from firmware_bridge.device import cpu_model, format_versions, package_versions  # noqa: E402
from firmware_bridge.int8_kernels import int8_kernels  # noqa: E402
from firmware_bridge.launcher import BridgeProcess  # noqa: E402
from firmware_bridge.protocol import act_request, pack, status_request, unpack  # noqa: E402
from firmware_bridge.toy_policy import build_mlp_policy  # noqa: E402

# (one-way delay ms, jitter +- ms, loss %, rate Hz): the rows of docs/reliability.md's table
LINK_SCENARIOS = ((50, 20, 5, 5), (50, 20, 10, 5), (25, 10, 5, 10), (50, 20, 5, 10))
RUN_TIMEOUT_S = 600


def machine_line() -> str:
    kernels = int8_kernels()
    return (
        f"machine: {cpu_model()}, {len(os.sched_getaffinity(0))} usable cores, "
        f"int8 instructions: {kernels.cpu_features}; {kernels.describe()}; kernel {platform.release()}\n"
        f"versions: {format_versions(package_versions())}\n"
        f"date: {datetime.datetime.now(datetime.UTC).strftime('%Y-%m-%d %H:%M UTC')}"
    )


def watchdog(policy: Path, trials: int) -> str:
    """Milliseconds from the last act to the hover command, over ``trials`` acts."""
    late_ms = []
    with BridgeProcess(["--policy", str(policy), "--hold-timeout-ms", "200", "--log-level", "warning"]) as bridge:
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(bridge.endpoint)

        def call(message: dict) -> dict:
            sock.send_multipart([b"", pack(message)])
            if not sock.poll(5000):
                raise RuntimeError("the bridge did not answer within 5 s")
            return unpack(sock.recv_multipart()[-1])

        obs = np.random.default_rng(0).random(NAV_OBS_DIM, dtype=np.float32)
        seq = 0
        for trial in range(trials):
            seq += 1
            reply = call(act_request(seq, obs))
            if reply.get("type") != "act":
                raise RuntimeError(f"act refused: {reply}")
            end = time.monotonic() + 5
            while True:
                seq += 1
                status = call(status_request(seq))
                if status["counters"]["holds"] == trial + 1:
                    break
                if time.monotonic() > end:
                    raise RuntimeError("no hold within 5 s of the last act")
                time.sleep(0.01)
            actuator = status["actuator"]
            late_ms.append((actuator["last_hold_ns"] - actuator["last_command_ns"]) / 1e6)
        sock.close(linger=0)
    return (
        f"watchdog (--hold-timeout-ms 200), {trials} trials: hover {min(late_ms):.0f}-{max(late_ms):.0f} ms "
        f"after the last setpoint (median {statistics.median(late_ms):.0f} ms)"
    )


def link_scenario(
    link: NetnsLink,
    bridge: BridgeProcess,
    policy: Path,
    scenario: tuple[int, int, int, int],
    episodes: int,
    max_steps: int,
    seed: int,
) -> str:
    delay_ms, jitter_ms, loss, rate_hz = scenario
    host, port = bridge.endpoint.removeprefix("tcp://").rsplit(":", 1)
    upstream = (host.strip("[]").removeprefix("::ffff:"), int(port))
    with tempfile.TemporaryDirectory(prefix="airq-netfault-") as tmp, FaultProxy(upstream, seed=seed) as proxy:
        proxy.set_latency(delay_ms / 1e3, jitter_ms / 1e3)
        link.set_loss(loss)
        try:
            command = hil_run_command(
                "--policy", policy, "--host", "127.0.0.1", "--port", proxy.port, "--level", "easy", "--out", tmp,
                "--rate-hz", rate_hz, "--episodes", episodes, "--max-steps", max_steps, "--timeout", 1.0,
            )  # fmt: skip
            result = subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        finally:
            dropped = link.dropped_packets()
            link.set_loss(0)
        head = f"{delay_ms} +- {jitter_ms} ms each way + {loss} % loss, {rate_hz} Hz"
        if result.returncode != 0:
            return f"{head}: hil.run exited {result.returncode}: {result.stderr.strip().splitlines()[-1:]}"
        run = json.loads((Path(tmp) / "report.json").read_text())["runs"][0]
    rel, rtt, steps = run["reliability"], run["round_trip_us"], run["steps"]
    return (
        f"{head} (deadline {rel['deadline_ms']:.0f} ms): run completes; {steps} steps, "
        f"{rel['deadline_misses']} misses ({100 * rel['deadline_misses'] / steps:.1f} %), "
        f"{rel['failsafe_steps']} hover steps ({100 * rel['failsafe_steps'] / steps:.0f} %), "
        f"{rel['outages']} outages, {rel['retries']} retries, {rel['reconnects']} reconnects, "
        f"{rel['stale_replies']} stale replies, {dropped} packets dropped; "
        f"round trip p50 {rtt['p50'] / 1e3:.0f} ms, p99 {rtt['p99'] / 1e3:.0f} ms"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=("watchdog", "link"), help="run one part (default: both)")
    parser.add_argument("--episodes", type=int, default=8, help="hil.run episodes per link scenario (default: 8)")
    parser.add_argument("--max-steps", type=int, default=30, help="steps per episode (default: 30)")
    parser.add_argument("--watchdog-trials", type=int, default=20, help="(default: 20)")
    args = parser.parse_args()
    print(machine_line(), flush=True)
    with tempfile.TemporaryDirectory(prefix="airq-netfault-") as tmp:
        policy = Path(tmp) / "policy.onnx"
        policy.write_bytes(build_mlp_policy(NAV_OBS_DIM, 32, seed=6))  # the network tests' toy policy
        if args.only in (None, "watchdog"):
            print(watchdog(policy, args.watchdog_trials), flush=True)
        if args.only in (None, "link"):
            reason = netns_unavailable_reason()
            if reason:
                print(f"link scenarios not run: {reason}", file=sys.stderr)
                return 2
            print(
                f"link: hil.run --level easy --episodes {args.episodes} --max-steps {args.max_steps} --timeout 1, "
                "toy 1032-32-25 fp32 MLP, bridge in a network namespace",
                flush=True,
            )
            with NetnsLink() as link:
                bridge = BridgeProcess(["--log-level", "warning"], host=link.ns_ip)
                bridge.args = link.exec_prefix + bridge.args  # same command, run inside the namespace
                with bridge:
                    for i, scenario in enumerate(LINK_SCENARIOS):
                        started = time.monotonic()
                        line = link_scenario(link, bridge, policy, scenario, args.episodes, args.max_steps, seed=i + 1)
                        print(f"{line} [{time.monotonic() - started:.0f} s]", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
