"""hil.sitl: the checks made before an autopilot's SITL build is started (the flights themselves are in
tests/firmware_bridge/test_mavlink_sitl.py, with binaries from the environment)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hil.sitl import PX4_LOCK, check_binary, px4_running, start_sitl


def test_a_binary_that_is_not_there_or_not_a_build_is_one_line(tmp_path):
    with pytest.raises(ValueError, match="is not an executable file"):
        check_binary("px4", tmp_path / "px4", None)
    true = shutil.which("true")
    with pytest.raises(ValueError, match="ArduCopter needs its defaults file"):
        check_binary("ardupilot", true, tmp_path / "copter.parm")
    (tmp_path / "bin").mkdir()
    shutil.copy(true, tmp_path / "bin" / "px4")
    with pytest.raises(ValueError, match="has no etc/ beside its bin/"):
        check_binary("px4", tmp_path / "bin" / "px4", None)
    with pytest.raises(ValueError, match="autopilot must be one of ardupilot, px4"):
        check_binary("betaflight", true, None)


def test_a_second_px4_is_refused_while_one_holds_the_instance_lock(tmp_path):
    """PX4 keeps its instance lock (and command socket) in /tmp whatever the network namespace: a second px4 beside
    a running one would be refused, or talk to the first as a client. A process holding the lock as PX4 does (a POSIX
    write lock on /tmp/px4_lock-0) stands in for the running PX4 here."""
    if px4_running():
        pytest.skip(f"a PX4 SITL runs on this machine (it holds {PX4_LOCK}): the lock cannot be taken for the test")
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys, time\n"
         f"fd = os.open({str(PX4_LOCK)!r}, os.O_RDWR | os.O_CREAT, 0o666)\n"
         "fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\nprint('held', flush=True)\ntime.sleep(60)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        assert px4_running()
        (tmp_path / "build" / "bin").mkdir(parents=True)
        (tmp_path / "build" / "etc").mkdir()
        px4 = tmp_path / "build" / "bin" / "px4"
        shutil.copy(shutil.which("true"), px4)
        with pytest.raises(ValueError, match="another PX4 SITL runs on this machine .*px4_lock-0.*stop it first"):
            start_sitl("px4", px4, None, tmp_path)
        assert not (tmp_path / "sitl.log").exists()  # nothing started
    finally:
        holder.kill()
        holder.wait()
    end = time.monotonic() + 5
    while px4_running() and time.monotonic() < end:
        time.sleep(0.05)
    assert not px4_running()
    Path(PX4_LOCK).unlink(missing_ok=True)
