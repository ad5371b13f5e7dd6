"""The bridge a policy flies through, for the length of that policy: started here (a :class:`LocalBridge`, started
again if it dies) or reached on a device (a :class:`RemoteBridge`), then stopped."""

from __future__ import annotations

import time

from airq_cli import UserError
from device_emulation.arm import emulated_bridge_command
from firmware_bridge.client import BridgeClient
from firmware_bridge.keys import ClientCurve, KeyFileError
from firmware_bridge.launcher import BridgeProcess
from hil.loop import Event, Supervisor
from hil.setup import BridgeTarget, LocalBridge

RESTART_INTERVAL_S = 1.0  # a local bridge that dies at once is not restarted in a tight loop


class BridgeSession:
    """``with BridgeSession(target, timeout_s) as client:`` the bridge for one policy: a local bridge is started on
    entering and stopped on leaving (``process`` while it runs), a remote one reached; the client is closed on
    leaving."""

    def __init__(self, target: BridgeTarget, timeout_s: float) -> None:
        self.target, self.timeout_s = target, timeout_s
        self.process: BridgeProcess | None = None  # a local bridge, once started
        self.client: BridgeClient | None = None  # once connected
        self._last_restart = 0.0

    def supervisor(self) -> Supervisor | None:
        """What restarts a local bridge that died (hil.loop.ControlLink calls it on every miss); a device has none."""
        return self if self.process is not None else None

    def check(self) -> Event | None:
        """A local bridge process that died is started again on the same port. The restart does not wait for the
        new process: the client reconnects by itself once it listens."""
        process = self.process
        if process is None or process.alive or time.monotonic() - self._last_restart < RESTART_INTERVAL_S:
            return None
        old_pid = process.pid
        exit_code = process.process.returncode if process.process else None
        self._last_restart = time.monotonic()
        process.restart(wait=False)
        return {"event": "bridge_restarted", "old_pid": old_pid, "exit_code": exit_code, "pid": process.pid}

    def __enter__(self) -> BridgeClient:
        target, curve = self.target, None
        if isinstance(target, LocalBridge):
            actuator = ["--actuator", "mavlink", "--fc", target.fc] if target.fc else ["--actuator", "mock"]
            if target.fc_signing_key:
                actuator += ["--fc-signing-key", target.fc_signing_key]
            self.process = BridgeProcess(["--threads", str(target.threads), *actuator])
            if target.device_arch == "aarch64":
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
