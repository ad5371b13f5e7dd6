"""Fixtures for the AirSim backend tests: a fake AirSim server on an ephemeral localhost port,
driven by the real client library (``cosysairsim`` from the ``airsim`` extra; Microsoft's ``airsim``
too when it is installed)."""

from __future__ import annotations

import importlib.util

import pytest

from nav_env.airsim.fake_server import FakeAirSimServer

CLIENTS = [
    pytest.param(
        name,
        marks=pytest.mark.skipif(
            importlib.util.find_spec(name) is None,
            reason=f"AirSim client library {name!r} not installed (pip install 'airq[airsim]'"
            + (")" if name == "cosysairsim" else "; Microsoft's client: see docs/airsim.md)"),
        ),
    )
    for name in ("cosysairsim", "airsim")
]


@pytest.fixture(params=CLIENTS)
def client_name(request):
    return request.param


@pytest.fixture
def serve():
    """serve(cfg, scene, **options) -> a started FakeAirSimServer, stopped after the test."""
    servers = []

    def start(*args, **kwargs) -> FakeAirSimServer:
        s = FakeAirSimServer(*args, **kwargs).start()
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.stop()


@pytest.fixture
def connect(client_name):
    """connect(server, cfg, **options) -> an AirSimNavEnv on that server, closed after the test."""
    from nav_env.airsim import AirSimNavEnv

    envs = []

    def make(server, cfg, **kwargs):
        kwargs.setdefault("timeout_s", 5.0)
        kwargs.setdefault("rpc_timeout_s", 5.0)
        env = AirSimNavEnv(config=cfg, host=server.host, port=server.port, client=client_name, **kwargs)
        envs.append(env)
        return env

    yield make
    for e in envs:
        e.close()
