"""The bridge a policy flies through, for the length of that policy: started here (a :class:`LocalBridge`, restarted
by :class:`LocalBridgeSupervisor` if it dies) or reached on a device (a :class:`RemoteBridge`), then stopped."""

from __future__ import annotations

import time

from airq_cli import UserError
from firmware_bridge.client import BridgeClient
from firmware_bridge.keys import ClientCurve, KeyFileError
from firmware_bridge.launcher import BridgeProcess
from hil.loop import Event
from hil.setup import BridgeTarget, LocalBridge


class LocalBridgeSupervisor:
    """--sim-only: notices that the local bridge process died and starts a new one on the same port.

    Called from the control loop (main thread) on every missed act; the restart does not wait for
    the new process, the client reconnects by itself once it listens.
    """

    def __init__(self, process: BridgeProcess, min_interval_s: float = 1.0) -> None:
        self.process = process
        self.min_interval_s = min_interval_s  # a bridge that dies at once is not restarted in a tight loop
        self._last_restart = 0.0

    def check(self) -> Event | None:
        if self.process.alive or time.monotonic() - self._last_restart < self.min_interval_s:
            return None
        old_pid = self.process.pid
        exit_code = self.process.process.returncode if self.process.process else None
        self._last_restart = time.monotonic()
        self.process.restart(wait=False)
        return {"event": "bridge_restarted", "old_pid": old_pid, "exit_code": exit_code, "pid": self.process.pid}


class BridgeSession:
    """``with BridgeSession(target, timeout_s) as client:`` the bridge for one policy: a local bridge is started on
    entering and stopped on leaving (``process`` while it runs), a remote one reached; the client is closed on
    leaving."""

    def __init__(self, target: BridgeTarget, timeout_s: float) -> None:
        self.target, self.timeout_s = target, timeout_s
        self.process: BridgeProcess | None = None  # a local bridge, once started
        self.client: BridgeClient | None = None  # once connected

    def supervisor(self) -> LocalBridgeSupervisor | None:
        return LocalBridgeSupervisor(self.process) if self.process is not None else None

    def __enter__(self) -> BridgeClient:
        target, curve = self.target, None
        if isinstance(target, LocalBridge):
            actuator = ["--actuator", "mavlink", "--fc", target.fc] if target.fc else ["--actuator", "mock"]
            self.process = BridgeProcess(["--threads", str(target.threads), *actuator])
            if target.device_arch == "aarch64":
                from device_emulation.arm import emulated_bridge_command  # prepares (or reuses) the arm64 root fs

                self.process.args = emulated_bridge_command(self.process.args[1:])
            self.process.args = target.profile.launch_prefix() + self.process.args
            endpoint = self.process.start().endpoint
        else:
            endpoint = target.endpoint
            if target.keys is not None:
                try:
                    curve = ClientCurve.from_files(*target.keys)
                except KeyFileError as e:
                    raise UserError(str(e)) from None
        self.client = BridgeClient(endpoint, timeout_s=self.timeout_s, curve=curve)
        return self.client

    def __exit__(self, *exc: object) -> None:
        if self.client is not None:
            self.client.close()
        if self.process is not None:
            self.process.close()
