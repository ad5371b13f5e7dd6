"""One flight of the MAVLink actuator against an ArduCopter SITL binary, run inside a private network namespace
(SITL binds every interface; ``unshare -n`` leaves it only a loopback): start the binary, wait for the EKF to use
GPS, GUIDED, arm, take off to 5 m, fly forward at 2 m/s turning at 0.3 rad/s for 4 s, hold, act again. Prints one
JSON line of what it saw. Used by test_mavlink_sitl.py; run alone: ``unshare -n python sitl_flight.py BINARY PARAMS``.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from pymavlink import mavutil  # noqa: E402

from firmware_bridge.mavlink_actuator import MavlinkActuator  # noqa: E402

MAV = mavutil.mavlink


def speed(actuator: MavlinkActuator) -> float | None:
    m = actuator.link.messages.get("LOCAL_POSITION_NED")
    return None if m is None else math.hypot(m.vx, m.vy)


def main(binary: str, params: str) -> int:
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    work = Path(tempfile.mkdtemp(prefix="airq-sitl-"))
    sitl = subprocess.Popen(
        [binary, "--model", "+", "--speedup", "1", "--defaults", params, "-I0"],
        cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    out: dict = {}
    try:
        time.sleep(1.0)
        a = MavlinkActuator("tcp:127.0.0.1:5760")
        t0 = time.monotonic()
        out["autopilot"] = a.wait_heartbeat(30).autopilot
        out["heartbeat_s"] = round(time.monotonic() - t0, 2)
        end = time.monotonic() + 120
        while not any("using GPS" in t for t in a.statustext) and time.monotonic() < end:
            time.sleep(0.2)
        out["ekf_s"] = round(time.monotonic() - t0, 1)
        out["firmware"] = a.state.firmware
        a._command(MAV.MAV_CMD_SET_MESSAGE_INTERVAL, MAV.MAVLINK_MSG_ID_LOCAL_POSITION_NED, 50_000)  # telemetry, 20 Hz
        a.set_mode("GUIDED")
        a.arm()
        a.takeoff(5.0)
        end = time.monotonic() + 30
        while time.monotonic() < end:
            m = a.link.messages.get("LOCAL_POSITION_NED")
            if m is not None and -m.z > 4.5:
                break
            time.sleep(0.1)
        out["altitude_m"] = round(-a.link.messages["LOCAL_POSITION_NED"].z, 2)
        for _ in range(40):
            a.command((2.0, 0.0, 0.0, 0.3), time.monotonic_ns())
            time.sleep(0.1)
        out["speed_before_hold"] = round(speed(a) or 0.0, 2)
        t_hold = time.monotonic()
        a.hold(time.monotonic_ns())
        while a.state.mode != "BRAKE" and time.monotonic() - t_hold < 3:
            time.sleep(0.005)
        out["hold_mode"], out["hold_mode_s"] = a.state.mode, round(time.monotonic() - t_hold, 3)
        time.sleep(0.2 - (time.monotonic() - t_hold) if time.monotonic() - t_hold < 0.2 else 0)
        out["speed_two_periods_after_hold"] = round(speed(a) or 0.0, 2)
        time.sleep(1.8)
        out["speed_2s_after_hold"] = round(speed(a) or 0.0, 2)
        a.command((1.0, 0.0, 0.0, 0.0), time.monotonic_ns())
        time.sleep(1.0)
        out["mode_after_next_act"] = a.state.mode
        out["armed"] = a.state.armed
        a.close()
    finally:
        sitl.terminate()
        try:
            sitl.wait(5)
        except subprocess.TimeoutExpired:
            sitl.kill()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
