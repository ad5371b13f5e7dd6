"""Air Learning-style discrete action table: 25 velocity / yaw-rate setpoints in the body frame.

Each row is ``[vx, vy, vz, yaw_rate]``: forward (m/s), left (m/s), up (m/s), counter-clockwise yaw
rate (rad/s). Unlike Air Learning's public code, the back-up actions really fly backwards.
"""

from __future__ import annotations

import math

import numpy as np


def _polar(speed: float, bearing_deg: float) -> list[float]:
    b = math.radians(bearing_deg)
    return [speed * math.cos(b), speed * math.sin(b), 0.0, 0.0]


def _yaw(rate_deg: float) -> list[float]:
    return [0.0, 0.0, 0.0, math.radians(rate_deg)]


ACTION_NAMES: tuple[str, ...] = (
    "forward 5",
    "forward 4",
    "forward 3",
    "forward 2",
    "forward 1",
    "diagonal left 60",
    "diagonal left 30",
    "hover",
    "diagonal right 30",
    "diagonal right 60",
    "back 1",
    "back 2",
    "back 3",
    "back-left 135",
    "back-right 135",
    "yaw left 15",
    "yaw left 30",
    "yaw left 45",
    "yaw left 60",
    "yaw left 90",
    "yaw right 15",
    "yaw right 30",
    "yaw right 45",
    "yaw right 60",
    "yaw right 90",
)

DISCRETE_ACTIONS = np.array(
    [_polar(s, 0.0) for s in (5.0, 4.0, 3.0, 2.0, 1.0)]
    + [_polar(3.0, 60.0), _polar(3.0, 30.0), [0.0, 0.0, 0.0, 0.0], _polar(3.0, -30.0), _polar(3.0, -60.0)]
    + [_polar(s, 180.0) for s in (1.0, 2.0, 3.0)]
    + [_polar(2.0, 135.0), _polar(2.0, -135.0)]
    + [_yaw(r) for r in (15.0, 30.0, 45.0, 60.0, 90.0)]
    + [_yaw(-r) for r in (15.0, 30.0, 45.0, 60.0, 90.0)],
    dtype=np.float64,
)
DISCRETE_ACTIONS.setflags(write=False)
N_DISCRETE_ACTIONS = len(DISCRETE_ACTIONS)
HOVER_ACTION = ACTION_NAMES.index("hover")
assert N_DISCRETE_ACTIONS == len(ACTION_NAMES) == 25


def action_table_rows() -> list[list[float]]:
    """The table as plain lists, for ONNX metadata and the device bridge."""
    return [[round(float(v), 6) for v in row] for row in DISCRETE_ACTIONS]
