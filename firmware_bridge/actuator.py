"""Where setpoints go after inference: the flight-controller side of the bridge.

An :class:`Actuator` takes velocity setpoints ``[vx, vy, vz, yaw_rate]`` (m/s,
rad/s). The interface is deliberately tiny so a real link can slot in later:

* ``command(setpoint, t_ns)``  send one setpoint (called once per act);
* ``hold(t_ns)``               go to hover (zero velocity) - the failsafe;
* ``reset()``                  new episode: hover and clear per-episode stats;
* ``stats()``                  msgpack-able dict for the status reply;
* ``close()``                  release the link (serial port, socket...);
* ``vehicle()``                the vehicle's state for every act reply (None: no vehicle behind it);
* ``link_error()``             why setpoints cannot reach the vehicle now (None: they can);
* ``vehicle_command(...)``     arm, disarm, take off, change mode (refused by an actuator without a vehicle).

:class:`MockFlightController` records and measures; :mod:`firmware_bridge.mavlink_actuator`
sends the setpoints to ArduPilot or PX4 over MAVLink (the ``mavlink`` extra). Timeouts stay in
:class:`HoldWatchdog`, which is actuator-agnostic; the flight controller's own offboard-loss
failsafe remains the last line of defence if the Pi itself dies.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import numpy as np

from firmware_bridge.protocol import SETPOINT_DIM

HOVER_SETPOINT: tuple[float, ...] = (0.0,) * SETPOINT_DIM


class Actuator(ABC):
    name: str = "actuator"

    @abstractmethod
    def command(self, setpoint: Sequence[float], t_ns: int) -> None:
        """Send one [vx, vy, vz, yaw_rate] setpoint; t_ns is time.monotonic_ns() of the act."""

    @abstractmethod
    def hold(self, t_ns: int) -> None:
        """Go to hover (zero velocity). Called by the watchdog and on reset."""

    @abstractmethod
    def reset(self) -> None:
        """Start a new episode: hover and clear per-episode statistics."""

    @abstractmethod
    def stats(self) -> dict[str, Any]:
        """Counters and timing figures, msgpack-serialisable."""

    def close(self) -> None:  # noqa: B027 - optional for actuators with nothing to release
        """Release the link."""

    def tick(self, now_ns: int) -> None:  # noqa: B027 - optional for actuators with nothing timed
        """Called by the bridge's loop at least every poll timeout (50 ms), acts or not: for work that takes time
        (a hold that brakes before it hovers)."""

    def flies_on_setpoints(self) -> bool:
        """Whether the vehicle now flies on the bridge's setpoint stream alone: then the watchdog holds when no act
        follows a reset or a mode change, as it does when none follows an act (an autopilot's offboard mode left
        without setpoints falls to the autopilot's own failsafe, which the bridge cannot tell from a pilot's)."""
        return False

    def vehicle(self) -> dict[str, Any] | None:
        """The vehicle's state as every act reply carries it (``autopilot``, ``mode``, ``armed``, ``link_ok``),
        or None: nothing behind this actuator reports one."""
        return None

    def link_error(self) -> str | None:
        """One line saying why a setpoint cannot reach the vehicle now (its link is lost), else None."""
        return None

    def vehicle_command(self, command: str, args: dict[str, Any]) -> None:
        """Run one explicit vehicle command (``arm``, ``disarm``, ``takeoff`` with ``altitude_m``, ``mode`` with
        ``mode``), waiting for the vehicle's answer; VehicleCommandError (one line) if refused."""
        raise VehicleCommandError(f"the {self.name} actuator has no vehicle to {command}: start the bridge with "
                                  "--actuator mavlink --fc ENDPOINT")  # fmt: skip


class VehicleCommandError(RuntimeError):
    """A vehicle command was refused or not answered (the message says which and why)."""


class MockFlightController(Actuator):
    """Stands in for the flight controller on the bench: records and measures, flies nothing.

    Every command lands in a fixed-size ring buffer (preallocated numpy arrays,
    so recording allocates nothing per act). Rate and jitter are computed from
    the inter-command intervals in the buffer, skipping intervals that span a
    hold or a reset - those are gaps in control, not jitter.
    """

    name = "mock"

    def __init__(self, capacity: int = 4096) -> None:
        if capacity < 2:
            raise ValueError("capacity must be >= 2")
        self.capacity = capacity
        self._times_ns = np.zeros(capacity, dtype=np.int64)
        self._setpoints = np.zeros((capacity, SETPOINT_DIM), dtype=np.float32)
        # True where the command follows a hold/reset: its interval is not a control period.
        self._after_gap = np.zeros(capacity, dtype=bool)
        self._next = 0  # ring write index
        self._stored = 0  # valid entries in the ring
        self._gap_pending = True
        self.commands_total = 0
        self.holds_total = 0
        self.episode_commands = 0
        self.episode_holds = 0
        self.holding = True  # a fresh controller hovers until the first command
        self.current_setpoint: tuple[float, ...] = HOVER_SETPOINT
        self.last_command_ns: int | None = None
        self.last_hold_ns: int | None = None

    def command(self, setpoint: Sequence[float], t_ns: int) -> None:
        i = self._next
        self._times_ns[i] = t_ns
        self._setpoints[i] = setpoint
        self._after_gap[i] = self._gap_pending
        self._gap_pending = False
        self._next = (i + 1) % self.capacity
        if self._stored < self.capacity:
            self._stored += 1
        self.commands_total += 1
        self.episode_commands += 1
        self.holding = False
        self.current_setpoint = tuple(setpoint)
        self.last_command_ns = t_ns

    def hold(self, t_ns: int) -> None:
        self.holds_total += 1
        self.episode_holds += 1
        self._enter_hover(t_ns)

    def reset(self) -> None:
        self.episode_commands = 0
        self.episode_holds = 0
        self._stored = 0
        self._next = 0
        self._enter_hover(None)

    def _enter_hover(self, t_ns: int | None) -> None:
        self.holding = True
        self.current_setpoint = HOVER_SETPOINT
        self.last_hold_ns = t_ns if t_ns is not None else self.last_hold_ns
        self._gap_pending = True

    def recent_commands(self) -> tuple[np.ndarray, np.ndarray]:
        """(times_ns, setpoints) of the buffered commands, oldest first (copies)."""
        order = self._ring_order()
        return self._times_ns[order].copy(), self._setpoints[order].copy()

    def _ring_order(self) -> np.ndarray:
        start = (self._next - self._stored) % self.capacity
        return (start + np.arange(self._stored)) % self.capacity

    def stats(self) -> dict[str, Any]:
        order = self._ring_order()
        times = self._times_ns[order]
        intervals_ns = np.diff(times)[~self._after_gap[order][1:]] if times.size > 1 else np.empty(0, np.int64)
        timing: dict[str, float | None] = dict.fromkeys(
            ("rate_hz", "interval_mean_ms", "jitter_ms", "interval_p99_ms", "interval_max_ms")
        )
        if intervals_ns.size:
            intervals_ms = intervals_ns / 1e6
            mean_ms = float(intervals_ms.mean())
            timing = {
                "rate_hz": 1000.0 / mean_ms if mean_ms > 0 else math.inf,
                "interval_mean_ms": mean_ms,
                # Jitter = standard deviation of the command period.
                "jitter_ms": float(intervals_ms.std()),
                "interval_p99_ms": float(np.percentile(intervals_ms, 99)),
                "interval_max_ms": float(intervals_ms.max()),
            }
        return {
            "kind": self.name,
            "holding": self.holding,
            "current_setpoint": list(self.current_setpoint),
            "commands_total": self.commands_total,
            "holds_total": self.holds_total,
            "episode_commands": self.episode_commands,
            "episode_holds": self.episode_holds,
            "last_command_ns": self.last_command_ns,
            "last_hold_ns": self.last_hold_ns,
            "buffered_commands": int(order.size),
            "timed_intervals": int(intervals_ns.size),
            **timing,
        }


class HoldWatchdog:
    """Sends the actuator to hover when no command arrived within ``timeout_ns``.

    Driven by the server's poll loop (``tick`` after every poll, which times out
    several times per hold period), so it needs no thread and no locking. The
    watchdog arms on the first command and disarms after firing once: it
    reports a stale control loop, not the idle time between episodes.
    """

    def __init__(self, actuator: Actuator, timeout_ns: int) -> None:
        if timeout_ns <= 0:
            raise ValueError("hold timeout must be positive")
        self.actuator = actuator
        self.timeout_ns = timeout_ns
        self._deadline_ns: int | None = None
        self.holds = 0

    def command(self, setpoint: Sequence[float], t_ns: int) -> None:
        self.actuator.command(setpoint, t_ns)
        self._deadline_ns = t_ns + self.timeout_ns

    def expect_command(self, now_ns: int) -> None:
        """Start the deadline without an act when the vehicle flies on the setpoint stream (a reset, a mode change):
        if no act follows, hold."""
        if self.actuator.flies_on_setpoints():
            self._deadline_ns = now_ns + self.timeout_ns

    def tick(self, now_ns: int) -> bool:
        """Fire the hold if the deadline passed; return True if it fired. The actuator's own tick runs first."""
        self.actuator.tick(now_ns)
        if self._deadline_ns is not None and now_ns >= self._deadline_ns:
            self._deadline_ns = None
            self.holds += 1
            self.actuator.hold(now_ns)
            return True
        return False

    def hold_now(self, now_ns: int) -> bool:
        """Fire the hold immediately if armed (a command is in force); return True if it fired.

        For work that stalls the receive loop (a policy upload): the deadline could not be checked
        while it runs, so hover first.
        """
        if self._deadline_ns is None:
            return False
        self._deadline_ns = None
        self.holds += 1
        self.actuator.hold(now_ns)
        return True

    def reset(self) -> None:
        self._deadline_ns = None
        self.actuator.reset()
