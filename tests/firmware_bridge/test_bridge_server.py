"""The bridge as a real subprocess, spoken to over real ZeroMQ TCP sockets on loopback."""

from __future__ import annotations

import os
import platform
import socket
import time
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import onnxruntime as ort
import pytest
import zmq
from bridge_helpers import N_ACTIONS, OBS_DIM, RawClient, local_outputs

import firmware_bridge
from firmware_bridge.protocol import (
    DEFAULT_MAX_MESSAGE_BYTES,
    PROTOCOL_VERSION,
    TRANSPORT_SLACK_BYTES,
    ErrorCode,
    act_request,
    hello_request,
    load_policy_request,
    pack,
    request,
    reset_request,
    status_request,
)
from firmware_bridge.toy_policy import default_action_table


def act_ok(client: RawClient, obs: np.ndarray, seq: int = 1000) -> dict[str, Any]:
    reply = client.call(act_request(seq, obs))
    assert reply["type"] == "act", reply
    assert reply["seq"] == seq
    return reply


def assert_act_matches_local(reply: dict[str, Any], model: bytes, obs: np.ndarray) -> None:
    expected = local_outputs(model, obs)
    assert reply["action"] == int(expected["action"][0])
    np.testing.assert_allclose(np.frombuffer(reply["logits"], "<f4"), expected["logits"][0], rtol=1e-5, atol=1e-6)
    assert reply["setpoint"] == default_action_table(N_ACTIONS)[reply["action"]]


def test_hello_describes_device_and_negotiates_version(bridge: Any) -> None:
    client = RawClient(bridge.endpoint)
    reply = client.call(hello_request(5, client="test"))
    assert (reply["type"], reply["seq"], reply["version"], reply["v"]) == (
        "hello",
        5,
        PROTOCOL_VERSION,
        PROTOCOL_VERSION,
    )
    device = reply["device"]
    assert device["hostname"] == socket.gethostname()
    assert device["machine"] == platform.machine()
    assert device["cores"] == os.cpu_count()
    assert device["ram_bytes"] > 0 and isinstance(device["cpu_model"], str) and device["cpu_model"]
    assert device["onnxruntime_version"] == ort.__version__
    assert device["python_version"] == platform.python_version()
    assert device["bridge_version"] == reply["bridge_version"] == firmware_bridge.__version__
    assert reply["max_message_bytes"] == DEFAULT_MAX_MESSAGE_BYTES
    assert reply["policy"] is None and reply["actuator"] == "mock" and reply["hold_timeout_ms"] == 200
    # A newer client offering versions [2, 1] is answered in version 1.
    newer = client.call({"v": 2, "type": "hello", "seq": 6, "versions": [2, PROTOCOL_VERSION]})
    assert newer["type"] == "hello" and newer["version"] == PROTOCOL_VERSION
    client.close()


def test_upload_then_act_matches_local_onnxruntime(bridge: Any, discrete_model: bytes, obs: np.ndarray) -> None:
    client = RawClient(bridge.endpoint)
    assert client.call(act_request(1, obs))["code"] == ErrorCode.NO_POLICY
    loaded = client.call(load_policy_request(2, discrete_model, name="toy"))
    assert loaded["type"] == "load_policy" and loaded["seq"] == 2
    assert loaded["sha256"] == firmware_bridge.protocol.sha256_hex(discrete_model)
    assert loaded["size_bytes"] == len(discrete_model)
    assert (loaded["obs_dim"], loaded["action_space"], loaded["input_name"]) == (
        OBS_DIM,
        f"discrete:{N_ACTIONS}",
        "obs",
    )
    assert loaded["output_names"] == ["action", "logits"] and loaded["name"] == "toy"
    assert loaded["load_time_ns"] > 0 and loaded["replaced_sha256"] is None
    rng = np.random.default_rng(3)
    for seq in range(10, 15):
        observation = rng.standard_normal(OBS_DIM).astype(np.float32)
        reply = act_ok(client, observation, seq)
        assert_act_matches_local(reply, discrete_model, observation)
        assert reply["infer_ns"] > 0 and reply["recv_ns"] <= reply["send_ns"]
    # [1, obs_dim] is as good as [obs_dim].
    assert act_ok(client, obs.reshape(1, -1))["action"] == int(local_outputs(discrete_model, obs)["action"][0])
    client.close()


def test_req_socket_and_several_clients_are_served(loaded_bridge: Any, obs: np.ndarray) -> None:
    req = zmq.Context.instance().socket(zmq.REQ)
    req.setsockopt(zmq.LINGER, 0)
    req.connect(loaded_bridge.endpoint)
    dealers = [RawClient(loaded_bridge.endpoint) for _ in range(2)]
    for seq in range(3):
        for index, dealer in enumerate(dealers):
            dealer.send_raw(pack(act_request(100 * index + seq, obs)))
        req.send(pack(status_request(900 + seq)))
        assert req.poll(5000)
        assert msgpack.unpackb(req.recv())["seq"] == 900 + seq
        for index, dealer in enumerate(dealers):
            reply = dealer.receive()
            assert reply is not None and reply["seq"] == 100 * index + seq
    req.close()
    for dealer in dealers:
        dealer.close()


BAD_REQUESTS = {
    "malformed-msgpack": (b"\xc1\xff not msgpack", ErrorCode.BAD_MESSAGE, None),
    "not-a-map": (msgpack.packb([1, 2]), ErrorCode.BAD_MESSAGE, None),
    "missing-seq": (pack({"v": 1, "type": "status"}), ErrorCode.BAD_MESSAGE, None),
    "unknown-type": (pack(request("takeoff", 41)), ErrorCode.UNKNOWN_TYPE, 41),
    "wrong-version": (pack({"v": 99, "type": "act", "seq": 42}), ErrorCode.VERSION_MISMATCH, 42),
    "hello-no-common-version": (
        pack({"v": 9, "type": "hello", "seq": 43, "versions": [9]}),
        ErrorCode.VERSION_MISMATCH,
        43,
    ),
    "obs-too-short": (pack(act_request(44, np.zeros(OBS_DIM - 1, np.float32))), ErrorCode.BAD_OBSERVATION, 44),
    "obs-float64": (
        pack(request("act", 45, obs=np.zeros(OBS_DIM).tobytes(), shape=[OBS_DIM], dtype="float64")),
        ErrorCode.BAD_OBSERVATION,
        45,
    ),
    "obs-bad-shape": (
        pack(request("act", 46, obs=np.zeros(OBS_DIM, np.float32).tobytes(), shape=[2, OBS_DIM // 2])),
        ErrorCode.BAD_OBSERVATION,
        46,
    ),
    "obs-as-list": (pack(request("act", 47, obs=[0.0] * OBS_DIM, shape=[OBS_DIM])), ErrorCode.BAD_OBSERVATION, 47),
    "obs-nan": (pack(act_request(48, np.full(OBS_DIM, np.nan, np.float32))), ErrorCode.BAD_OBSERVATION, 48),
    "obs-inf": (
        pack(act_request(49, np.r_[np.zeros(OBS_DIM - 1), np.inf].astype(np.float32))),
        ErrorCode.BAD_OBSERVATION,
        49,
    ),
    "load-missing-bytes": (pack(request("load_policy", 50, sha256="00")), ErrorCode.BAD_MESSAGE, 50),
    "load-sha256-mismatch": (
        pack(request("load_policy", 51, onnx=b"abc", sha256="0" * 64)),
        ErrorCode.HASH_MISMATCH,
        51,
    ),
    "load-not-onnx": (pack(load_policy_request(52, b"GIF89a definitely not a model")), ErrorCode.BAD_POLICY, 52),
}


@pytest.mark.parametrize("case", sorted(BAD_REQUESTS))
def test_bad_request_gets_error_code_and_bridge_keeps_serving(
    case: str, raw: RawClient, discrete_model: bytes, obs: np.ndarray
) -> None:
    payload, code, seq = BAD_REQUESTS[case]
    reply = raw.call_raw(payload)
    assert (reply["type"], reply["code"], reply["seq"]) == ("error", code, seq)
    assert isinstance(reply["message"], str) and reply["message"] and "\n" not in reply["message"]
    if code == ErrorCode.VERSION_MISMATCH:
        assert reply["supported_versions"] == [PROTOCOL_VERSION]
    assert_act_matches_local(act_ok(raw, obs), discrete_model, obs)


def test_truncated_upload_keeps_previous_policy(
    raw: RawClient, discrete_model: bytes, other_discrete_model: bytes, obs: np.ndarray
) -> None:
    before = act_ok(raw, obs)
    truncated = other_discrete_model[: len(other_discrete_model) // 2]
    assert raw.call(load_policy_request(1, truncated))["code"] == ErrorCode.BAD_POLICY
    tampered = request(
        "load_policy", 2, onnx=other_discrete_model, sha256=firmware_bridge.protocol.sha256_hex(discrete_model)
    )
    assert raw.call(tampered)["code"] == ErrorCode.HASH_MISMATCH
    after = act_ok(raw, obs)
    assert after["action"] == before["action"] and after["logits"] == before["logits"]
    assert raw.call(hello_request(3))["policy"]["sha256"] == firmware_bridge.protocol.sha256_hex(discrete_model)

    replaced = raw.call(load_policy_request(4, other_discrete_model))
    assert replaced["replaced_sha256"] == firmware_bridge.protocol.sha256_hex(discrete_model)
    assert_act_matches_local_logits_only(act_ok(raw, obs), other_discrete_model, obs)


def assert_act_matches_local_logits_only(reply: dict[str, Any], model: bytes, obs: np.ndarray) -> None:
    expected = local_outputs(model, obs)
    assert reply["action"] == int(expected["action"][0])
    np.testing.assert_allclose(np.frombuffer(reply["logits"], "<f4"), expected["logits"][0], rtol=1e-5, atol=1e-6)


def test_oversize_messages(
    start_bridge: Any, discrete_model_file: Path, discrete_model: bytes, obs: np.ndarray
) -> None:
    limit = 16 * 1024
    bridge = start_bridge(
        "--policy",
        str(discrete_model_file),
        "--max-message-bytes",
        str(limit),
        "--max-model-bytes",
        str(len(discrete_model) - 1),
    )
    client = RawClient(bridge.endpoint)
    hello = client.call(hello_request(1))
    assert (hello["max_message_bytes"], hello["max_model_bytes"]) == (limit, len(discrete_model) - 1)
    # Over the limit but within the transport slack: read, refused politely, seq echoed.
    padded = request("act", 2, obs=obs.tobytes(), shape=[OBS_DIM], padding=b"\0" * limit)
    reply = client.call(padded)
    assert (reply["code"], reply["seq"]) == (ErrorCode.TOO_LARGE, 2)
    # A model one byte over --max-model-bytes is refused at its first chunk, before any is stored.
    upload = client.call(
        request(
            "load_policy",
            3,
            onnx=discrete_model[:1000],
            size=len(discrete_model),
            offset=0,
            sha256=firmware_bridge.protocol.sha256_hex(discrete_model),
        )
    )
    assert (upload["code"], upload["seq"]) == (ErrorCode.TOO_LARGE, 3) and "--max-model-bytes" in upload["message"]
    assert_act_matches_local(act_ok(client, obs), discrete_model, obs)

    # Beyond limit + slack ZeroMQ itself drops the connection: no reply, and the bridge lives on.
    client.send_raw(b"\0" * (limit + TRANSPORT_SLACK_BYTES + 1))
    assert client.receive(timeout_ms=1000) is None
    client.close()
    fresh = RawClient(bridge.endpoint)
    assert_act_matches_local(act_ok(fresh, obs), discrete_model, obs)
    status = fresh.call(status_request(9))
    assert status["errors_by_code"] == {ErrorCode.TOO_LARGE: 2}
    fresh.close()


def test_status_counters_and_reset(loaded_bridge: Any, discrete_model: bytes, obs: np.ndarray) -> None:
    client = RawClient(loaded_bridge.endpoint)  # the launcher already sent 1 hello
    for seq in range(3):
        act_ok(client, obs, seq)
    client.call(act_request(10, obs[:5]))
    client.call_raw(b"\xc1")
    client.call(request("takeoff", 11))
    status = client.call(status_request(12))
    assert status["type"] == "status" and status["seq"] == 12
    assert status["counters"] == {"requests": 1 + 6 + 1, "acts": 3, "errors": 3, "holds": 0, "loads": 1, "resets": 0}
    assert status["errors_by_code"] == {"BAD_OBSERVATION": 1, "BAD_MESSAGE": 1, "UNKNOWN_TYPE": 1}
    assert status["rss_bytes"] > 0 and status["peak_rss_bytes"] >= status["rss_bytes"]
    assert status["model_bytes"] == len(discrete_model)
    assert isinstance(status["model_rss_delta_bytes"], int)
    assert status["cpu_user_s"] + status["cpu_sys_s"] > 0 and status["uptime_s"] > 0
    assert status["episode"]["index"] == 0 and status["episode"]["acts"] == 3 and status["episode"]["errors"] == 3
    actuator = status["actuator"]
    assert actuator["commands_total"] == 3 and actuator["timed_intervals"] == 2 and actuator["rate_hz"] > 0
    assert actuator["current_setpoint"] == default_action_table(N_ACTIONS)[act_ok(client, obs, 13)["action"]]

    reset = client.call(reset_request(14))
    assert reset["type"] == "reset" and reset["episode"] == 1
    assert (reset["previous_episode"]["acts"], reset["previous_episode"]["errors"]) == (4, 3)
    after = client.call(status_request(15))
    assert after["counters"]["acts"] == 4 and after["counters"]["resets"] == 1
    assert (after["episode"]["index"], after["episode"]["acts"], after["episode"]["errors"]) == (1, 0, 0)
    assert after["actuator"]["episode_commands"] == 0 and after["actuator"]["holding"]
    assert after["actuator"]["current_setpoint"] == [0.0, 0.0, 0.0, 0.0]
    client.close()


def wait_for_status(client: RawClient, predicate: Any, deadline_s: float = 10.0) -> dict[str, Any]:
    """Poll status until predicate holds; the deadline only guards against a hang."""
    end = time.monotonic() + deadline_s
    while True:
        status = client.call(status_request(0))
        if predicate(status) or time.monotonic() > end:
            return status
        time.sleep(0.02)


def test_mock_flight_controller_holds_when_acts_stop(
    start_bridge: Any, discrete_model_file: Path, obs: np.ndarray
) -> None:
    bridge = start_bridge("--policy", str(discrete_model_file), "--hold-timeout-ms", "60")
    client = RawClient(bridge.endpoint)
    first = client.call(status_request(1))
    assert first["actuator"]["holding"] and first["counters"]["holds"] == 0  # hovering from boot, not a timeout hold
    for seq in range(20):
        act_ok(client, obs, seq)
    status = wait_for_status(client, lambda s: s["counters"]["holds"] == 1)
    assert status["counters"]["holds"] == 1 and status["episode"]["holds"] == 1
    actuator = status["actuator"]
    assert actuator["holding"] and actuator["current_setpoint"] == [0.0, 0.0, 0.0, 0.0]
    assert actuator["commands_total"] == 20 and actuator["timed_intervals"] == 19 and actuator["rate_hz"] > 0
    assert actuator["last_hold_ns"] >= actuator["last_command_ns"] + 60_000_000
    # Still exactly one hold (no act since), and the next act resumes control.
    assert client.call(status_request(2))["counters"]["holds"] == 1
    act_ok(client, obs, 99)
    assert not client.call(status_request(3))["actuator"]["holding"]
    client.close()


def test_sigterm_stops_bridge_cleanly(bridge: Any) -> None:
    assert bridge.stop() == 0
    assert "stopped after" in bridge.stderr_text()


def test_watchdog_holds_within_its_timeout_and_before_a_policy_upload(
    start_bridge: Any, discrete_model_file: Path, other_discrete_model: bytes, obs: np.ndarray
) -> None:
    """The hold comes no later than timeout + one poll period; an upload (which stalls the loop) holds first."""
    bridge = start_bridge("--policy", str(discrete_model_file), "--hold-timeout-ms", "200")
    client = RawClient(bridge.endpoint)
    act_ok(client, obs, 1)
    status = wait_for_status(client, lambda s: s["counters"]["holds"] == 1)
    actuator = status["actuator"]
    late_ns = actuator["last_hold_ns"] - actuator["last_command_ns"]
    assert 200_000_000 <= late_ns <= (200 + 50 + 200) * 1_000_000  # timeout + poll period + scheduling slack
    act_ok(client, obs, 2)  # flying again
    reply = client.call(load_policy_request(3, other_discrete_model, name="swap"))
    assert reply["type"] == "load_policy"
    status = client.call(status_request(4))
    assert status["counters"]["holds"] == 2 and status["actuator"]["holding"]
    client.close()
