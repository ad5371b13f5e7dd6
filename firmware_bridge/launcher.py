"""Start the bridge as a real separate process on an ephemeral loopback port.

Used by the bench (and the tests): the bridge binds ``tcp://127.0.0.1:*`` and
prints the port it got, so there is no "find a free port, then race for it".
"""

from __future__ import annotations

import os
import selectors
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from types import TracebackType

import zmq

from firmware_bridge.cli import READY_PREFIX
from firmware_bridge.protocol import MsgType, hello_request, pack, unpack


class BridgeStartError(RuntimeError):
    pass


class BridgeProcess:
    """``with BridgeProcess(["--policy", path]) as bridge: ... bridge.endpoint``"""

    def __init__(self, args: Sequence[str] = (), *, host: str = "127.0.0.1", startup_timeout_s: float = 30.0) -> None:
        self.args = [sys.executable, "-m", "firmware_bridge.serve", "--bind", f"tcp://{host}:*", *args]
        self.startup_timeout_s = startup_timeout_s
        self.endpoint = ""
        self.process: subprocess.Popen[str] | None = None
        # stderr to a file, not a pipe: a chatty bridge must never block on a full pipe nobody reads.
        self._stderr = tempfile.TemporaryFile(mode="w+t")  # noqa: SIM115 - lives as long as the process; closed in close()

    def start(self) -> BridgeProcess:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.process = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=self._stderr, text=True, env=env)
        try:
            self.endpoint = self._read_endpoint()
            self._wait_for_hello()
        except BaseException:
            self.stop()
            raise
        return self

    def _read_endpoint(self) -> str:
        assert self.process is not None and self.process.stdout is not None
        deadline = time.monotonic() + self.startup_timeout_s
        with selectors.DefaultSelector() as selector:
            selector.register(self.process.stdout, selectors.EVENT_READ)
            while time.monotonic() < deadline:
                if selector.select(timeout=0.1):
                    line = self.process.stdout.readline()
                    if line.startswith(READY_PREFIX):
                        return line[len(READY_PREFIX) :].strip()
                    if not line:  # EOF: the bridge exited
                        break
        self.process.poll()
        raise BridgeStartError(
            f"bridge did not start (exit code {self.process.returncode}): {self.stderr_text().strip()[-2000:]}"
        )

    def _wait_for_hello(self) -> None:
        sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.REQ)
        sock.setsockopt(zmq.LINGER, 0)
        try:
            sock.connect(self.endpoint)
            sock.send(pack(hello_request(0, client="firmware_bridge.launcher")))
            if not sock.poll(int(self.startup_timeout_s * 1000)):
                raise BridgeStartError(f"bridge at {self.endpoint} did not answer hello")
            reply = unpack(sock.recv())
            if reply.get("type") != MsgType.HELLO:
                raise BridgeStartError(f"bridge at {self.endpoint} answered hello with {reply}")
        finally:
            sock.close()

    def stderr_text(self) -> str:
        self._stderr.flush()
        self._stderr.seek(0)
        return self._stderr.read()

    def stop(self, timeout_s: float = 5.0) -> int | None:
        """SIGTERM, then SIGKILL if it doesn't exit; returns the exit code."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout_s)
        if self.process.stdout is not None:
            self.process.stdout.close()
        return self.process.returncode

    def close(self) -> None:
        self.stop()
        self._stderr.close()

    def __enter__(self) -> BridgeProcess:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
