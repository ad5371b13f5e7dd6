"""Shared helpers for the firmware_bridge tests (a uniquely named module, so it never clashes with other conftests)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnxruntime as ort
import zmq

from firmware_bridge.protocol import pack, unpack

OBS_DIM = 1032
N_ACTIONS = 25


def local_outputs(model: bytes, observation: np.ndarray) -> dict[str, np.ndarray]:
    """The reference: the same model run by a local onnxruntime session."""
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    values = session.run(names, {"obs": observation.reshape(1, -1).astype(np.float32)})
    return dict(zip(names, values, strict=True))


class RawClient:
    """A bare DEALER socket: sends arbitrary bytes, so tests can send what BridgeClient never would."""

    def __init__(self, endpoint: str, timeout_ms: int = 5000) -> None:
        self.timeout_ms = timeout_ms
        self.socket = zmq.Context.instance().socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.connect(endpoint)

    def send_raw(self, payload: bytes) -> None:
        self.socket.send_multipart([b"", payload])

    def receive(self, timeout_ms: int | None = None) -> dict[str, Any] | None:
        if not self.socket.poll(self.timeout_ms if timeout_ms is None else timeout_ms):
            return None
        return unpack(self.socket.recv_multipart()[-1])

    def call_raw(self, payload: bytes) -> dict[str, Any]:
        self.send_raw(payload)
        reply = self.receive()
        assert reply is not None, "bridge did not reply"
        return reply

    def call(self, message: dict[str, Any]) -> dict[str, Any]:
        return self.call_raw(pack(message))

    def close(self) -> None:
        self.socket.close(linger=0)
