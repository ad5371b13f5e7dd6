"""The AirSim client library, owned by one thread, behind one-line errors.

Both Python clients (``cosysairsim`` and Microsoft's ``airsim``) are blocking and drive a tornado /
asyncio loop of their own: they break when called from inside a running asyncio loop, and their
request timeouts only tick on the thread that created the client. So :class:`ClientThread` creates
the client on a private thread and runs every call there.
"""

from __future__ import annotations

import importlib
import math
import socket
import time
import warnings
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from types import ModuleType
from typing import Any

CLIENT_MODULES = ("cosysairsim", "airsim")  # preference order for client="auto"
INSTALL_HINT = "pip install 'airq[airsim]' (Cosys-AirSim client); see docs/airsim.md for Microsoft's airsim client"


class AirSimError(RuntimeError):
    """The AirSim backend cannot run: client missing, simulator unreachable, or a server-side error."""


class AirSimConnectionError(AirSimError):
    """The simulator cannot be reached (or the connection was lost)."""


def check_msgpack() -> None:
    """Refuse msgpack < 1.0: msgpack-python 0.5.x (pulled in by ``pip install airsim``) decodes
    strings as bytes and is ~30x slower on depth frames."""
    try:
        # deferred: msgpack is checked here (missing, or too old for the AirSim clients: a one-line AirSimError)
        import msgpack
    except ImportError:
        raise AirSimError(f"msgpack is not installed: {INSTALL_HINT}") from None
    version = tuple(getattr(msgpack, "version", (0,)))
    if version < (1, 0):
        raise AirSimError(
            f"msgpack {'.'.join(map(str, version))} is too old for the AirSim backend (need >= 1.0; "
            "msgpack-python 0.5 comes with `pip install airsim`): pip install -U 'msgpack>=1.0' rpc-msgpack, "
            "then reinstall the client as in docs/airsim.md"
        )


def import_client(name: str = "auto") -> ModuleType:
    """The client module: ``cosysairsim`` or ``airsim`` (``"auto"``: the first one installed)."""
    check_msgpack()
    names = CLIENT_MODULES if name == "auto" else (name,)
    if name not in ("auto", *CLIENT_MODULES):
        raise ValueError(f"unknown AirSim client {name!r} (known: auto, {', '.join(CLIENT_MODULES)})")
    errors = []
    for n in names:
        try:
            return importlib.import_module(n)
        except ImportError as e:
            errors.append(f"{n}: {e}")
    raise AirSimError(f"no AirSim client library ({'; '.join(errors)}): {INSTALL_HINT}")


def rpc_errors() -> tuple[type[Exception], ...]:
    """(TransportError, TimeoutError, RPCError) of the msgpack-rpc module both clients use."""
    # deferred: msgpackrpc: the airsim extra
    from msgpackrpc import error

    return error.TransportError, error.TimeoutError, error.RPCError


def wait_for_port(host: str, port: int, timeout_s: float) -> None:
    """Retry a TCP connect until the simulator listens or ``timeout_s`` passes (the client library
    itself gives up after 5 immediate retries, or hangs on an unroutable host)."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        try:
            with socket.create_connection((host, port), timeout=max(0.05, min(left, 2.0))):
                return
        except OSError as e:
            reason = e.strerror or type(e).__name__
            if time.monotonic() + 0.25 >= deadline:
                raise AirSimConnectionError(
                    f"cannot reach the AirSim simulator at {host}:{port} within {timeout_s:g} s ({reason}); "
                    "is it running, with the API server on that port?"
                ) from None
            time.sleep(0.25)


class ClientThread:
    """One ``MultirotorClient`` living on one private thread; :meth:`call` runs a function of the
    client there and turns the library's exceptions into :class:`AirSimError` with one-line messages."""

    def __init__(self, module: ModuleType, host: str, port: int, rpc_timeout_s: float) -> None:
        self.module, self.host, self.port = module, host, port
        self.rpc_timeout_s = rpc_timeout_s
        self._pool: ThreadPoolExecutor | None = ThreadPoolExecutor(max_workers=1, thread_name_prefix="airsim-client")
        self._client = None
        self._errors = rpc_errors()
        timeout = max(1, int(math.ceil(rpc_timeout_s)))  # msgpackrpc counts whole seconds
        self._run(
            lambda: setattr(self, "_client", module.MultirotorClient(ip=host, port=port, timeout_value=timeout)),
            "connect",
        )

    def set_nodelay(self) -> None:
        """Turn off Nagle's algorithm on the connection (after the first call has opened it). The
        library leaves it on, which in lockstep mode (a request sent while the previous one is
        still unanswered) waits for the server's delayed ACK: ~40 ms a step."""

        def tune(c: Any) -> None:
            for sock in getattr(getattr(c.client, "_transport", None), "_sockets", ()):
                try:
                    sock._stream.set_nodelay(True)
                except Exception:  # noqa: BLE001 - a latency tweak on library internals, never fatal
                    pass

        self.call("set_nodelay", tune)

    def call(self, what: str, fn: Callable[[Any], Any]) -> Any:
        """Run ``fn(client)`` on the client thread; ``what`` names the call in errors."""
        return self._run(lambda: fn(self._client), what)

    def _run(self, fn: Callable[[], Any], what: str) -> Any:
        if self._pool is None:
            raise AirSimError("the AirSim env is closed")
        fut: Future = self._pool.submit(fn)
        try:
            # the library's own timeout ticks once a second; leave it room to fire first
            return fut.result(timeout=self.rpc_timeout_s + 5.0)
        except FutureTimeout:
            raise AirSimError(
                f"AirSim {what}: no answer from {self.host}:{self.port} within {self.rpc_timeout_s:g} s"
            ) from None
        except Exception as e:  # noqa: BLE001 - mapped to one-line errors below
            transport, timeout, rpc = self._errors
            if isinstance(e, transport):
                raise AirSimConnectionError(
                    f"AirSim {what}: lost or no connection to the simulator at {self.host}:{self.port} ({_msg(e)})"
                ) from None
            if isinstance(e, timeout):
                raise AirSimError(
                    f"AirSim {what}: no answer from {self.host}:{self.port} within {self.rpc_timeout_s:g} s"
                ) from None
            if isinstance(e, rpc):
                raise AirSimError(f"AirSim {what}: the simulator reported an error: {_msg(e)}") from None
            raise

    def close(self) -> None:
        if self._pool is None:
            return
        client, pool = self._client, self._pool
        if client is not None:
            try:
                pool.submit(lambda: client.client.close()).result(timeout=5)
            except Exception:  # noqa: BLE001 - best effort on shutdown
                pass
        pool.shutdown(wait=False)
        self._pool = None


def _msg(e: BaseException) -> str:
    m = e.args[0] if e.args else str(e)
    if isinstance(m, bytes):
        m = m.decode("utf-8", "replace")
    return " ".join(str(m).split())


def warn_versions(server: int, min_client: int, client: int, min_server: int, where: str) -> None:
    if client < min_client:
        raise AirSimError(
            f"AirSim at {where} needs client version >= {min_client}, this client is {client}: upgrade it"
        )
    if server < min_server:
        warnings.warn(
            f"AirSim server at {where} is API version {server}, the client expects >= {min_server}; "
            "the backend only uses calls both versions share",
            stacklevel=3,
        )
