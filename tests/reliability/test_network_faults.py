"""The control loop over a real, broken link: bridge in its own network namespace behind a veth pair.

host (hil.run) -> FaultProxy on 127.0.0.1 (delay, jitter, stalls, cuts) -> veth -> bridge in the
namespace, whose input drops packets at random (nftables). Root, iproute2 and nftables are needed;
without them the tests skip with the reason, unless AIRQ_REQUIRE_NETNS=1 (CI) makes that a failure.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fault_proxy import FaultProxy
from netns_link import NetnsLink, netns_unavailable_reason
from reliability_helpers import NAV_OBS_DIM, episodes, events, hil_run_command, killed_on_exit, run_log, wait_for_log
from reliability_helpers import finish as finish_within

from firmware_bridge.client import BridgeClient, BridgeUnreachable
from firmware_bridge.launcher import BridgeProcess
from firmware_bridge.protocol import HEARTBEAT_IVL_MS, HEARTBEAT_TIMEOUT_MS
from firmware_bridge.toy_policy import build_mlp_policy

REASON = netns_unavailable_reason()
if REASON and os.environ.get("AIRQ_REQUIRE_NETNS") == "1":
    raise RuntimeError(f"AIRQ_REQUIRE_NETNS=1 but the network-fault tests cannot run: {REASON}")
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"network-fault tests: {REASON}")

RUN_TIMEOUT_S = 150
ACT_BYTES = 4 * NAV_OBS_DIM  # an act request carries its observation: NAV_OBS_DIM float32
# From the stall to outage_end: 1.52-1.64 s in 14 runs with 2 or 4 CPU hogs on the 2-core VM (stress-ng --cpu N
# --cpu-method loop); by construction the stall plus at most one policy check of 3 x 0.5 s attempts, about 3 s.
# 10 s is 6 times the worst measured: past it the loop is not recovering, it is stuck.
RECOVERY_BOUND_S = 10


@pytest.fixture(scope="module")
def link() -> Iterator[NetnsLink]:
    with NetnsLink() as namespace:
        yield namespace


@pytest.fixture(scope="module")
def bridge(link: NetnsLink) -> Iterator[BridgeProcess]:
    process = BridgeProcess(["--log-level", "warning"], host=link.ns_ip)
    process.args = link.exec_prefix + process.args  # same command, run inside the namespace
    with process:
        yield process


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("net") / "policy.onnx"
    path.write_bytes(build_mlp_policy(NAV_OBS_DIM, 32, seed=6))
    return path


def bridge_address(bridge: BridgeProcess) -> tuple[str, int]:
    host, port = bridge.endpoint.removeprefix("tcp://").rsplit(":", 1)
    return host.strip("[]").removeprefix("::ffff:"), int(port)


def start_run(policy: Path, proxy: FaultProxy, out: Path, *extra: object) -> subprocess.Popen:
    return subprocess.Popen(
        hil_run_command(
            "--policy", policy, "--host", "127.0.0.1", "--port", proxy.port, "--level", "easy", "--out", out, *extra
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(process: subprocess.Popen) -> tuple[int, str, str]:
    return finish_within(process, RUN_TIMEOUT_S)


def test_run_completes_with_delay_jitter_and_loss(
    link: NetnsLink, bridge: BridgeProcess, policy: Path, tmp_path: Path
) -> None:
    """50 ms +- 20 ms each way and 5 % packet loss, paced at 5 Hz (act deadline 160 ms)."""
    with FaultProxy(bridge_address(bridge), seed=1) as proxy:
        proxy.set_latency(0.050, 0.020)
        link.set_loss(5)
        try:
            code, stdout, stderr = finish(
                start_run(policy, proxy, tmp_path, "--rate-hz", 5, "--episodes", 3, "--max-steps", 25, "--timeout", 1.0)
            )
        finally:
            dropped = link.dropped_packets()
            link.set_loss(0)
    assert code == 0, stderr[-3000:]
    assert sorted(e["episode"] for e in episodes(run_log(tmp_path))) == [0, 1, 2]
    run = json.loads((tmp_path / "report.json").read_text())["runs"][0]
    rel = run["reliability"]
    for counter in ("deadline_misses", "retries", "reconnects", "stale_replies", "outages"):
        assert isinstance(rel[counter], int)  # counted and reported, whatever this run's luck
    assert dropped > 0  # the loss was real
    assert run["acts"] + rel["deadline_misses"] == run["steps"]  # every step: an action or a fail-safe
    assert 80_000 < run["round_trip_us"]["p50"] < 160_000  # ~2 x 50 ms of injected delay
    print(
        f"\n50+-20 ms each way, 5% loss: {run['steps']} steps, {rel['deadline_misses']} deadline misses "
        f"(deadline {rel['deadline_ms']:.0f} ms), {rel['retries']} retries, {rel['reconnects']} reconnects, "
        f"{rel['stale_replies']} stale replies, {rel['outages']} outages, {dropped} packets dropped, "
        f"rtt p50 {run['round_trip_us']['p50'] / 1e3:.0f} ms p99 {run['round_trip_us']['p99'] / 1e3:.0f} ms"
    )
    assert "deadline misses" in stdout or rel["deadline_misses"] == 0


def test_stall_and_cut_connection_recover(link: NetnsLink, bridge: BridgeProcess, policy: Path, tmp_path: Path) -> None:
    """A 1.5 s freeze, then every connection cut: outages are logged, the loop reconnects and finishes.

    The host keeps one request in flight per connection, so the frozen link holds at most one act, not a
    burst of stale ones for the bridge to execute when it thaws - a burst that, on a loaded machine, also
    killed the bridge (libzmq's `!_io_error` assertion: docs/reliability.md, "A stall under load")."""
    with FaultProxy(bridge_address(bridge), seed=2) as proxy:
        args = ("--rate-hz", 10, "--episodes", 3, "--max-steps", 30, "--timeout", 0.5)
        with killed_on_exit(start_run(policy, proxy, tmp_path, *args)) as run:
            wait_for_log(tmp_path, lambda r: len(episodes(r)) >= 1, 60, run)
            # flying the second episode: an act goes up every 100 ms (30 s is a hang bound)
            proxy.wait_for_upstream(3, 30)
            proxy.stall(1.5)
            stalled_at = time.monotonic()
            wait_for_log(tmp_path, lambda r: events(r, "outage_end"), RECOVERY_BOUND_S, run)
            recovered_s = time.monotonic() - stalled_at
            proxy.wait_for_upstream(2, 30)  # flying again on a live connection
            assert proxy.cut_connections() >= 1
            cut_at = time.monotonic()
            code, stdout, stderr = finish(run)
            finished_s = time.monotonic() - cut_at
    assert bridge.alive, f"the bridge died: {bridge.stderr_text()[-2000:]}"
    assert code == 0, stderr[-3000:]
    held = proxy.stalled_upstream_bytes
    assert max(held, default=0) < 2 * ACT_BYTES, f"the frozen link held a burst of acts: {held} bytes"
    records = run_log(tmp_path)
    assert sorted(e["episode"] for e in episodes(records)) == [0, 1, 2]
    assert [e for e in episodes(records) if e["spans_outage"]]
    assert events(records, "outage_start") and events(records, "failsafe")
    assert not events(records, "policy_reuploaded")  # the bridge kept its policy: verified, not re-sent
    rel = json.loads((tmp_path / "report.json").read_text())["runs"][0]["reliability"]
    assert rel["outages"] >= 1 and rel["reconnects"] + rel["disconnects"] >= 1
    print(
        f"\nstall 1.5 s + cut: {rel['deadline_misses']} misses, {rel['outages']} outages ({rel['outage_s']:.2f} s), "
        f"{rel['retries']} retries, {rel['reconnects']} reconnects, {rel['disconnects']} disconnects, "
        f"{rel['stale_replies']} stale replies; held by the stall per connection {held} bytes (an act is "
        f"{ACT_BYTES}); outage_end {recovered_s:.2f} s after the stall began, run finished {finished_s:.2f} s "
        "after the cut"
    )


def test_the_client_names_a_lost_heartbeat(tmp_path: Path) -> None:
    """A link that goes silent (every packet into the namespace dropped): no FIN, no RST. The client's
    ZMTP heartbeat closes the connection within its timeout, reconnecting gets no answer, and the error
    says so instead of blaming CurveZMQ or the port."""
    with NetnsLink() as own_link:
        process = BridgeProcess(["--log-level", "warning"], host=own_link.ns_ip)
        process.args = own_link.exec_prefix + process.args
        with process, BridgeClient(process.endpoint, timeout_s=2.0, retries=0) as client:
            client.hello()
            own_link.set_loss(100)
            lost_at = time.monotonic()
            while client.connected and time.monotonic() - lost_at < 15:
                time.sleep(0.1)
            closed_after_s = time.monotonic() - lost_at
            print(f"client closed the silent connection after {closed_after_s:.1f} s")
            assert not client.connected
            assert closed_after_s <= (HEARTBEAT_IVL_MS + HEARTBEAT_TIMEOUT_MS) / 1000 + 1.5
            with pytest.raises(BridgeUnreachable, match="heartbeat lost"):
                client.status()
