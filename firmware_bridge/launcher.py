"""Start the bridge as a real separate process on an ephemeral loopback port.

Used by the bench, hil.run --sim-only and the tests: the bridge binds
``tcp://127.0.0.1:*`` and prints the port it got, so there is no "find a free
port, then race for it". :meth:`BridgeProcess.restart` starts a replacement on
the *same* port, so connected clients find it again by themselves (that is how
a sim-only run recovers from a crashed bridge).

On Linux the bridge gets SIGTERM when the process that started it dies
(PR_SET_PDEATHSIG), so a killed host never leaves an orphan bridge holding
the port.
"""

from __future__ import annotations

import ctypes
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from types import TracebackType

from firmware_bridge.cli import READY_PREFIX
from firmware_bridge.client import BridgeClient, BridgeError
from firmware_bridge.keys import ClientCurve

_PR_SET_PDEATHSIG = 1
_prctl: Callable[..., int] | None
try:  # looked up here, not in the child: dlopen() between fork and exec could deadlock on a loader lock
    _prctl = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # not Linux
    _prctl = None


def _die_with_parent() -> None:
    """preexec_fn: SIGTERM this child when its parent dies (Linux only; a no-op elsewhere).

    The signal fires when the *thread* that forked the child exits, so BridgeProcess must only
    be started from a thread that lives as long as the bridge should (hil.run uses the main thread).
    """
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


class BridgeStartError(RuntimeError):
    pass


class BridgeProcess:
    """``with BridgeProcess(["--policy", path]) as bridge: ... bridge.endpoint``"""

    def __init__(
        self,
        args: Sequence[str] = (),
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        startup_timeout_s: float = 30.0,
        client_curve: ClientCurve | None = None,
    ) -> None:
        self._bind = f"tcp://{host}:{port or '*'}"
        self.args = [sys.executable, "-m", "firmware_bridge.serve", "--bind", self._bind, *args]
        self.startup_timeout_s = startup_timeout_s
        self.client_curve = client_curve  # keys for the readiness hello when the bridge runs CurveZMQ
        self.endpoint = ""
        self.process: subprocess.Popen[str] | None = None
        self.starts = 0
        # stderr to a file, not a pipe: a chatty bridge must never block on a full pipe nobody reads.
        self._stderr = tempfile.TemporaryFile(mode="w+t")  # noqa: SIM115 - lives as long as the process; closed in close()

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def spawn(self) -> None:
        """Start the process without waiting for it to be ready (see poll_ready)."""
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.process = subprocess.Popen(
            self.args, stdout=subprocess.PIPE, stderr=self._stderr, text=True, env=env, preexec_fn=_die_with_parent
        )
        self.starts += 1

    def start(self) -> BridgeProcess:
        self.spawn()
        try:
            self.endpoint = self._read_endpoint()
            self._wait_for_hello()
        except BaseException:
            self.stop()
            raise
        return self

    def restart(self, *, wait: bool = True) -> None:
        """Replace a dead (or live) bridge with a new process on the same port.

        ``wait=False`` returns right after the fork; clients reconnect on their own once the new
        process binds. The old process is reaped first so its port is free.
        """
        if not self.endpoint:
            raise BridgeStartError("restart() needs a bridge that started once (its port is reused)")
        self.stop()
        # Same host as asked for, the port the first start got (the printed endpoint may be IPv6-mapped).
        port = self.endpoint.rsplit(":", 1)[1]
        same_port = self._bind.rsplit(":", 1)[0] + ":" + port
        self.args = [same_port if a == self._bind else a for a in self.args]
        self._bind = same_port
        if wait:
            self.start()
        else:
            self.spawn()

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
        """Ready = the bridge answers hello (with the same client the control loop uses); one attempt."""
        try:
            with BridgeClient(
                self.endpoint,
                timeout_s=self.startup_timeout_s,
                retries=0,
                curve=self.client_curve,
                client_name="firmware_bridge.launcher",
            ) as client:
                client.hello()
        except BridgeError as exc:
            raise BridgeStartError(f"bridge did not answer hello: {exc}") from None

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
