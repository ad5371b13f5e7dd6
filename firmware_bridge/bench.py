"""python -m firmware_bridge.bench [--policy FILE] [--n 2000] [--spin-us 1000]

Starts the bridge as a separate process, uploads a policy, and times N act
round trips over TCP loopback with the control loop's own client
(firmware_bridge.client.BridgeClient: act() times each round trip from send to
reply, and the bridge's reply carries its inference time). Reports percentiles
of the round trip, the device's inference time, and the overhead (round trip
minus inference). For scale it also times a bare ZeroMQ+msgpack echo server (a
second process doing nothing but unpack/pack) with the same message sizes and
the same client: "overhead / bare echo" is the price of the bridge's own code.
Both run at the same time and are timed in alternating blocks of --block round
trips, so a change in the machine's load hits both alike; the spread of the
per-block p50s is reported too.

``--spin-us`` is the client's reply wait (BridgeClient ``spin_us``; the default
is the control loop's, 0 = block in poll() at once). ``--client`` accepts only
``dealer``: the bench times the one client the loop uses, a DEALER (the socket
docs/protocol.md recommends), so that no second, bench-only client exists; the
bridge's REQ framing is covered by tests/firmware_bridge/test_protocol_conformance.py.

Without --policy it builds a random MLP with the onnx package (host extra).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import zmq

from firmware_bridge.cli import EXIT_FAILURE, READY_PREFIX, OneLineArgumentParser, error_line, fail, positive_int
from firmware_bridge.client import (
    DEFAULT_SPIN_US,
    BridgeClient,
    BridgeError,
    BridgeRefused,
    BridgeStatus,
    PolicyInfo,
)
from firmware_bridge.launcher import BridgeProcess
from firmware_bridge.protocol import DEFAULT_MAX_MODEL_BYTES, pack, unpack
from firmware_bridge.toy_policy import build_mlp_policy

PROG = "firmware_bridge.bench"
OBS_POOL = 64  # distinct observations cycled through, generated before timing
TIMEOUT_S = 30.0  # per request, one attempt: a retried act would not be a round trip worth timing


@dataclass
class Samples:
    rtt_ns: np.ndarray
    infer_ns: np.ndarray
    handler_ns: np.ndarray  # device send_ns - recv_ns (bridge code + inference)


def percentiles_us(values_ns: Sequence[int] | np.ndarray) -> dict[str, float]:
    """Nanosecond samples as microsecond percentiles, mean and maximum (all 0 for no samples)."""
    if not len(values_ns):
        return {"p50": 0.0, "p95": 0.0, "p99": 0.0, "mean": 0.0, "max": 0.0}
    a = np.asarray(values_ns, dtype=np.float64) / 1e3
    p50, p95, p99 = np.percentile(a, [50, 95, 99])
    return {"p50": float(p50), "p95": float(p95), "p99": float(p99), "mean": float(a.mean()), "max": float(a.max())}


def run_acts(client: BridgeClient, observations: list[np.ndarray], n: int, warmup: int) -> Samples:
    """``warmup`` untimed acts, then ``n`` timed ones; works against the bridge and the echo server alike."""
    rtt = np.empty(n, np.int64)
    infer = np.empty(n, np.int64)
    handler = np.empty(n, np.int64)
    for i in range(-warmup, n):
        result = client.act(observations[i % len(observations)])
        if i >= 0:
            rtt[i] = result.rtt_ns
            infer[i] = result.infer_ns
            handler[i] = result.send_ns - result.recv_ns
    return Samples(rtt, infer, handler)


def make_client(endpoint: str, spin_us: float) -> BridgeClient:
    return BridgeClient(
        endpoint, timeout_s=TIMEOUT_S, retries=0, load_timeout_s=TIMEOUT_S, spin_us=spin_us, client_name=PROG
    )


def echo_server() -> None:
    """Baseline peer: ROUTER that unpacks each request and answers a small map, nothing else.

    The answer has the request's type and the fields of an act reply (action 0, no setpoint,
    infer_ns 0, device timestamps), so a real BridgeClient - and the closed loop on top of it -
    can be pointed at it to time the bare transport under the same conditions as the bridge.
    """
    sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind("tcp://127.0.0.1:*")
    print(f"{READY_PREFIX}{sock.getsockopt_string(zmq.LAST_ENDPOINT)}", flush=True)
    monotonic_ns = time.monotonic_ns
    while True:
        frames = sock.recv_multipart()
        recv_ns = monotonic_ns()
        message = unpack(frames[-1])
        frames[-1] = pack(
            {
                "v": 1,
                "type": message.get("type"),
                "seq": message.get("seq"),
                "action": 0,
                "setpoint": None,
                "logits": None,
                "infer_ns": 0,
                "recv_ns": recv_ns,
                "send_ns": monotonic_ns(),
            }
        )
        sock.send_multipart(frames)


class EchoProcess(BridgeProcess):
    def __init__(self) -> None:
        super().__init__()
        self.args = [sys.executable, "-m", "firmware_bridge.bench", "--echo-server"]

    def _wait_for_hello(self) -> None:  # the echo server speaks no hello
        pass


def load_model(policy: str | None, obs_dim: int, hidden: int) -> tuple[bytes, str]:
    if policy:
        try:
            return Path(policy).read_bytes(), policy
        except OSError as exc:
            fail(f"--policy {policy}: {exc.strerror}", prog=PROG)
    try:
        return build_mlp_policy(obs_dim, hidden), f"random MLP {obs_dim}-{hidden}-25 (built with onnx)"
    except ImportError:
        fail("no --policy given and the onnx package (host extra) is not installed to build one", prog=PROG)


def client_kind(text: str) -> str:
    if text == "req":
        raise argparse.ArgumentTypeError(
            "'req' is no longer offered: the bench times the control loop's client, a DEALER"
        )
    if text != "dealer":
        raise argparse.ArgumentTypeError(f"invalid choice: {text!r} (choose from 'dealer')")
    return text


def spin_us(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (value >= 0 and math.isfinite(value)):  # also refuses NaN
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0 (microseconds), got {text}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = OneLineArgumentParser(prog=PROG, description="Round-trip latency of the airq bridge over TCP loopback.")
    parser.add_argument("--policy", metavar="FILE", help="ONNX policy (default: a random MLP built with onnx)")
    parser.add_argument("--n", type=positive_int, default=2000, help="timed act round trips (default 2000)")
    parser.add_argument("--warmup", type=int, default=200, help="untimed round trips first (default 200)")
    parser.add_argument(
        "--block", type=positive_int, default=250, help="round trips per alternating bridge/echo block (default 250)"
    )
    parser.add_argument(
        "--client",
        type=client_kind,
        default="dealer",
        metavar="{dealer}",
        help="client socket: dealer only, the control loop's firmware_bridge.client",
    )
    parser.add_argument(
        "--spin-us",
        type=spin_us,
        default=DEFAULT_SPIN_US,
        metavar="US",
        help="client reply wait: check for the reply without blocking this long, then block (0 = block at once); "
        "the control loop's BridgeClient uses the same",
    )
    parser.add_argument("--threads", type=positive_int, default=1, help="bridge onnxruntime threads")
    parser.add_argument("--obs-dim", type=positive_int, default=1032, help="for the generated MLP")
    parser.add_argument("--hidden", type=positive_int, default=256, help="for the generated MLP")
    parser.add_argument("--no-baseline", action="store_true", help="skip the bare zmq+msgpack echo baseline")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.add_argument("--echo-server", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.echo_server:
        echo_server()
        return 0

    model, model_label = load_model(args.policy, args.obs_dim, args.hidden)
    with contextlib.ExitStack() as stack:
        bridge = stack.enter_context(
            # Its own bridge: limits sized so the model goes up in one message.
            BridgeProcess(
                [
                    "--threads",
                    str(args.threads),
                    "--max-message-bytes",
                    str(max(len(model) * 2, 1 << 20)),
                    "--max-model-bytes",
                    str(max(len(model), DEFAULT_MAX_MODEL_BYTES)),
                ]
            )
        )
        echo = None if args.no_baseline else stack.enter_context(EchoProcess())
        try:
            client = stack.enter_context(make_client(bridge.endpoint, args.spin_us))
            echo_client = None if echo is None else stack.enter_context(make_client(echo.endpoint, args.spin_us))
            try:
                loaded = client.load_policy(model, name="bench")
            except BridgeRefused as exc:
                fail(f"bridge refused the policy: {exc.code}: {exc.detail}", prog=PROG)
            obs_dim = loaded.obs_dim
            rng = np.random.default_rng(0)
            observations = [rng.standard_normal(obs_dim).astype(np.float32) for _ in range(OBS_POOL)]
            acts: list[Samples] = []
            echoes: list[np.ndarray] = []
            done = 0
            while done < args.n:  # alternating blocks: bridge then echo, echo then bridge, ...
                size = min(args.block, args.n - done)
                warmup = args.warmup if not done else 0
                bridge_first = len(acts) % 2 == 0
                if echo_client is not None and not bridge_first:
                    echoes.append(run_acts(echo_client, observations, size, warmup).rtt_ns)
                acts.append(run_acts(client, observations, size, warmup))
                if echo_client is not None and bridge_first:
                    echoes.append(run_acts(echo_client, observations, size, warmup).rtt_ns)
                done += size
            status = client.status()
        except BridgeError as exc:
            print(error_line(exc), file=sys.stderr)
            return EXIT_FAILURE

    samples = Samples(*(np.concatenate([getattr(b, f) for b in acts]) for f in ("rtt_ns", "infer_ns", "handler_ns")))
    block_overhead_p50 = [float(np.median(b.rtt_ns - b.infer_ns) / 1e3) for b in acts]
    block_echo_p50 = [float(np.median(e) / 1e3) for e in echoes]
    baseline = np.concatenate(echoes) if echoes else None
    report = build_report(args, model_label, loaded, samples, baseline, status)
    report["block"] = args.block
    report["overhead_p50_us_by_block"] = block_overhead_p50
    if echoes:
        report["bare_echo_p50_us_by_block"] = block_echo_p50
    print(json.dumps(report) if args.json else format_report(report))
    return 0


def build_report(
    args: Any, model_label: str, loaded: PolicyInfo, samples: Samples, baseline: np.ndarray | None, status: BridgeStatus
) -> dict:
    overhead = samples.rtt_ns - samples.infer_ns
    report: dict[str, Any] = {
        "n": args.n,
        "client": args.client,
        "spin_us": args.spin_us,
        "threads": args.threads,
        "policy": model_label,
        "policy_bytes": loaded.size_bytes,
        "obs_dim": loaded.obs_dim,
        "action_space": loaded.action_space,
        "round_trip_us": percentiles_us(samples.rtt_ns),
        "device_inference_us": percentiles_us(samples.infer_ns),
        "device_handler_minus_inference_us": percentiles_us(samples.handler_ns - samples.infer_ns),
        "overhead_us": percentiles_us(overhead),
        "bridge_rss_bytes": status.rss_bytes,
        "model_rss_delta_bytes": status.model_rss_delta_bytes,
    }
    if baseline is not None:
        report["bare_echo_round_trip_us"] = percentiles_us(baseline)
        report["overhead_p50_over_bare_echo_p50"] = float(np.median(overhead) / np.median(baseline))
    return report


def format_report(report: dict[str, Any]) -> str:
    rows = [
        ("round trip", report["round_trip_us"]),
        ("device inference", report["device_inference_us"]),
        ("overhead (rt - inference)", report["overhead_us"]),
        ("device handler - inference", report["device_handler_minus_inference_us"]),
    ]
    if "bare_echo_round_trip_us" in report:
        rows.append(("bare zmq+msgpack echo rt", report["bare_echo_round_trip_us"]))
    lines = [
        f"airq bridge bench: {report['n']} acts, {report['client'].upper()} client "
        f"(firmware_bridge.client, spin {report['spin_us']:g} us), TCP loopback, onnxruntime threads={report['threads']}",
        f"policy: {report['policy']} ({report['policy_bytes']} B, "
        f"obs_dim {report['obs_dim']}, {report['action_space']})",
        f"{'':28s}{'p50':>9s}{'p95':>9s}{'p99':>9s}   (microseconds)",
    ]
    lines += [f"{label:28s}{v['p50']:9.1f}{v['p95']:9.1f}{v['p99']:9.1f}" for label, v in rows]
    if "overhead_p50_over_bare_echo_p50" in report:
        lines.append(f"overhead p50 / bare echo p50: {report['overhead_p50_over_bare_echo_p50']:.2f}x")
    spreads = [("overhead", report["overhead_p50_us_by_block"])]
    if "bare_echo_p50_us_by_block" in report:
        spreads.append(("bare echo", report["bare_echo_p50_us_by_block"]))
    lines.append(
        f"p50 per block of {report['block']} (interleaved): "
        + "; ".join(f"{name} {min(v):.0f}-{max(v):.0f} us" for name, v in spreads)
    )
    rss = report.get("bridge_rss_bytes")
    delta = report.get("model_rss_delta_bytes")
    if rss:
        lines.append(f"bridge RSS {rss / 2**20:.1f} MiB (model load added {(delta or 0) / 2**20:.1f} MiB)")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
