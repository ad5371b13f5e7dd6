"""MockFlightController and HoldWatchdog, driven with synthetic timestamps (no sleeping)."""

from __future__ import annotations

import numpy as np
import pytest

from firmware_bridge.actuator import HOVER_SETPOINT, HoldWatchdog, MockFlightController
from firmware_bridge.actuators import make_actuator

MS = 1_000_000


def test_records_commands_and_measures_rate_and_jitter() -> None:
    fc = MockFlightController(capacity=16)
    periods_ms = [10, 12, 8, 10, 10]
    t = 1_000 * MS
    fc.command([0.1, 0.0, 0.0, 0.0], t)
    for i, period in enumerate(periods_ms):
        t += period * MS
        fc.command([0.1 * i, 0.2, 0.3, 0.4], t)
    stats = fc.stats()
    assert stats["commands_total"] == 6 and stats["timed_intervals"] == 5
    assert stats["rate_hz"] == pytest.approx(100.0)
    assert stats["interval_mean_ms"] == pytest.approx(10.0)
    assert stats["jitter_ms"] == pytest.approx(np.std(periods_ms))
    assert stats["interval_max_ms"] == pytest.approx(12.0)
    assert not stats["holding"]
    assert stats["current_setpoint"] == pytest.approx([0.4, 0.2, 0.3, 0.4])


def test_ring_buffer_keeps_the_latest_commands_in_order() -> None:
    fc = MockFlightController(capacity=4)
    for i in range(10):
        fc.command([float(i), 0, 0, 0], i * MS)
    times, setpoints = fc.recent_commands()
    assert times.tolist() == [6 * MS, 7 * MS, 8 * MS, 9 * MS]
    assert setpoints[:, 0].tolist() == [6.0, 7.0, 8.0, 9.0]
    assert fc.stats()["buffered_commands"] == 4 and fc.commands_total == 10


def test_gap_after_hold_is_not_counted_as_jitter() -> None:
    fc = MockFlightController()
    fc.command([1, 0, 0, 0], 0)
    fc.command([1, 0, 0, 0], 10 * MS)
    fc.hold(500 * MS)
    fc.command([1, 0, 0, 0], 2000 * MS)  # after a 2 s gap: not a control period
    fc.command([1, 0, 0, 0], 2010 * MS)
    stats = fc.stats()
    assert stats["timed_intervals"] == 2
    assert stats["interval_max_ms"] == pytest.approx(10.0) and stats["jitter_ms"] == pytest.approx(0.0)


def test_hold_goes_to_hover_and_counts() -> None:
    fc = MockFlightController()
    fc.command([1, 2, 3, 4], 0)
    fc.hold(5 * MS)
    assert fc.holding and fc.current_setpoint == HOVER_SETPOINT
    assert fc.stats()["holds_total"] == 1 and fc.stats()["last_hold_ns"] == 5 * MS


def test_reset_clears_episode_but_keeps_totals() -> None:
    fc = MockFlightController()
    fc.command([1, 2, 3, 4], 0)
    fc.hold(1)
    fc.reset()
    stats = fc.stats()
    assert (stats["episode_commands"], stats["episode_holds"], stats["buffered_commands"]) == (0, 0, 0)
    assert (stats["commands_total"], stats["holds_total"]) == (1, 1)
    assert stats["holding"] and stats["rate_hz"] is None


def test_watchdog_fires_once_after_timeout_and_rearms_on_command() -> None:
    fc = MockFlightController()
    watchdog = HoldWatchdog(fc, timeout_ns=200 * MS)
    assert not watchdog.tick(10_000 * MS)  # never commanded: nothing to hold
    watchdog.command([1, 0, 0, 0], 0)
    assert not watchdog.tick(199 * MS)
    assert watchdog.tick(200 * MS)
    assert fc.holding and fc.holds_total == 1
    assert not watchdog.tick(1_000 * MS)  # already holding: one hold per stale period
    watchdog.command([1, 0, 0, 0], 1_000 * MS)
    assert not fc.holding
    assert watchdog.tick(1_300 * MS) and watchdog.holds == 2


def test_watchdog_reset_disarms() -> None:
    fc = MockFlightController()
    watchdog = HoldWatchdog(fc, timeout_ns=MS)
    watchdog.command([1, 0, 0, 0], 0)
    watchdog.reset()
    assert not watchdog.tick(10 * MS) and fc.holds_total == 0 and fc.holding


def test_factory_rejects_unknown_kind() -> None:
    assert isinstance(make_actuator("mock"), MockFlightController)
    with pytest.raises(ValueError, match="unknown actuator"):
        make_actuator("mavlink-typo")
