"""Fixtures: small real ONNX policies, and the bridge running as a real subprocess on loopback."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from bridge_helpers import N_ACTIONS, OBS_DIM, RawClient

from firmware_bridge.launcher import BridgeProcess
from firmware_bridge.toy_policy import build_mlp_policy


@pytest.fixture(scope="session")
def discrete_model() -> bytes:
    # hidden 48: 200 KB, so raw clients here upload it in one message (under the default 256 KiB
    # --max-message-bytes); chunked uploads have their own tests (tests/reliability/test_bridge_memory.py).
    return build_mlp_policy(OBS_DIM, hidden=48, n_actions=N_ACTIONS, seed=1)


@pytest.fixture(scope="session")
def other_discrete_model() -> bytes:
    """Same contract, different weights: to tell which policy is loaded."""
    return build_mlp_policy(OBS_DIM, hidden=48, n_actions=N_ACTIONS, seed=2)


@pytest.fixture(scope="session")
def discrete_model_file(tmp_path_factory: pytest.TempPathFactory, discrete_model: bytes) -> Path:
    path = tmp_path_factory.mktemp("policies") / "toy_discrete.onnx"
    path.write_bytes(discrete_model)
    return path


@pytest.fixture
def obs() -> np.ndarray:
    return np.random.default_rng(7).standard_normal(OBS_DIM).astype(np.float32)


@pytest.fixture
def start_bridge() -> Iterator[Any]:
    """Factory: start_bridge(*cli_args) -> running BridgeProcess; all are stopped at teardown."""
    started: list[BridgeProcess] = []

    def start(*args: str) -> BridgeProcess:
        bridge = BridgeProcess(list(args)).start()
        started.append(bridge)
        return bridge

    yield start
    for bridge in started:
        bridge.close()


@pytest.fixture
def bridge(start_bridge: Any) -> BridgeProcess:
    """A bridge with no policy loaded."""
    return start_bridge()


@pytest.fixture
def loaded_bridge(start_bridge: Any, discrete_model_file: Path) -> BridgeProcess:
    return start_bridge("--policy", str(discrete_model_file))


@pytest.fixture
def raw(loaded_bridge: BridgeProcess) -> Iterator[RawClient]:
    client = RawClient(loaded_bridge.endpoint)
    yield client
    client.close()
