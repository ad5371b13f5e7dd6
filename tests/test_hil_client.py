"""firmware_bridge.client.BridgeClient (the one protocol client: the loop, the bench, the launcher) against the real bridge subprocess, and against scripted real ZeroMQ peers."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import zmq

from firmware_bridge.client import (
    UPLOAD_ENVELOPE_BYTES,
    ActResult,
    BridgeBusy,
    BridgeClient,
    BridgeError,
    BridgeProtocolError,
    BridgeRefused,
    BridgeUnreachable,
    BridgeUnresolvable,
    HelloReply,
)
from firmware_bridge.launcher import BridgeProcess
from firmware_bridge.protocol import ErrorCode, pack, sha256_hex, unpack
from firmware_bridge.toy_policy import build_mlp_policy, default_action_table

OBS_DIM = 96
N_ACTIONS = 9
# Generous: these bound a hang, they do not measure speed.
HANG_GUARD_S = 10.0


@pytest.fixture(scope="module")
def model() -> bytes:
    return build_mlp_policy(OBS_DIM, hidden=32, n_actions=N_ACTIONS, seed=5)


@pytest.fixture(scope="module")
def bridge() -> Iterator[BridgeProcess]:
    with BridgeProcess() as running:
        yield running


@pytest.fixture
def client(bridge: BridgeProcess) -> Iterator[BridgeClient]:
    with BridgeClient(bridge.endpoint, timeout_s=5.0, retries=0) as bridge_client:
        yield bridge_client


def reference_action(model: bytes, obs: np.ndarray) -> tuple[int, np.ndarray]:
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    action, logits = session.run(["action", "logits"], {"obs": obs.reshape(1, -1).astype(np.float32)})
    return int(action[0]), logits[0]


def test_hello_load_act_status_reset(client: BridgeClient, model: bytes, tmp_path: Path) -> None:
    hello = client.hello()
    assert hello.version == 1 and hello.device is not None and hello.device["hostname"] == socket.gethostname()

    path = tmp_path / "toy.onnx"
    path.write_bytes(model)
    loaded = client.load_policy(path)
    assert loaded.sha256 == sha256_hex(model) and loaded.obs_dim == OBS_DIM and loaded.name == "toy.onnx"
    assert client.load_policy(model, name="again").replaced_sha256 == sha256_hex(model)  # bytes work too

    rng = np.random.default_rng(0)
    seqs = []
    for _ in range(5):
        obs = rng.standard_normal(OBS_DIM)  # float64 in: the client sends float32
        result = client.act(obs)
        expected_action, expected_logits = reference_action(model, obs)
        assert isinstance(result, ActResult)
        assert result.action == expected_action
        assert result.setpoint == default_action_table(N_ACTIONS)[expected_action]
        np.testing.assert_allclose(result.logits, expected_logits, rtol=1e-5, atol=1e-6)
        assert 0 < result.infer_ns < result.rtt_ns and result.overhead_ns == result.rtt_ns - result.infer_ns
        assert result.recv_ns <= result.send_ns
        seqs.append(result.seq)
    assert seqs == sorted(set(seqs))

    status = client.status()
    assert status.counters["acts"] >= 5 and (status.rss_bytes or 0) > 0
    reset = client.reset()
    assert reset["previous_episode"]["acts"] >= 5
    assert client.status().reply["episode"]["acts"] == 0


def test_error_reply_raises_bridge_refused_with_code(client: BridgeClient, model: bytes) -> None:
    client.load_policy(model)
    with pytest.raises(BridgeRefused) as info:
        client.act(np.zeros(OBS_DIM + 1))
    assert info.value.code == ErrorCode.BAD_OBSERVATION and info.value.endpoint == client.endpoint
    assert client.endpoint in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(BridgeRefused) as info:
        client.act(np.full(OBS_DIM, np.nan))
    assert info.value.code == ErrorCode.BAD_OBSERVATION
    with pytest.raises(BridgeRefused) as info:
        client.load_policy(b"not a model")
    assert info.value.code == ErrorCode.BAD_POLICY
    assert client.act(np.zeros(OBS_DIM)).action == reference_action(model, np.zeros(OBS_DIM))[0]


def test_policy_over_bridge_limit_refused_before_sending(model: bytes) -> None:
    with (
        BridgeProcess(["--max-model-bytes", str(len(model) - 1)]) as small,
        BridgeClient(small.endpoint, timeout_s=5.0) as client,
    ):
        with pytest.raises(BridgeRefused) as info:
            client.load_policy(model)
        assert info.value.code == ErrorCode.TOO_LARGE
        assert client.status().counters["requests"] == 3  # the launcher's hello, ours, this status: no upload


def test_policy_larger_than_a_message_goes_up_in_chunks(model: bytes) -> None:
    # A model exactly --max-model-bytes, 4 KiB messages: the client sends chunks, the bridge assembles them.
    with (
        BridgeProcess(["--max-message-bytes", "4096", "--max-model-bytes", str(len(model))]) as small,
        BridgeClient(small.endpoint, timeout_s=5.0) as client,
    ):
        loaded = client.load_policy(model)
        assert loaded.sha256 == sha256_hex(model) and loaded.size_bytes == len(model)
        chunks = -(-len(model) // (4096 - UPLOAD_ENVELOPE_BYTES))
        assert client.status().counters["requests"] == 2 + chunks + 1  # two hellos, the chunks, this status
        assert client.act(np.zeros(OBS_DIM)).action == reference_action(model, np.zeros(OBS_DIM))[0]


def test_unreadable_policy_file_is_a_bridge_error(client: BridgeClient, tmp_path: Path) -> None:
    with pytest.raises(BridgeError, match="cannot read policy"):
        client.load_policy(tmp_path / "missing.onnx")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_nothing_listening_gives_clear_error_quickly() -> None:
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    start = time.monotonic()
    with BridgeClient(endpoint, timeout_s=0.5, retries=1) as client, pytest.raises(BridgeUnreachable) as info:
        client.hello()
    assert time.monotonic() - start < HANG_GUARD_S
    message = str(info.value)
    assert endpoint in message and "2 attempt(s)" in message and "connection refused" in message
    assert "\n" not in message


def test_unresolvable_host_gives_clear_error_quickly() -> None:
    start = time.monotonic()
    with pytest.raises(BridgeUnresolvable) as info:
        BridgeClient("tcp://nonexistent.invalid:5555", timeout_s=0.5, retries=0)
    assert time.monotonic() - start < HANG_GUARD_S
    assert "tcp://nonexistent.invalid:5555" in str(info.value) and "cannot resolve" in str(info.value)


def test_bad_endpoint_string() -> None:
    with pytest.raises(BridgeError, match="tcp://HOST:PORT"):
        BridgeClient("raspberrypi.local:5555")


def scripted_peer(
    behaviour: Callable[[zmq.Socket, list[bytes], int], None],
) -> tuple[str, threading.Event, threading.Thread]:
    """A real ROUTER socket in a thread that answers per ``behaviour(socket, frames, request_index)``."""
    context = zmq.Context.instance()
    router = context.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    router.bind("tcp://127.0.0.1:*")
    endpoint = router.getsockopt_string(zmq.LAST_ENDPOINT)
    stop = threading.Event()

    def serve() -> None:
        index = 0
        while not stop.is_set():
            if router.poll(20):
                behaviour(router, router.recv_multipart(), index)
                index += 1
        router.close(linger=0)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return endpoint, stop, thread


def reply_with(router: zmq.Socket, frames: list[bytes], **fields: object) -> None:
    request = unpack(frames[-1])
    router.send_multipart([*frames[:-1], pack({"v": 1, "type": request["type"], "seq": request["seq"], **fields})])


def test_stale_replies_are_discarded_by_seq() -> None:
    def answer_stale_first(router: zmq.Socket, frames: list[bytes], index: int) -> None:
        request = unpack(frames[-1])
        stale = {"v": 1, "type": "status", "seq": request["seq"] - 1, "marker": "stale"}
        router.send_multipart([*frames[:-1], pack(stale)])
        reply_with(router, frames, marker="fresh")

    endpoint, stop, thread = scripted_peer(answer_stale_first)
    try:
        with BridgeClient(endpoint, timeout_s=5.0, retries=0) as client:
            client.status()  # seq 1
            assert client.status().reply["marker"] == "fresh"  # seq 2: the stale seq-1 reply is skipped
    finally:
        stop.set()
        thread.join()


def test_lazy_pirate_retries_on_a_fresh_socket() -> None:
    def ignore_first_request(router: zmq.Socket, frames: list[bytes], index: int) -> None:
        if index > 0:
            reply_with(router, frames, marker=f"answered request {index}")

    endpoint, stop, thread = scripted_peer(ignore_first_request)
    try:
        with BridgeClient(endpoint, timeout_s=0.3, retries=1) as client:
            assert client.status().reply["marker"] == "answered request 1"
        with BridgeClient(endpoint, timeout_s=0.3, retries=0) as client:
            client.status()  # answered (index 2)
        silent_endpoint, silent_stop, silent_thread = scripted_peer(lambda *_: None)
        try:
            with (
                BridgeClient(silent_endpoint, timeout_s=0.3, retries=1) as client,
                pytest.raises(BridgeUnreachable) as info,
            ):
                client.status()
            assert "did not answer" in str(info.value)  # connected, but silent: not "refused"
        finally:
            silent_stop.set()
            silent_thread.join()
    finally:
        stop.set()
        thread.join()


def test_garbage_reply_is_a_protocol_error() -> None:
    def garbage(router: zmq.Socket, frames: list[bytes], index: int) -> None:
        router.send_multipart([*frames[:-1], b"\xc1 not msgpack"])

    endpoint, stop, thread = scripted_peer(garbage)
    try:
        with BridgeClient(endpoint, timeout_s=5.0, retries=0) as client, pytest.raises(BridgeProtocolError):
            client.status()
    finally:
        stop.set()
        thread.join()


def test_closed_client_raises(bridge: BridgeProcess) -> None:
    client = BridgeClient(bridge.endpoint)
    client.close()
    with pytest.raises(BridgeError, match="closed"):
        client.status()


def test_bridge_gone_mid_session_is_reported_as_refused(model: bytes) -> None:
    with BridgeProcess(["--hold-timeout-ms", "1000"]) as short_lived:
        client = BridgeClient(short_lived.endpoint, timeout_s=0.5, retries=1)
        client.load_policy(model)
        assert client.act(np.zeros(OBS_DIM)).seq > 0
        assert short_lived.stop() == 0
        with pytest.raises(BridgeUnreachable) as info:
            client.act(np.zeros(OBS_DIM))
        assert "connection refused" in str(info.value)
        client.close()


def test_a_full_peer_cap_is_busy_and_a_full_connection_cap_is_named(model: bytes) -> None:
    """docs/protocol.md section 8: BUSY raises BridgeBusy (not executed, the same connection served once a
    slot frees), and a connection the bridge closes during the handshake is named as its connection cap,
    not as a CurveZMQ failure (the bridge runs without keys)."""
    with BridgeProcess(["--max-peers", "1"]) as small:
        holder = BridgeClient(small.endpoint, timeout_s=2.0)
        deadline = time.monotonic() + 5
        while True:  # the launcher's readiness probe has just left: its slot frees once the bridge sees the close
            try:
                holder.load_policy(model)
                break
            except BridgeBusy:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        refused = BridgeClient(small.endpoint, timeout_s=2.0, retries=0)
        with pytest.raises(BridgeBusy, match="peer cap full.*--max-peers") as info:
            refused.act(np.zeros(OBS_DIM))
        assert info.value.code == ErrorCode.BUSY and isinstance(info.value, BridgeRefused)
        # Two connections are open (twice --max-peers): a third is closed during its handshake.
        third = BridgeClient(small.endpoint, timeout_s=1.0, retries=0)
        with pytest.raises(
            BridgeUnreachable, match="closed the connection during the handshake: its connection cap"
        ) as gave_up:
            third.status()
        third.close()
        # Giving up, the client asks for the status over a new connection; that one is shed as well, or, if the
        # refused third connection has closed by then, admitted to the connection cap and answered BUSY.
        probe_busy = "answers a new connection BUSY" in str(gave_up.value)
        assert holder.status().peers["busy_replies"] == 1 + probe_busy
        holder.close()
        deadline = time.monotonic() + 5
        while True:  # the holder's slot frees: the refused client's own connection is served
            try:
                assert isinstance(refused.act(np.zeros(OBS_DIM)).action, int)
                break
            except BridgeBusy:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        refused.close()


def test_act_within_misses_on_time_and_drops_the_late_reply() -> None:
    """A reply later than the deadline is a miss (None), and when it finally comes it is discarded by seq."""

    def slow_first_act(router: zmq.Socket, frames: list[bytes], index: int) -> None:
        if index == 0:
            time.sleep(0.3)  # the first act's reply comes 300 ms late
        reply_with(router, frames, action=index, setpoint=None, logits=None, infer_ns=1, recv_ns=1, send_ns=2)

    endpoint, stop, thread = scripted_peer(slow_first_act)
    try:
        with BridgeClient(endpoint, timeout_s=5.0, retries=0) as client:
            client.hello_reply = HelloReply.from_reply({"version": 1, "max_message_bytes": 1 << 20})
            # act only once connected: before that the act fails fast (no pipe), not at its deadline
            wait_until = time.monotonic() + 5.0
            while client.connection_count() < 1 and time.monotonic() < wait_until:
                time.sleep(0.01)
            assert client.connection_count() >= 1
            start = time.monotonic()
            assert client.act_within(np.zeros(OBS_DIM), 0.1) is None
            assert 0.09 <= time.monotonic() - start < 0.6  # gave up at the deadline (slack for a loaded CI)
            result = client.act_within(np.zeros(OBS_DIM), 2.0)
            assert result is not None and result.action == 1  # the late reply to act 0 was skipped
            assert client.stale_replies == 1 and client.retries == 0
    finally:
        stop.set()
        thread.join()


def test_act_within_fails_fast_when_the_bridge_is_gone(model: bytes) -> None:
    with BridgeProcess() as short_lived:
        client = BridgeClient(short_lived.endpoint, timeout_s=2.0, retries=0)
        client.load_policy(model)
        assert client.act_within(np.zeros(OBS_DIM), 1.0) is not None
        short_lived.stop()
        give_up = time.monotonic() + HANG_GUARD_S
        while client.connected and time.monotonic() < give_up:  # until the disconnect reaches the monitor
            time.sleep(0.01)
        start = time.monotonic()
        assert client.act_within(np.zeros(OBS_DIM), 1.0) is None
        assert time.monotonic() - start < 0.5  # no pipe and no connection: fail-safe at once, not after 1 s
        assert client.disconnects >= 1
        client.close()


def test_spin_us_must_be_non_negative() -> None:
    for bad in (-1.0, float("nan")):
        with pytest.raises(ValueError, match="spin_us"):
            BridgeClient("tcp://127.0.0.1:5555", spin_us=bad)


@pytest.mark.parametrize("spin_us", [0.0, 2_000.0, 400_000.0])
def test_replies_are_taken_while_spinning_and_while_blocked(spin_us: float) -> None:
    """Reply-wait paths (firmware_bridge.client docstring): whether a reply lands within the first spin_us (non-blocking
    checks) or after them (blocking poll), it is delivered to the right request: replies come at once,
    60 ms late and 5 ms late, against no spin, a spin shorter than the delays and one longer than all."""
    delays = [0.0, 0.06, 0.005]

    def answer_after_delay(router: zmq.Socket, frames: list[bytes], index: int) -> None:
        time.sleep(delays[index % len(delays)])
        reply_with(router, frames, action=index, setpoint=None, logits=None, infer_ns=1, recv_ns=1, send_ns=2)

    endpoint, stop, thread = scripted_peer(answer_after_delay)
    try:
        with BridgeClient(endpoint, timeout_s=5.0, retries=0, spin_us=spin_us) as client:
            assert client.status().reply["seq"] == 1  # index 0: immediate; also waits out the connection
            result = client.act_within(np.zeros(OBS_DIM), 2.0)  # index 1: 60 ms late
            assert result is not None and result.action == 1 and result.rtt_ns >= 60_000_000
            results = [client.act_within(np.zeros(OBS_DIM), 0.5) for _ in range(3)]  # index 2, 3, 4
            assert [r.action for r in results if r is not None] == [2, 3, 4]
            assert client.stale_replies == 0
    finally:
        stop.set()
        thread.join()


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs Linux CPU affinity")
def test_spinning_backs_off_when_another_thread_wants_the_core() -> None:
    """A busy process on the client's core: the client's yields hand it whole time slices, which the client
    sees as contention, so it stops spinning and blocks instead (firmware_bridge.client CONTENDED_GAP_NS)."""

    def answer_after_2ms(router: zmq.Socket, frames: list[bytes], index: int) -> None:
        time.sleep(0.002)
        reply_with(router, frames, action=index, setpoint=None, logits=None, infer_ns=1, recv_ns=1, send_ns=2)

    endpoint, stop, thread = scripted_peer(answer_after_2ms)
    core = min(os.sched_getaffinity(0))
    saved = os.sched_getaffinity(0)
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        os.sched_setaffinity(hog.pid, {core})
        os.sched_setaffinity(0, {core})  # this thread only: the peer thread and ZeroMQ's I/O thread stay free
        with BridgeClient(endpoint, timeout_s=5.0, retries=0, spin_us=50_000) as client:
            client.status()
            results = [client.act_within(np.zeros(OBS_DIM), 2.0) for _ in range(20)]
            assert [r.action for r in results if r is not None] == list(range(1, 21))
            assert client.spin_backoffs >= 1
    finally:
        os.sched_setaffinity(0, saved)
        hog.kill()
        hog.wait()
        stop.set()
        thread.join()


def test_no_spinning_while_acts_take_longer_than_the_spin() -> None:
    """Replies slower than spin_us (a big policy): the client stops spinning, and resumes once acts are quick.

    The spin is 10 ms and the slow replies 50 ms late, far apart from a quick round trip even on a starved CPU (under
    `make test-stress` on a 2-core Xeon VM a quick one took 0.1 ms at the median and 33 ms at worst of 10,000:
    tests/reliability/test_starved_bridge.py), so the average crosses the spin only where the test makes it."""
    slow = range(6, 18)  # requests 6..17 answered 50 ms late, the rest at once

    def answer(router: zmq.Socket, frames: list[bytes], index: int) -> None:
        if index in slow:
            time.sleep(0.05)
        reply_with(router, frames, action=index, setpoint=None, logits=None, infer_ns=1, recv_ns=1, send_ns=2)

    endpoint, stop, thread = scripted_peer(answer)
    try:
        with BridgeClient(endpoint, timeout_s=5.0, retries=0, spin_us=10_000) as client:
            client.status()  # request 0

            def acts(n: int) -> int:
                before = client.spin_waits
                for _ in range(n):
                    assert client.act_within(np.zeros(OBS_DIM), 2.0) is not None
                return client.spin_waits - before

            assert acts(5) >= 1  # requests 1-5: quick, spun
            assert acts(12) <= 3  # 6-17: after two or three 50 ms acts the average passes 10 ms: no more spinning
            assert client.act_rtt_ewma_ns > 10_000_000
            assert acts(60) >= 1  # quick again: the average decays below 10 ms and spinning resumes
            assert client.act_rtt_ewma_ns < 10_000_000
    finally:
        stop.set()
        thread.join()


def test_one_request_in_flight_per_connection() -> None:
    """While an act's reply is late, later acts on that connection are withheld (misses), not queued behind it:
    a frozen link must not hold a burst of stale acts for the bridge to execute when it thaws."""
    received: list[tuple[int, float]] = []
    release = threading.Event()  # the first reply waits for it: a reply as late as the test wants

    def late_first_reply(router: zmq.Socket, frames: list[bytes], index: int) -> None:
        received.append((index, time.monotonic()))
        if index == 0:
            assert release.wait(HANG_GUARD_S)
        reply_with(router, frames, action=index, setpoint=None, logits=None, infer_ns=1, recv_ns=1, send_ns=2)

    endpoint, stop, thread = scripted_peer(late_first_reply)
    try:
        with BridgeClient(endpoint, timeout_s=5.0, retries=0) as client:
            wait_until = time.monotonic() + HANG_GUARD_S
            while client.connection_count() < 1 and time.monotonic() < wait_until:
                time.sleep(0.01)
            assert [client.act_within(np.zeros(OBS_DIM), 0.05) for _ in range(5)] == [None] * 5
            assert client.withheld == 4 and [index for index, _ in received] == [0]
            released_at = time.monotonic()
            release.set()
            result = client.act_within(np.zeros(OBS_DIM), HANG_GUARD_S)  # sent once the late reply to act 0 came
            assert result is not None and result.action == 1 and client.stale_replies == 1
            assert [index for index, _ in received] == [0, 1] and received[1][1] >= released_at
    finally:
        release.set()
        stop.set()
        thread.join()


def build_slow_policy(obs_dim: int = 64, n: int = 768, rounds: int = 48) -> bytes:
    """A discrete policy whose one act keeps the bridge busy: the observation tiled into an n x n matrix, then
    ``rounds`` of tanh(Y @ W) (about 1 s on one core of the 2-core test VM; nothing to fold at load time)."""
    from onnx import TensorProto, helper, numpy_helper

    n_actions = 9
    w = (np.random.default_rng(0).standard_normal((n, n)) / np.sqrt(n)).astype(np.float32)
    constants = {
        "w": w,
        "reps": np.array([n, n // obs_dim], dtype=np.int64),
        "starts": np.array([0, 0], dtype=np.int64),
        "ends": np.array([1, n_actions], dtype=np.int64),
    }
    nodes = [helper.make_node("Tile", ["obs", "reps"], ["y0"])]
    for k in range(rounds):
        nodes += [
            helper.make_node("MatMul", [f"y{k}", "w"], [f"m{k}"]),
            helper.make_node("Tanh", [f"m{k}"], [f"y{k + 1}"]),
        ]
    nodes += [
        helper.make_node("Slice", [f"y{rounds}", "starts", "ends"], ["logits"]),
        helper.make_node("ArgMax", ["logits"], ["action"], axis=1, keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "airq_slow",
        [helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["batch", obs_dim])],
        [
            helper.make_tensor_value_info("action", TensorProto.INT64, ["batch"]),
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", n_actions]),
        ],
        [numpy_helper.from_array(value, name) for name, value in constants.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    helper.set_model_props(model, {"airq.obs_dim": str(obs_dim), "airq.action_space": f"discrete:{n_actions}"})
    return model.SerializeToString()


def status_figure(message: str, field: str) -> int:
    found = re.search(rf"(\d+) [^,;]*\({field}\)", message)
    assert found, f"{field} not named in: {message}"
    return int(found.group(1))


def test_giving_up_names_what_the_bridge_status_says(tmp_path: Path) -> None:
    """A bridge busy with one act for longer than the client's Lazy Pirate attempts stays silent to that client,
    but answers a status over a new connection: the one-line error names the bridge's own figures."""
    path = tmp_path / "slow.onnx"
    path.write_bytes(build_slow_policy())
    with BridgeProcess(["--threads", "1", "--policy", str(path)]) as slow:
        # Three attempts of 0.1 s, each on a fresh connection, while the first act still runs (about 1 s): its
        # reply goes to a connection closed by then, and the later attempts get no answer at all.
        client = BridgeClient(slow.endpoint, timeout_s=0.1, retries=2, status_probe_s=HANG_GUARD_S)
        with pytest.raises(BridgeUnreachable) as info:
            client.act(np.zeros(64))
        client.close()
        message = str(info.value)
        print(f"\n{message}")
        assert "\n" not in message and "after 3 attempt(s) of 0.1 s" in message
        assert "the bridge is alive; its status over a new connection says:" in message
        said = {
            field: status_figure(message, field)
            for field in ("replies_dropped_unread", "dropped_closed", "replies_dropped_closed")
        }
        requests = re.search(r"says: (\d+) requests received \(this one included\), (\d+) acts", message)
        assert requests, message
        assert int(requests.group(1)) >= 3 and int(requests.group(2)) >= 1  # the launcher's hello, the act, the probe
        assert said["replies_dropped_closed"] >= 1 and said["replies_dropped_unread"] == 0
        with BridgeClient(slow.endpoint, timeout_s=HANG_GUARD_S) as probe:
            later = probe.status()
        # the bridge's own counters, which only grow: what the error named is what the bridge had counted
        assert int(requests.group(1)) < later.counters["requests"]
        assert all(said[field] <= later.peers[field] for field in said)


def test_the_control_loop_gives_up_saying_no_status_could_be_read(model: bytes) -> None:
    """A bridge that stops answering (SIGSTOP: the kernel still takes TCP connections, nothing answers them): the
    link gives up at its limit, naming its last miss and that no status could be read over a new connection."""
    from hil.loop import ControlLink, LinkLost, PolicyUpload  # here: the rest of this module needs no simulator

    with BridgeProcess() as frozen:
        client = BridgeClient(frozen.endpoint, timeout_s=0.2, retries=0, status_probe_s=0.3)
        link = ControlLink(client, deadline_s=0.2, policy=PolicyUpload(model, "toy.onnx"), max_outage_s=2.0)
        assert client.status_probe_s == 0  # the link retries by itself and asks for the status once, giving up
        obs = np.zeros(OBS_DIM, dtype=np.float32)
        assert link.call("status", lambda t: client.status(timeout_s=t)).counters["requests"] >= 1
        flying = time.monotonic() + HANG_GUARD_S
        while link.act(obs) is None:  # the policy verified (and uploaded); then an act in time (a loaded CI may miss)
            assert time.monotonic() < flying
        assert frozen.process is not None
        frozen.process.send_signal(signal.SIGSTOP)
        try:
            started = time.monotonic()
            with pytest.raises(LinkLost) as info:
                while time.monotonic() - started < HANG_GUARD_S:
                    link.act(obs)
        finally:
            frozen.process.send_signal(signal.SIGCONT)
        client.close()
        message = str(info.value)
        print(f"\n{message}")
        assert "\n" not in message and "(limit 2 s) while acting (last: " in message
        assert "no status could be read over a new connection within 0.3 s either" in message
        assert "finished episodes are in the log" in message
