"""python -m firmware_bridge.bench [--policy FILE] [--n 2000] [--client dealer|req]

Starts the bridge as a separate process, uploads a policy, and times N act
round trips over TCP loopback. Reports percentiles of the round trip, the
device's inference time, and the overhead (round trip minus inference). For
scale it also times a bare ZeroMQ+msgpack echo server (a second process doing
nothing but unpack/pack) with the same message sizes: "overhead / bare echo"
is the price of the bridge's own code. Both run at the same time and are timed
in alternating blocks of --block round trips, so a change in the machine's
load hits both alike; the spread of the per-block p50s is reported too.

Without --policy it builds a random MLP with the onnx package (host extra).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import zmq

from firmware_bridge.cli import READY_PREFIX, OneLineArgumentParser, fail, positive_int
from firmware_bridge.launcher import BridgeProcess
from firmware_bridge.protocol import DEFAULT_MAX_MODEL_BYTES, MsgType, load_policy_request, pack, request, unpack

PROG = "firmware_bridge.bench"
OBS_POOL = 64  # distinct observations cycled through, generated before timing


@dataclass
class Samples:
    rtt_ns: np.ndarray
    infer_ns: np.ndarray
    handler_ns: np.ndarray  # device send_ns - recv_ns (bridge code + inference)


class Roundtripper:
    """Minimal request/reply over REQ or DEALER (the bench must not depend on hil)."""

    def __init__(self, endpoint: str, kind: str, timeout_ms: int = 30_000) -> None:
        self.kind = kind
        self.timeout_ms = timeout_ms
        self.socket: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.REQ if kind == "req" else zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.connect(endpoint)

    def call(self, payload: bytes) -> bytes:
        if self.kind == "req":
            self.socket.send(payload)
        else:
            self.socket.send_multipart([b"", payload])
        if not self.socket.poll(self.timeout_ms):
            raise TimeoutError("no reply within timeout")
        return self.socket.recv_multipart()[-1]

    def close(self) -> None:
        self.socket.close(linger=0)


def _percentiles_us(values_ns: np.ndarray) -> dict[str, float]:
    p50, p95, p99 = np.percentile(values_ns, [50, 95, 99]) / 1e3
    return {"p50": float(p50), "p95": float(p95), "p99": float(p99), "mean": float(values_ns.mean() / 1e3)}


def run_acts(
    client: Roundtripper, observations: list[bytes], obs_dim: int, n: int, warmup: int, first_seq: int = 0
) -> Samples:
    rtt = np.empty(n, np.int64)
    infer = np.empty(n, np.int64)
    handler = np.empty(n, np.int64)
    shape = [obs_dim]
    for i in range(-warmup, n):
        payload = pack(
            request(
                MsgType.ACT, first_seq + i + warmup, obs=observations[i % len(observations)], shape=shape, dtype="<f4"
            )
        )
        start = time.perf_counter_ns()
        reply = unpack(client.call(payload))
        elapsed = time.perf_counter_ns() - start
        if reply.get("type") != MsgType.ACT:
            raise RuntimeError(f"act failed: {reply.get('code')}: {reply.get('message')}")
        if i >= 0:
            rtt[i] = elapsed
            infer[i] = reply["infer_ns"]
            handler[i] = reply["send_ns"] - reply["recv_ns"]
    return Samples(rtt, infer, handler)


def run_echo(client: Roundtripper, observations: list[bytes], obs_dim: int, n: int, warmup: int) -> np.ndarray:
    rtt = np.empty(n, np.int64)
    for i in range(-warmup, n):
        payload = pack(
            request(MsgType.ACT, i + warmup, obs=observations[i % len(observations)], shape=[obs_dim], dtype="<f4")
        )
        start = time.perf_counter_ns()
        unpack(client.call(payload))
        elapsed = time.perf_counter_ns() - start
        if i >= 0:
            rtt[i] = elapsed
    return rtt


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
        from firmware_bridge.toy_policy import build_mlp_policy

        return build_mlp_policy(obs_dim, hidden), f"random MLP {obs_dim}-{hidden}-25 (built with onnx)"
    except ImportError:
        fail("no --policy given and the onnx package (host extra) is not installed to build one", prog=PROG)


def main(argv: list[str] | None = None) -> int:
    parser = OneLineArgumentParser(prog=PROG, description="Round-trip latency of the airq bridge over TCP loopback.")
    parser.add_argument("--policy", metavar="FILE", help="ONNX policy (default: a random MLP built with onnx)")
    parser.add_argument("--n", type=positive_int, default=2000, help="timed act round trips (default 2000)")
    parser.add_argument("--warmup", type=int, default=200, help="untimed round trips first (default 200)")
    parser.add_argument(
        "--block", type=positive_int, default=250, help="round trips per alternating bridge/echo block (default 250)"
    )
    parser.add_argument("--client", choices=("dealer", "req"), default="dealer")
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
        client = Roundtripper(bridge.endpoint, args.client)
        stack.callback(client.close)
        echo_client = None if echo is None else Roundtripper(echo.endpoint, args.client)
        if echo_client is not None:
            stack.callback(echo_client.close)
        loaded = unpack(client.call(pack(load_policy_request(0, model, name="bench"))))
        if loaded.get("type") != MsgType.LOAD_POLICY:
            fail(f"bridge refused the policy: {loaded.get('code')}: {loaded.get('message')}", prog=PROG)
        obs_dim = loaded["obs_dim"]
        rng = np.random.default_rng(0)
        observations = [rng.standard_normal(obs_dim).astype("<f4").tobytes() for _ in range(OBS_POOL)]
        acts: list[Samples] = []
        echoes: list[np.ndarray] = []
        done = 0
        while done < args.n:  # alternating blocks: bridge then echo, echo then bridge, ...
            size = min(args.block, args.n - done)
            warmup = args.warmup if not done else 0
            bridge_first = len(acts) % 2 == 0
            if echo_client is not None and not bridge_first:
                echoes.append(run_echo(echo_client, observations, obs_dim, size, warmup))
            acts.append(run_acts(client, observations, obs_dim, size, warmup, first_seq=1 + done + args.warmup))
            if echo_client is not None and bridge_first:
                echoes.append(run_echo(echo_client, observations, obs_dim, size, warmup))
            done += size
        status = unpack(client.call(pack(request(MsgType.STATUS, 1))))

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
    args: Any, model_label: str, loaded: dict, samples: Samples, baseline: np.ndarray | None, status: dict
) -> dict:
    overhead = samples.rtt_ns - samples.infer_ns
    report: dict[str, Any] = {
        "n": args.n,
        "client": args.client,
        "threads": args.threads,
        "policy": model_label,
        "policy_bytes": loaded["size_bytes"],
        "obs_dim": loaded["obs_dim"],
        "action_space": loaded["action_space"],
        "round_trip_us": _percentiles_us(samples.rtt_ns),
        "device_inference_us": _percentiles_us(samples.infer_ns),
        "device_handler_minus_inference_us": _percentiles_us(samples.handler_ns - samples.infer_ns),
        "overhead_us": _percentiles_us(overhead),
        "bridge_rss_bytes": status.get("rss_bytes"),
        "model_rss_delta_bytes": status.get("model_rss_delta_bytes"),
    }
    if baseline is not None:
        report["bare_echo_round_trip_us"] = _percentiles_us(baseline)
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
        f"airq bridge bench: {report['n']} acts, {report['client'].upper()} client, TCP loopback, "
        f"onnxruntime threads={report['threads']}",
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
