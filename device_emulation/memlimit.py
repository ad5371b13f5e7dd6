"""Cap one process's resident memory (a Pi-sized RAM) with a Linux memory cgroup, optionally with swap.

    with SwapFile(2048), MemoryCgroup("bridge", memory_mb=900, swap_mb=2048) as cg:
        proc = subprocess.Popen(cg.launch_prefix() + ["python", "-m", "firmware_bridge.serve", ...])
        sampler = CgroupSampler(cg, period_s=0.25).start()
        ...
        cg.read()   # usage, peak, swap, major faults, OOM kills

What it emulates: a device whose RAM is ``memory_mb``. When the cgroup's pages exceed the limit the
kernel reclaims inside the cgroup: file pages are dropped, anonymous pages (the model's weights) go to
swap if the cgroup may swap, and the process takes major page faults to get them back; without swap
(or with its swap used up) the kernel's OOM killer ends the process. The swap here is a file on this
machine's disk, far faster than a Pi's SD card, so a slowdown measured here is a lower bound.

cgroup v1 (memory controller at /sys/fs/cgroup/memory: memory.limit_in_bytes, memory.memsw.* when
swap accounting is on) and v2 (memory.max, memory.swap.max) are supported. The new cgroup is a child
of this process's own memory cgroup, so limits set on us by others keep applying. Creating cgroups and swap
files needs root; without it (or without a memory controller) :func:`memory_cgroup_support` says why,
and callers skip with that reason. Everything created is removed on exit (context managers, and an
atexit hook for an interrupted run); a swap file is only created when no swap is active, and an
existing swap is never touched.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

V1_ROOT = Path("/sys/fs/cgroup/memory")
V2_ROOTS = (Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup"))
MB = 1024 * 1024
UNLIMITED = -1


class MemLimitError(RuntimeError):
    """A memory cgroup or swap file cannot be set up here (one line: the reason)."""


@dataclass(frozen=True)
class Support:
    version: str | None  # "v1", "v2" or None
    root: Path | None
    swap_accounting: bool
    reason: str  # why not (or what is used)

    @property
    def available(self) -> bool:
        return self.version is not None


def _is_root() -> bool:
    return os.geteuid() == 0


def memory_cgroup_support() -> Support:
    """Which memory cgroup this machine offers us, or why none (not root, no controller)."""
    if not hasattr(os, "geteuid") or not Path("/proc/self/cgroup").exists():
        return Support(None, None, False, "not Linux: no cgroups")
    if not _is_root():
        return Support(None, None, False, "not root: creating a memory cgroup needs root (run as root, e.g. in CI)")
    own = _own_cgroups()
    v1 = V1_ROOT / own.get("memory", "/").lstrip("/")
    if (v1 / "memory.limit_in_bytes").exists() and os.access(v1, os.W_OK):
        return Support(
            "v1", v1, (v1 / "memory.memsw.limit_in_bytes").exists(), f"cgroup v1 memory controller, under {v1}"
        )
    for mount in V2_ROOTS:
        root = mount / own.get("", "/").lstrip("/")
        controllers = root / "cgroup.controllers"
        if controllers.exists() and "memory" in controllers.read_text().split() and os.access(root, os.W_OK):
            return Support("v2", root, True, f"cgroup v2, under {root}")
    return Support(
        None,
        None,
        False,
        "no writable memory cgroup controller (neither v1 /sys/fs/cgroup/memory nor v2 with 'memory')",
    )


def _own_cgroups() -> dict[str, str]:
    """This process's cgroup per v1 controller ('' for the v2 hierarchy), from /proc/self/cgroup.
    New cgroups are made below our own, so whatever limits already apply to us still apply."""
    out: dict[str, str] = {}
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for c in controllers.split(","):
                out[c] = path
    except (OSError, ValueError):
        pass
    return out


def active_swap_bytes() -> int:
    """Total size of the swap areas active on this machine (/proc/swaps)."""
    try:
        lines = Path("/proc/swaps").read_text().splitlines()[1:]
    except OSError:
        return 0
    return sum(int(line.split()[2]) * 1024 for line in lines if len(line.split()) >= 3)


_cleanups: dict[int, object] = {}


def _atexit_cleanup() -> None:
    for obj in list(_cleanups.values()):
        try:
            obj.close()  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 - best effort at interpreter exit
            pass


atexit.register(_atexit_cleanup)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _creator_pid(name: str) -> int | None:
    """The pid in an ``airq-...-PID-HEX`` name (swap files and cgroups made here carry their maker's)."""
    parts = name.split("-")
    return int(parts[-2]) if len(parts) >= 3 and parts[0] == "airq" and parts[-2].isdigit() else None


def reclaim_stale(cgroup_root: Path | None = None) -> list[str]:
    """Remove what a killed run left behind: active ``airq-swap-PID-*`` files and empty ``airq-*-PID-*``
    cgroups whose PID is gone. A SIGKILL skips every cleanup, and a forgotten 2 GB swap file would
    otherwise make the next run's "is swap already active?" answer yes. Returns what was removed."""
    removed: list[str] = []
    try:
        swaps = [line.split()[0] for line in Path("/proc/swaps").read_text().splitlines()[1:] if line.split()]
    except OSError:
        swaps = []
    for path in swaps:
        pid = _creator_pid(Path(path).name)
        if Path(path).name.startswith("airq-swap-") and pid is not None and not _pid_alive(pid):
            if subprocess.run(["swapoff", path], capture_output=True, check=False).returncode == 0:
                Path(path).unlink(missing_ok=True)
                removed.append(path)
    if cgroup_root is not None and cgroup_root.is_dir():
        # siblings too: each job of a job runner may get its own cgroup below a common parent
        for d in [*cgroup_root.glob("airq-*"), *cgroup_root.parent.glob("*/airq-*")]:
            pid = _creator_pid(d.name)
            if d.is_dir() and pid is not None and not _pid_alive(pid):
                try:
                    d.rmdir()  # fails (and is left alone) while any process is still inside
                    removed.append(str(d))
                except OSError:
                    pass
    return removed


class SwapFile:
    """A swap file of ``size_mb`` MB, active while the context lasts; only when no swap is active.

    ``created`` tells whether this object made (and will remove) one; with swap already active it does
    nothing and ``existing_bytes`` says how much there is.
    """

    def __init__(self, size_mb: int, directory: str | os.PathLike = "/tmp") -> None:
        if size_mb < 1:
            raise MemLimitError(f"swap size must be >= 1 MB, got {size_mb}")
        self.size_mb = size_mb
        self.path = Path(directory) / f"airq-swap-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.created = False
        self.existing_bytes = 0

    def open(self) -> SwapFile:
        if _is_root():
            reclaim_stale()
        self.existing_bytes = active_swap_bytes()
        if self.existing_bytes:
            return self  # swap is already there: use it, touch nothing
        if not _is_root():
            raise MemLimitError("not root: creating a swap file needs root")
        for tool in ("mkswap", "swapon", "swapoff"):
            if shutil.which(tool) is None:
                raise MemLimitError(f"{tool} not found: cannot create a swap file")
        free = shutil.disk_usage(self.path.parent).free
        if free < (self.size_mb + 512) * MB:
            raise MemLimitError(
                f"not enough disk for a {self.size_mb} MB swap file in {self.path.parent} ({free // MB} MB free)"
            )
        _cleanups[id(self)] = self
        try:
            # written, not fallocate'd: swapon refuses files with holes on some filesystems
            with open(self.path, "wb") as f:
                os.fchmod(f.fileno(), 0o600)
                block = b"\0" * MB
                for _ in range(self.size_mb):
                    f.write(block)
                f.flush()
                os.fsync(f.fileno())
            _run(["mkswap", str(self.path)])
            _run(["swapon", str(self.path)])
            self.created = True
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        _cleanups.pop(id(self), None)
        if self.created:
            subprocess.run(["swapoff", str(self.path)], capture_output=True, check=False)
            self.created = False
        self.path.unlink(missing_ok=True)

    def __enter__(self) -> SwapFile:
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()


def _run(cmd: list[str]) -> None:
    p = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if p.returncode != 0:
        raise MemLimitError(
            f"{' '.join(cmd)} failed: {(p.stderr or p.stdout).strip().splitlines()[-1:] or p.returncode}"
        )


class MemoryCgroup:
    """A fresh memory cgroup with a limit of ``memory_mb`` MB of RAM.

    ``swap_mb``: None = may swap without a cgroup limit (up to the machine's swap), 0 = no swap (the
    OOM killer acts at the limit), N = at most N MB of swap. ``memory_mb = 0`` means no limit (a
    cgroup that only measures: the unconstrained baseline, read the same way).
    """

    def __init__(self, name: str, memory_mb: int, swap_mb: int | None = None, support: Support | None = None) -> None:
        if memory_mb < 0 or (swap_mb is not None and swap_mb < 0):
            raise MemLimitError(f"memory and swap sizes must be >= 0 MB, got {memory_mb} and {swap_mb}")
        self.support = support or memory_cgroup_support()
        if not self.support.available:
            raise MemLimitError(self.support.reason)
        self.memory_mb, self.swap_mb = memory_mb, swap_mb
        safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in name)[:40]
        self.path = self.support.root / f"airq-{safe}-{os.getpid()}-{uuid.uuid4().hex[:6]}"  # type: ignore[operator]
        self.notes: list[str] = []
        self.created = False

    @property
    def version(self) -> str:
        return self.support.version or ""

    # ------------------------------------------------------------------ lifecycle
    def open(self) -> MemoryCgroup:
        reclaim_stale(self.support.root)
        _cleanups[id(self)] = self
        try:
            if self.version == "v2":
                self._enable_v2_controller()
            self.path.mkdir()
            self.created = True
            self._apply_limits()
        except OSError as e:
            self.close()
            raise MemLimitError(f"cannot set up memory cgroup {self.path}: {e.strerror or e}") from None
        return self

    def _enable_v2_controller(self) -> None:
        control = self.support.root / "cgroup.subtree_control"  # type: ignore[operator]
        if "memory" not in control.read_text().split():
            control.write_text("+memory")

    def _apply_limits(self) -> None:
        mem = self.memory_mb * MB if self.memory_mb else None
        if self.version == "v1":
            if mem is not None:
                self._write("memory.limit_in_bytes", mem)
            if self.swap_mb is not None:
                if self.support.swap_accounting and mem is not None:
                    self._write("memory.memsw.limit_in_bytes", mem + self.swap_mb * MB)
                elif self.swap_mb == 0:
                    self._write("memory.swappiness", 0)
                    self.notes.append("no swap accounting (memory.memsw.*): swap forbidden by swappiness 0 only")
                else:
                    self.notes.append("no swap accounting (memory.memsw.*): swap not limited per cgroup")
        else:
            if mem is not None:
                self._write("memory.max", mem)
            if self.swap_mb is not None:
                self._write("memory.swap.max", self.swap_mb * MB)

    def _write(self, name: str, value: int | str) -> None:
        (self.path / name).write_text(str(value))

    def launch_prefix(self) -> list[str]:
        """Command prefix that moves the process into this cgroup before it execs the command, so
        everything it ever allocates (loading included) is charged here."""
        if not self.created:
            raise MemLimitError("the cgroup is not open")
        procs = self.path / "cgroup.procs"
        return ["/bin/sh", "-c", f'echo $$ > "{procs}" && exec "$@"', "airq-memlimit"]

    def attach(self, pid: int) -> None:
        """Move a running process into the cgroup (its past allocations stay charged elsewhere on v2)."""
        try:
            (self.path / "cgroup.procs").write_text(str(pid))
        except OSError as e:
            raise MemLimitError(f"cannot move pid {pid} into {self.path}: {e.strerror or e}") from None

    def pids(self) -> list[int]:
        try:
            return [int(x) for x in (self.path / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def close(self) -> None:
        """Remove the cgroup; processes still in it are moved back to the parent (our own cgroup) first."""
        _cleanups.pop(id(self), None)
        if not self.created:
            return
        root_procs = self.support.root / "cgroup.procs"  # type: ignore[operator]
        for _ in range(50):
            for pid in self.pids():
                try:
                    root_procs.write_text(str(pid))
                except OSError:
                    pass
            try:
                self.path.rmdir()
                self.created = False
                return
            except OSError:
                time.sleep(0.05)
        raise MemLimitError(f"could not remove cgroup {self.path}")

    def __enter__(self) -> MemoryCgroup:
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ reading
    def _read(self, name: str) -> str | None:
        try:
            return (self.path / name).read_text()
        except OSError:
            return None

    def _stat(self) -> dict[str, int]:
        text = self._read("memory.stat") or ""
        out = {}
        for line in text.splitlines():
            k, _, v = line.partition(" ")
            if v.strip().lstrip("-").isdigit():
                out[k] = int(v)
        return out

    def read(self) -> dict[str, int | None]:
        """usage (RAM charged, page cache included), peak usage, rss (anonymous resident), swap,
        pgmajfault (cumulative), oom_kill count, limit-hit count; bytes unless named otherwise."""
        st = self._stat()

        def num(name: str) -> int | None:
            text = self._read(name)
            return int(text.split()[0]) if text and text.split()[0].isdigit() else None

        if self.version == "v1":
            oom = self._read("memory.oom_control") or ""
            oom_kill = next((int(line.split()[1]) for line in oom.splitlines() if line.startswith("oom_kill ")), None)
            return {
                "usage_bytes": num("memory.usage_in_bytes"),
                "peak_bytes": num("memory.max_usage_in_bytes"),
                "rss_bytes": st.get("total_rss", st.get("rss")),
                "cache_bytes": st.get("total_cache", st.get("cache")),
                "swap_bytes": st.get("total_swap", st.get("swap")),
                "pgmajfault": st.get("total_pgmajfault", st.get("pgmajfault")),
                "oom_kill": oom_kill,
                "limit_hits": num("memory.failcnt"),
            }
        events = {
            line.split()[0]: int(line.split()[1])
            for line in (self._read("memory.events") or "").splitlines()
            if len(line.split()) == 2
        }
        return {
            "usage_bytes": num("memory.current"),
            "peak_bytes": num("memory.peak"),
            "rss_bytes": st.get("anon"),
            "cache_bytes": st.get("file"),
            "swap_bytes": num("memory.swap.current"),
            "pgmajfault": st.get("pgmajfault"),
            "oom_kill": events.get("oom_kill"),
            "limit_hits": events.get("max"),
        }

    def describe(self) -> dict:
        return {
            "version": self.version,
            "path": str(self.path),
            "memory_mb": self.memory_mb,
            "swap_mb": self.swap_mb,
            "swap_accounting": self.support.swap_accounting,
            "notes": list(self.notes),
        }


class CgroupSampler:
    """Reads a cgroup every ``period_s`` in a daemon thread: samples of (t since start, read())."""

    def __init__(self, cgroup: MemoryCgroup, period_s: float = 0.25) -> None:
        self.cgroup, self.period_s = cgroup, period_s
        self.samples: list[dict] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="cgroup-sampler", daemon=True)
        self.t0 = time.monotonic()

    def start(self) -> CgroupSampler:
        self.t0 = time.monotonic()
        self._thread.start()
        return self

    def sample(self, label: str | None = None) -> dict:
        s: dict[str, Any] = {"t_s": time.monotonic() - self.t0, **self.cgroup.read()}
        if label:
            s["label"] = label
        self.samples.append(s)
        return s

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.period_s)

    def stop(self) -> list[dict]:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(2.0)
        return self.samples
