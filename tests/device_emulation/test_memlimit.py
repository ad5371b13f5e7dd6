"""device_emulation.memlimit: a real process in a real memory cgroup (root only; CI runs as root), read back,
cleaned up; without root the reason is given."""

import subprocess
import sys
import time
from pathlib import Path

import pytest
from cgroup_support import SUPPORT

import device_emulation.memlimit as memlimit
from device_emulation.memlimit import (
    CgroupSampler,
    MemLimitError,
    MemoryCgroup,
    SwapFile,
    active_swap_bytes,
    memory_cgroup_support,
)

needs_cgroup = pytest.mark.skipif(not SUPPORT.available, reason=f"no memory cgroup here: {SUPPORT.reason}")

ALLOC = """
import sys, time
n = int(sys.argv[1]) * 1024 * 1024
b = bytearray(n)
for i in range(0, n, 4096):
    b[i] = 1
print("allocated", flush=True)
for _ in range(int(sys.argv[2])):          # touch it all again: pages come back from swap
    for i in range(0, n, 4096):
        b[i] += 1
time.sleep(float(sys.argv[3]))
"""


def start(cg, mb, passes=0, sleep=30.0):
    return subprocess.Popen(
        cg.launch_prefix() + [sys.executable, "-c", ALLOC, str(mb), str(passes), str(sleep)],
        stdout=subprocess.PIPE,
        text=True,
    )


@needs_cgroup
def test_limit_usage_read_back_and_cleanup():
    with MemoryCgroup("test-read", memory_mb=256, swap_mb=0) as cg:
        path = cg.path
        assert path.is_dir() and path.parent == SUPPORT.root
        limit_file = "memory.limit_in_bytes" if cg.version == "v1" else "memory.max"
        assert int((path / limit_file).read_text()) == 256 * 1024 * 1024
        p = start(cg, 40)
        try:
            assert p.stdout.readline().strip() == "allocated"
            assert cg.pids() == [p.pid]
            r = cg.read()
            assert 38 * 2**20 <= r["usage_bytes"] <= 256 * 2**20
            assert r["rss_bytes"] >= 38 * 2**20 and r["swap_bytes"] == 0 and r["oom_kill"] == 0
        finally:
            p.kill()
            p.wait()
    assert not path.exists()


@needs_cgroup
def test_without_swap_the_oom_killer_acts_at_the_limit():
    with MemoryCgroup("test-oom", memory_mb=48, swap_mb=0) as cg:
        p = start(cg, 120, sleep=0)
        p.wait(timeout=30)
        assert p.returncode == -9
        assert cg.read()["oom_kill"] >= 1


@needs_cgroup
def test_with_swap_pages_go_out_and_fault_back(tmp_path):
    had_swap = active_swap_bytes()
    with SwapFile(128) as swap:
        assert swap.created == (not had_swap)
        if swap.created:
            assert str(swap.path) in Path("/proc/swaps").read_text()
        with MemoryCgroup("test-swap", memory_mb=48, swap_mb=128) as cg:
            sampler = CgroupSampler(cg, period_s=0.05).start()
            p = start(cg, 96, passes=2, sleep=0)
            p.wait(timeout=60)
            time.sleep(0.06)
            samples = sampler.stop()
            assert p.returncode == 0
            assert max(s["swap_bytes"] for s in samples) > 40 * 2**20
            assert max(s["peak_bytes"] for s in samples) <= 48 * 2**20
            assert cg.read()["pgmajfault"] > 1000  # 2 passes over 48+ MB that were swapped out
    assert not swap.path.exists()
    assert active_swap_bytes() == had_swap


def test_not_root_gives_a_reason(monkeypatch):
    monkeypatch.setattr(memlimit, "_is_root", lambda: False)
    s = memory_cgroup_support()
    assert not s.available and "not root" in s.reason
    with pytest.raises(MemLimitError, match="not root"):
        MemoryCgroup("x", 100)
    monkeypatch.setattr(memlimit, "active_swap_bytes", lambda: 0)
    with pytest.raises(MemLimitError, match="not root"):
        SwapFile(16).open()


def test_bad_sizes():
    with pytest.raises(MemLimitError, match="swap size"):
        SwapFile(0)
    if SUPPORT.available:
        with pytest.raises(MemLimitError, match=">= 0"):
            MemoryCgroup("x", -1)


@needs_cgroup
def test_leftovers_of_a_killed_run_are_reclaimed(tmp_path):
    # What a SIGKILLed run leaves: an active airq swap file and a cgroup, both named after its pid.
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    stale_swap = tmp_path / f"airq-swap-{gone.pid}-deadbeef"
    stale_swap.write_bytes(b"\0" * (16 * 2**20))
    stale_swap.chmod(0o600)
    subprocess.run(["mkswap", str(stale_swap)], check=True, capture_output=True)
    subprocess.run(["swapon", str(stale_swap)], check=True, capture_output=True)
    stale_cgroup = SUPPORT.root / f"airq-memfit-constrained-{gone.pid}-abc123"
    stale_cgroup.mkdir()
    live_cgroup = SUPPORT.root / f"airq-test-{memlimit.os.getpid()}-abc123"  # our own: must stay
    live_cgroup.mkdir()
    try:
        removed = memlimit.reclaim_stale(SUPPORT.root)
        assert str(stale_swap) in removed and str(stale_cgroup) in removed
        assert str(stale_swap) not in Path("/proc/swaps").read_text() and not stale_swap.exists()
        assert not stale_cgroup.exists() and live_cgroup.exists()
    finally:
        subprocess.run(["swapoff", str(stale_swap)], capture_output=True)
        for d in (stale_cgroup, live_cgroup):
            if d.exists():
                d.rmdir()
