"""Starting an autopilot's SITL build (a binary the user built from ArduPilot's or PX4's sources) for
``hil.run --backend autopilot``, and the links the bridge and the host open to it.

airq ships no autopilot: the binary comes from the caller (``--binary``), built as ArduPilot's and PX4's own docs
describe. SITL listens on every interface: run it in a private network namespace (``unshare -n``; loopback only).

* ArduCopter: ``arducopter --model + --defaults copter.parm -I0 --serial0 udpclient:127.0.0.1:14551``: SERIAL0 as
  a UDP client to the bridge (a serial line over TCP would queue what a cut link carries and deliver it late),
  SERIAL1 (TCP 5762) to the ground station; ``--speedup N`` runs its clock N times the wall clock.
* PX4: ``px4 -d ETC`` with the built-in SIH quadrotor (``PX4_SIM_MODEL=sihsim_quadx``) from a fresh working
  directory, its onboard MAVLink instance (UDP 14540) to the bridge and its ground-station instance (UDP 14550) to
  the host; ``PX4_SIM_SPEED_FACTOR`` runs its lockstep clock faster. ``COM_OBL_RC_ACT = 5``: when the companion's
  setpoints stop, PX4 holds (its default, Position mode, needs a pilot's sticks and without RC descends and lands;
  docs/autopilot.md).
"""

from __future__ import annotations

import fcntl
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

AUTOPILOTS = ("ardupilot", "px4")


@dataclass(frozen=True)
class SitlLinks:
    fc: str  # the bridge's --fc
    telemetry: str  # the host's ground-station link (hil.run --telemetry)
    fc_port: int  # the UDP port that carries the bridge's link (what a test cuts)


LINKS = {
    "ardupilot": SitlLinks("udpin:127.0.0.1:14551", "tcp:127.0.0.1:5762", 14551),
    "px4": SitlLinks("udpin:127.0.0.1:14540", "udpin:127.0.0.1:14550", 14540),
}
# ArduCopter with MAVLink 2 signing: it accepts unsigned packets on its first MAVLink channel (SERIAL0, "assumed
# to be secure": USB on a flight controller; GCS_Signing.cpp) and requires signatures on every other. The bridge's
# signed link is SERIAL1; the host's ground-station link, unsigned, SERIAL0 (TCP 5760), where the key is set up.
SIGNED_LINKS = {"ardupilot": SitlLinks("udpin:127.0.0.1:14551", "tcp:127.0.0.1:5760", 14551)}


def px4_etc(binary: str | Path) -> Path:
    """The PX4 build's ROMFS (``etc/`` beside ``bin/``)."""
    return Path(binary).resolve().parents[1] / "etc"


def check_binary(autopilot: str, binary: str | Path, params: str | Path | None) -> None:
    """ValueError (one line) when the SITL binary, or ArduCopter's defaults file, is not there."""
    if autopilot not in AUTOPILOTS:
        raise ValueError(f"autopilot must be one of {', '.join(AUTOPILOTS)}, got {autopilot!r}")
    if not Path(binary).is_file() or not os.access(binary, os.X_OK):
        raise ValueError(f"{binary} is not an executable file")
    if autopilot == "ardupilot" and (params is None or not Path(params).is_file()):
        raise ValueError(f"ArduCopter needs its defaults file (Tools/autotest/default_params/copter.parm): {params}")
    if autopilot == "px4" and not px4_etc(binary).is_dir():
        raise ValueError(f"{binary} has no etc/ beside its bin/ (a PX4 build tree's px4)")


PX4_LOCK = Path("/tmp/px4_lock-0")  # PX4 keeps its instance lock and command socket in /tmp, whatever the namespace


def px4_running() -> bool:
    """Whether a PX4 SITL server (instance 0) runs on this machine: it holds a POSIX lock on /tmp/px4_lock-0, and a
    second px4 started beside it is refused (or, as a client, talks to it)."""
    try:
        fd = os.open(PX4_LOCK, os.O_RDWR)
    except OSError:
        return False
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    else:
        fcntl.lockf(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def start_sitl(
    autopilot: str, binary: str | Path, params: str | Path | None, work: Path, speedup: float = 1.0,
    extra_env: dict[str, str] | None = None, signed: bool = False,
) -> subprocess.Popen:  # fmt: skip
    """Start the SITL in ``work`` (its parameters, logs and ``sitl.log`` go there); the caller stops it. ``signed``:
    the links of ``SIGNED_LINKS`` (ArduCopter only)."""
    check_binary(autopilot, binary, params)
    if signed and autopilot not in SIGNED_LINKS:
        raise ValueError(f"no signed link layout for {autopilot}")
    if autopilot == "px4" and px4_running():
        raise ValueError(f"another PX4 SITL runs on this machine (it holds {PX4_LOCK}, in every network namespace): "
                         "stop it first")  # fmt: skip
    log = open(work / "sitl.log", "ab")  # noqa: SIM115 - closed with the process
    if autopilot == "ardupilot":
        serials = ["--serial0", "tcp:0", "--serial1", "udpclient:127.0.0.1:14551"] if signed else [
            "--serial0", "udpclient:127.0.0.1:14551"]  # fmt: skip
        cmd = [str(binary), "--model", "+", "--speedup", str(speedup), "--defaults", str(params), "-I0",
               *serials]  # fmt: skip
        return subprocess.Popen(
            cmd, cwd=work, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(extra_env or {})}
        )
    env = {
        **os.environ,
        "PX4_SIM_MODEL": "sihsim_quadx",
        "PX4_SIMULATOR": "sihsim",
        "PX4_SIM_SPEED_FACTOR": str(speedup),
        "PX4_PARAM_COM_OBL_RC_ACT": "5",
        **(extra_env or {}),
    }
    return subprocess.Popen([str(binary), "-d", str(px4_etc(binary))], cwd=work, stdout=log,
                            stderr=subprocess.STDOUT, env=env)  # fmt: skip


def stop_sitl(proc: subprocess.Popen, timeout_s: float = 10.0) -> None:
    proc.terminate()
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
