"""AirSim / Cosys-AirSim backend for nav_env (see docs/airsim.md).

Importing this package needs no client library; constructing :class:`AirSimNavEnv` does
(``pip install 'airq[airsim]'``). :mod:`nav_env.airsim.fake_server` is a scripted stand-in
simulator speaking AirSim's msgpack-rpc protocol, for tests and for trying the backend.
"""

from nav_env.airsim.client import AirSimConnectionError, AirSimError
from nav_env.airsim.env import AirSimNavEnv, open_arena_episode
from nav_env.airsim.scene import Scene

__all__ = ["AirSimNavEnv", "AirSimError", "AirSimConnectionError", "Scene", "open_arena_episode"]
