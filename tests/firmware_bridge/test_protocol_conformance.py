"""docs/protocol.md, section by section, against a real bridge process over TCP.

The client here is written from the document (raw ZeroMQ sockets + msgpack), not hil/client.py. The
reply-field tables and the error-code table are read out of docs/protocol.md itself, so a field the
server drops or renames, or a code the doc lists that nothing triggers, fails here.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest
import zmq
from bridge_helpers import N_ACTIONS, OBS_DIM
from onnx import TensorProto, helper

DOC = (Path(__file__).resolve().parents[2] / "docs" / "protocol.md").read_text()
V = 1


# ------------------------------------------------------------------ reading the document


def section(heading: str) -> str:
    start = DOC.index(heading)
    rest = DOC[start + len(heading):]
    end = re.search(r"^#{2,3} ", rest, re.M)
    return rest[: end.start()] if end else rest


def table_after(text: str, marker: str) -> list[tuple[str, str]]:
    """(name, type) for each field row of the first markdown table after `marker`; a row naming
    several fields (`a`, `b` | str, int) gives one pair per field."""
    body = text[text.index(marker):]
    rows, started = [], False
    for line in body.splitlines():
        if line.startswith("|"):
            started = True
            cells = [c.strip() for c in line.strip("|").split("|")]
            if cells[0] in ("field", "code", "limit") or set(cells[0]) <= {"-"}:
                continue
            names = re.findall(r"`([^`]+)`", cells[0])
            types = [t.strip() for t in cells[1].split(",")] if len(names) > 1 else [cells[1]]
            rows += list(zip(names, types if len(types) == len(names) else types * len(names), strict=True))
        elif started:
            break
    assert rows, f"no table after {marker!r}"
    return rows


def conforms(value: Any, doc_type: str) -> bool:
    """The doc's type words: int, float, str, bin, map (str→str...), [int], [str], [float], 'X or Y', 'X or nil'."""
    for alternative in (t.strip() for t in doc_type.split(" or ")):
        if alternative == "nil" and value is None:
            return True
        if alternative.startswith("["):
            inner = alternative[1:-1]
            if type(value) is list and all(conforms(v, inner) for v in value):
                return True
        elif alternative.startswith("map"):
            if type(value) is dict:
                return True
        elif alternative.startswith("int"):
            if type(value) is int:
                return True
        elif alternative == "float":
            if type(value) is float:
                return True
        elif alternative == "str":
            if type(value) is str:
                return True
        elif alternative == "bin":
            if type(value) is bytes:
                return True
        else:
            raise AssertionError(f"the test does not know the doc type {alternative!r}")
    return False


def assert_reply_matches_table(reply: dict[str, Any], rows: list[tuple[str, str]]) -> None:
    for name, doc_type in rows:
        assert name in reply, f"documented field {name!r} missing from {reply.get('type')} reply"
        assert conforms(reply[name], doc_type), f"{name}={reply[name]!r} is not {doc_type}"


# ------------------------------------------------------------------ a client from the doc


class DocClient:
    """Section 1: DEALER, [b"", payload]; the payload is the last frame of the reply."""

    def __init__(self, endpoint: str, kind: int = zmq.DEALER, delimiter: bool = True) -> None:
        self.socket = zmq.Context.instance().socket(kind)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.connect(endpoint)
        self.kind, self.delimiter = kind, delimiter

    def raw(self, payload: bytes) -> dict[str, Any]:
        if self.kind == zmq.REQ:
            self.socket.send(payload)
        else:
            self.socket.send_multipart([b"", payload] if self.delimiter else [payload])
        assert self.socket.poll(5000), "no reply within 5 s"
        return msgpack.unpackb(self.socket.recv_multipart()[-1], raw=False)

    def call(self, message: dict[str, Any]) -> dict[str, Any]:
        return self.raw(msgpack.packb(message, use_bin_type=True))

    def close(self) -> None:
        self.socket.close(linger=0)


@pytest.fixture
def doc_bridge(start_bridge: Any) -> Any:
    return start_bridge()


@pytest.fixture
def client(doc_bridge: Any) -> Any:
    c = DocClient(doc_bridge.endpoint)
    yield c
    c.close()


def sha(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def act(seq: int, obs: np.ndarray, **override: Any) -> dict[str, Any]:
    message = {"v": V, "type": "act", "seq": seq, "obs": obs.astype("<f4").tobytes(), "shape": [OBS_DIM],
               "dtype": "<f4"}
    message.update(override)
    return message


def upload(seq: int, model: bytes, **override: Any) -> dict[str, Any]:
    message = {"v": V, "type": "load_policy", "seq": seq, "onnx": model, "sha256": sha(model), "name": "doc"}
    message.update(override)
    return message


# ------------------------------------------------------------------ 1. transport


@pytest.mark.parametrize("kind,delimiter", [(zmq.DEALER, True), (zmq.DEALER, False), (zmq.REQ, True)])
def test_1_transport_dealer_with_and_without_delimiter_and_req(doc_bridge: Any, kind: int, delimiter: bool) -> None:
    c = DocClient(doc_bridge.endpoint, kind, delimiter)
    try:
        for seq in (1, 2):
            reply = c.call({"v": V, "type": "status", "seq": seq})
            assert (reply["type"], reply["seq"]) == ("status", seq)
        assert c.raw(b"\xc1 not msgpack")["code"] == "BAD_MESSAGE"  # one reply per request, always
    finally:
        c.close()


def test_1_bind_prints_the_address_asked_for(doc_bridge: Any) -> None:
    # With IPv6 enabled libzmq reports tcp://[::ffff:127.0.0.1]:P; the bridge prints the IPv4 form.
    assert re.fullmatch(r"tcp://127\.0\.0\.1:\d+", doc_bridge.endpoint), doc_bridge.endpoint


def test_1_payload_map_keys_strings_once_unknown_fields_ignored(client: DocClient) -> None:
    int_key = client.raw(msgpack.packb({"v": V, "type": "status", "seq": 3, 7: "x"}))
    assert (int_key["code"], int_key["seq"]) == ("BAD_MESSAGE", None) and "keys must be strings" in int_key["message"]
    # A fixmap announcing 4 entries whose "seq" comes twice: valid msgpack, refused.
    duplicate = b"\x84" + b"".join(msgpack.packb(x) for x in ("v", V, "type", "status", "seq", 4, "seq", 5))
    reply = client.raw(duplicate)
    assert reply["code"] == "BAD_MESSAGE" and "duplicate key" in reply["message"]
    assert client.call({"v": V, "type": "status", "seq": 6, "future_field": [1, 2]})["type"] == "status"


def test_1_ints_are_ints_not_floats_or_bools(client: DocClient, doc_bridge: Any, discrete_model: bytes) -> None:
    assert client.call(upload(1, discrete_model))["type"] == "load_policy"
    obs = np.zeros(OBS_DIM, np.float32)
    for shape in ([float(OBS_DIM)], [1.0, float(OBS_DIM)], [True, OBS_DIM], [1, float(OBS_DIM)]):
        reply = client.call(act(2, obs, shape=shape))
        assert reply["code"] == "BAD_OBSERVATION", (shape, reply)
    assert client.call(act(3, obs, shape=[1, OBS_DIM]))["type"] == "act"


# ------------------------------------------------------------------ 2. envelope


def test_2_envelope_and_seq_range(client: DocClient) -> None:
    rows = table_after(section("## 2. Envelope"), "Every **request** has:")
    assert [name for name, _ in rows] == ["v", "type", "seq"]
    for seq in (0, 2**63, 2**64 - 1):
        assert client.call({"v": V, "type": "status", "seq": seq})["seq"] == seq
    for bad in (-1, -(2**63), 1.5, "3", None, True):
        reply = client.call({"v": V, "type": "status", "seq": bad})
        assert (reply["type"], reply["code"], reply["seq"]) == ("error", "BAD_MESSAGE", None), bad


def test_2_error_envelope_fields(client: DocClient) -> None:
    reply = client.call({"v": V, "type": "takeoff", "seq": 9})
    rows = table_after(section("## 2. Envelope"), 'a failure has `type: "error"`')
    assert_reply_matches_table(reply, [r for r in rows if r[0] != "supported_versions"])
    assert reply["v"] == V and reply["seq"] == 9 and "\n" not in reply["message"]
    mismatch = client.call({"v": 99, "type": "status", "seq": 10})
    assert mismatch["code"] == "VERSION_MISMATCH" and mismatch["supported_versions"] == [V]


# ------------------------------------------------------------------ 3. version negotiation


def test_3_hello_at_any_int_v_and_never_a_non_int(client: DocClient) -> None:
    newer = client.call({"v": 7, "type": "hello", "seq": 1, "versions": [7, V]})
    assert newer["type"] == "hello" and newer["version"] == V and newer["v"] == V
    assert client.call({"v": V, "type": "hello", "seq": 2})["version"] == V  # versions defaults to [v]
    none = client.call({"v": 7, "type": "hello", "seq": 3, "versions": [7]})
    assert none["code"] == "VERSION_MISMATCH" and none["supported_versions"] == [V]
    for bad_v in ("x", 1.0, None):
        assert client.call({"v": bad_v, "type": "hello", "seq": 4})["code"] == "BAD_MESSAGE"


# ------------------------------------------------------------------ 4. messages: every documented reply field


def test_4_every_documented_reply_field_with_its_type(client: DocClient, discrete_model: bytes) -> None:
    hello = client.call({"v": V, "type": "hello", "seq": 1, "versions": [V], "client": "doc"})
    assert_reply_matches_table(hello, table_after(section("### 4.1 `hello`"), "Reply:"))
    loaded = client.call(upload(2, discrete_model))
    summary_rows = table_after(section("### 4.2 `load_policy`"), "Reply (also the `policy` summary")
    assert_reply_matches_table(loaded, summary_rows)
    assert loaded["action_space"] == f"discrete:{N_ACTIONS}" and loaded["received"] == len(discrete_model)
    reply = client.call(act(3, np.ones(OBS_DIM, np.float32)))
    assert_reply_matches_table(reply, table_after(section("### 4.3 `act`"), "Reply:"))
    status = client.call({"v": V, "type": "status", "seq": 4})
    assert_reply_matches_table(status, table_after(section("### 4.4 `status`"), "Reply:"))
    # The policy summary inside hello/status carries the same fields (but not the upload-only ones).
    again = client.call({"v": V, "type": "hello", "seq": 5})
    assert_reply_matches_table(again["policy"], [r for r in summary_rows if r[0] not in ("replaced_sha256", "received")])
    reset = client.call({"v": V, "type": "reset", "seq": 6})
    assert_reply_matches_table(reset, table_after(section("### 4.5 `reset`"), "Reply:"))


def test_4_2_chunked_upload_as_written(client: DocClient, discrete_model: bytes) -> None:
    size, step = len(discrete_model), 60_000
    rows = table_after(section("### 4.2 `load_policy`"), "the others")
    for offset in range(0, size, step):
        chunk = discrete_model[offset:offset + step]
        reply = client.call(upload(10 + offset, chunk, sha256=sha(discrete_model), size=size, offset=offset))
        if offset + step < size:
            assert_reply_matches_table(reply, rows)
            assert reply["received"] == offset + len(chunk)
            # A resend is acknowledged without change.
            assert client.call(upload(11 + offset, chunk, sha256=sha(discrete_model), size=size,
                                      offset=offset))["received"] == offset + len(chunk)
    assert reply["sha256"] == sha(discrete_model) and reply["received"] == size
    gap = client.call(upload(99, b"x", sha256=sha(b"xy"), size=2, offset=1))
    assert gap["code"] == "BAD_MESSAGE" and "offset 0" in gap["message"]


def test_4_2_sha256_is_lowercase_hex(client: DocClient, discrete_model: bytes) -> None:
    reply = client.call(upload(1, discrete_model, sha256=sha(discrete_model).upper()))
    assert reply["code"] == "BAD_MESSAGE" and "lowercase" in reply["message"]
    assert client.call(upload(2, discrete_model, sha256=sha(discrete_model)))["type"] == "load_policy"


def test_4_2_a_single_float_output_is_read_as_logits_whatever_its_name(client: DocClient) -> None:
    weights = helper.make_tensor("w", TensorProto.FLOAT, [8, 6], np.arange(48, dtype=np.float32).tolist())
    graph = helper.make_graph([helper.make_node("MatMul", ["obs", "w"], ["q_values"])], "q",
                              [helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["batch", 8])],
                              [helper.make_tensor_value_info("q_values", TensorProto.FLOAT, ["batch", 6])],
                              initializer=[weights])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    data = model.SerializeToString()
    loaded = client.call(upload(1, data))
    assert loaded["type"] == "load_policy", loaded
    assert loaded["action_space"] == "discrete:6" and loaded["output_names"] == ["q_values"]
    obs = np.zeros(8, np.float32)
    obs[0] = 1.0  # q = w[0] = 0..5: argmax 5
    reply = client.call({"v": V, "type": "act", "seq": 2, "obs": obs.tobytes(), "shape": [8]})
    assert reply["action"] == 5 and np.frombuffer(reply["logits"], "<f4").tolist() == [0, 1, 2, 3, 4, 5]


def test_4_3_dtype_exactly_as_written(client: DocClient, discrete_model: bytes) -> None:
    client.call(upload(1, discrete_model))
    obs = np.zeros(OBS_DIM, np.float32)
    for dtype in ("<f4", "float32"):
        assert client.call(act(2, obs, dtype=dtype))["type"] == "act"
    assert client.call({k: v for k, v in act(3, obs).items() if k != "dtype"})["type"] == "act"  # optional
    for dtype in ("f4", "<f8", "FLOAT32", 4):
        assert client.call(act(4, obs, dtype=dtype))["code"] == "BAD_OBSERVATION", dtype


# ------------------------------------------------------------------ 5. error codes: each documented trigger


def test_5_every_documented_code_has_its_trigger(client: DocClient, discrete_model: bytes) -> None:
    documented = {name for name, _ in table_after(section("## 5. Error codes"), "| code | when |")}
    obs = np.zeros(OBS_DIM, np.float32)
    triggers = {
        "BAD_MESSAGE": lambda: client.raw(b"\xc1\xff"),
        "UNKNOWN_TYPE": lambda: client.call({"v": V, "type": "takeoff", "seq": 1}),
        "VERSION_MISMATCH": lambda: client.call({"v": 99, "type": "act", "seq": 2}),
        "NO_POLICY": lambda: client.call(act(3, obs)),
        "BAD_POLICY": lambda: client.call(upload(4, b"\x0a\x05 not a model")),
        "HASH_MISMATCH": lambda: client.call(upload(5, discrete_model, sha256=sha(b"other"))),
        "TOO_LARGE": lambda: client.call(upload(6, b"x", size=2**40, offset=0)),
        "BAD_OBSERVATION": lambda: (client.call(upload(7, discrete_model)), client.call(act(8, obs[:-1])))[1],
    }
    # INTERNAL is a device-side failure (a bug or onnxruntime runtime error): no request may cause it.
    assert documented == set(triggers) | {"INTERNAL"}
    for code, trigger in triggers.items():
        reply = trigger()
        assert reply["type"] == "error" and reply["code"] == code, (code, reply)


# ------------------------------------------------------------------ 9. the example


def test_9_the_example_exchange(client: DocClient, discrete_model: bytes) -> None:
    hello = client.call({"v": 1, "type": "hello", "seq": 1, "versions": [1], "client": "fc-test"})
    assert (hello["v"], hello["type"], hello["seq"], hello["version"]) == (1, "hello", 1, 1)
    assert hello["max_message_bytes"] == int(re.search(r'"max_message_bytes":(\d+)', section("## 9.")).group(1))
    client.call(upload(2, discrete_model))
    reply = client.call({"v": 1, "type": "act", "seq": 2, "obs": np.zeros(OBS_DIM, "<f4").tobytes(),
                         "shape": [OBS_DIM], "dtype": "<f4"})
    assert (reply["type"], reply["seq"]) == ("act", 2) and len(reply["logits"]) == 4 * N_ACTIONS
    assert type(reply["action"]) is int and len(reply["setpoint"]) == 4
    error = client.raw(b"\xc1\xff")
    assert error == {"v": 1, "type": "error", "seq": None, "code": "BAD_MESSAGE",
                     "message": "payload is not valid msgpack (FormatError)"}
