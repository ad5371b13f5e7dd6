"""The flight modes the MAVLink actuator uses on each autopilot, by pymavlink's names (readable without pymavlink:
the host's tools use them too)."""

FLY_MODE = {"ardupilot": "GUIDED", "px4": "OFFBOARD"}  # where the autopilot follows the companion's setpoints
HOLD_MODE = {"ardupilot": "BRAKE", "px4": "LOITER"}  # the bridge's hold; LOITER is PX4's AUTO_LOITER, shown as Hold
