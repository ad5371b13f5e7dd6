"""Run the device side (firmware_bridge) as 64-bit Arm code under qemu user-mode emulation.

    python -m device_emulation.arm prepare          # build (or reuse) the arm64 root filesystem + wheels, check it
    python -m device_emulation.arm command          # print the command that starts an emulated bridge
    python -m device_emulation.arm run -- -m firmware_bridge.serve --bind tcp://127.0.0.1:5555
    python -m hil.run --policy P.onnx --sim-only --device-arch aarch64 ...   # what users run

What it builds, cached in ``.cache/arm/`` of the repo (``AIRQ_ARM_CACHE`` overrides):

* ``rootfs/``: a minimal Debian bookworm arm64 root filesystem with Python 3.11 (the Python of
  Raspberry Pi OS bookworm): ``debootstrap --foreign`` (no emulation needed), then the Python
  packages unpacked with ``dpkg-deb``; ``proc/cpuinfo`` is a plain file describing a Cortex-A72,
  because onnxruntime's CPU probe crashes on the x86 host's cpuinfo that qemu passes through.
* ``site-<hash>/``: the bridge's four dependencies as the aarch64 wheels from PyPI
  (manylinux_2_28_aarch64, cp311), pinned to the versions of the lock file (requirements/lock.txt,
  which `make` installs on this host too) so the native and the emulated bridge run the same releases.

The bridge then runs as ``qemu-aarch64-static -L rootfs -cpu cortex-a72 rootfs/usr/bin/python3.11``.
The CPU model is always pinned: under qemu 7.2's default model (``max``: SVE, i8mm) onnxruntime's
dynamic-int8 kernels return wrong logits; ``cortex-a72`` is a Raspberry Pi 4's core, so
onnxruntime selects the kernels it would select on a Pi 4 (the CPU features it sees, from
getauxval, are the Cortex-A72's). ``AIRQ_ARM_CPU=cortex-a76`` (or ``--cpu``) emulates a Pi 5's
core instead (dot-product int8 kernels), through ``rootfs-cortex-a76/``: links into ``rootfs/``
with that core's ``proc/cpuinfo``. Emulation is about 10x slower than native: timings say nothing
about a Pi (and the fp32/int8 speed ratio under emulation is distorted too).

Preparation is idempotent (stamp files record the recipe and the wheel versions), holds a lock
so concurrent callers wait for one build, and builds into a temporary directory renamed into
place when complete, so an interrupted build is discarded and redone next time.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from airq_cli import EXIT_FAILURE, EXIT_INTERRUPTED, ArgumentParser, error_line, run
from firmware_bridge.launcher import BridgeStartError

SUITE = "bookworm"  # Debian 12, like Raspberry Pi OS bookworm: Python 3.11, glibc 2.36
GUEST_PYTHON = "usr/bin/python3.11"
CPU = "cortex-a72"  # Raspberry Pi 4, the default; cortex-a76 (Pi 5) with AIRQ_ARM_CPU (see CPUS)
# What pip on a Pi with bookworm (glibc 2.36) accepts: every manylinux tag up to glibc 2.36. pip does not
# expand one --platform to the older glibc versions by itself, so all are listed.
WHEEL_PLATFORMS = (*(f"manylinux_2_{minor}_aarch64" for minor in range(36, 16, -1)), "manylinux2014_aarch64")
BRIDGE_DEPS = ("numpy", "onnxruntime", "pyzmq", "msgpack")  # exactly the bridge's dependencies (pyproject)
RECIPE_VERSION = 1  # bump when the way rootfs/ is built changes: caches rebuild
APT_HINT = "apt-get install -y qemu-user-static debootstrap"
REPO_ROOT = Path(__file__).resolve().parents[1]
LOCK_FILE = (
    REPO_ROOT / "requirements" / "lock.txt"
)  # the locked install (Makefile): the guest's wheels use its versions
SBIN_DIRS = ("/usr/sbin", "/sbin")  # debootstrap lives here; not on a normal user's PATH


class ArmSetupError(BridgeStartError):
    """The emulated Arm stack cannot be prepared; ``str()`` is one line saying what to do.

    A BridgeStartError, so ``python -m hil.run`` reports it as ``error: ...`` and exits 1.
    """


def _log(msg: str) -> None:
    print(f"device_emulation.arm: {msg}", file=sys.stderr, flush=True)


def cache_dir() -> Path:
    return Path(os.environ.get("AIRQ_ARM_CACHE") or REPO_ROOT / ".cache" / "arm").resolve()


@dataclass(frozen=True)
class CpuModel:
    """A qemu -cpu model and the /proc/cpuinfo fields the Raspberry Pi with that core shows."""

    name: str  # qemu -cpu
    board: str
    variant: str
    part: str
    revision: int
    features: str


CPUS = {
    "cortex-a53": CpuModel("cortex-a53", "Raspberry Pi 3", "0x0", "0xd03", 4, "fp asimd evtstrm crc32 cpuid"),
    "cortex-a72": CpuModel("cortex-a72", "Raspberry Pi 4", "0x0", "0xd08", 3, "fp asimd evtstrm crc32 cpuid"),
    # The Pi 5's core has the dot-product instructions (asimddp): onnxruntime picks other int8 kernels there.
    "cortex-a76": CpuModel(
        "cortex-a76",
        "Raspberry Pi 5",
        "0x4",
        "0xd0b",
        1,
        "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp",
    ),  # fmt: skip
}


def cpuinfo_text(cpu: str = CPU, cores: int = 4) -> str:
    """/proc/cpuinfo as a Raspberry Pi with this core (4 of them) running a 64-bit kernel shows it.

    The Model line says honestly what this is: firmware_bridge.device reports it as cpu_model.
    """
    m = CPUS[cpu]
    block = (
        "processor\t: {i}\n"
        "BogoMIPS\t: 108.00\n"
        f"Features\t: {m.features}\n"
        "CPU implementer\t: 0x41\n"
        "CPU architecture: 8\n"
        f"CPU variant\t: {m.variant}\n"
        f"CPU part\t: {m.part}\n"
        f"CPU revision\t: {m.revision}\n\n"
    )
    label = m.name.replace("cortex-a", "Cortex-A")
    return "".join(block.format(i=i) for i in range(cores)) + (
        f"Model\t\t: {label} emulated by qemu-aarch64 (airq device_emulation.arm), not a {m.board}\n"
    )


def selected_cpu(cpu: str | None = None) -> str:
    """The argument, else AIRQ_ARM_CPU, else cortex-a72 (Pi 4); never qemu's default `max`."""
    cpu = cpu or os.environ.get("AIRQ_ARM_CPU") or CPU
    if cpu not in CPUS:
        raise ArmSetupError(
            f"CPU model {cpu!r} (AIRQ_ARM_CPU / --cpu) is not supported: choose one of {', '.join(CPUS)}"
        )
    return cpu


# ---------------------------------------------------------------------------------------------- tools


def find_tools() -> tuple[str, str]:
    """Paths of qemu-aarch64-static and debootstrap, or ArmSetupError naming the apt-get command."""
    path = os.pathsep.join([os.environ.get("PATH", ""), *SBIN_DIRS])
    qemu = shutil.which("qemu-aarch64-static", path=path)
    debootstrap = shutil.which("debootstrap", path=path)
    missing = [name for name, found in (("qemu-user-static", qemu), ("debootstrap", debootstrap)) if not found]
    if missing:
        raise ArmSetupError(
            f"the emulated aarch64 bridge needs {' and '.join(missing)}: run `{APT_HINT}` (as root), then retry"
        )
    assert qemu is not None and debootstrap is not None
    return qemu, debootstrap


def find_qemu() -> str:
    """Only qemu is needed to *run* a prepared stack."""
    path = os.pathsep.join([os.environ.get("PATH", ""), *SBIN_DIRS])
    qemu = shutil.which("qemu-aarch64-static", path=path)
    if not qemu:
        raise ArmSetupError(
            f"the emulated aarch64 bridge needs qemu-user-static: run `{APT_HINT}` (as root), then retry"
        )
    return qemu


# ---------------------------------------------------------------------------------------------- mirror


def _apt_source_entries(apt_dir: Path) -> Iterator[tuple[str, list[str]]]:
    """(URI, suites) of every enabled `deb` source in sources.list and sources.list.d (both formats)."""
    files = [apt_dir / "sources.list"]
    parts = apt_dir / "sources.list.d"
    if parts.is_dir():
        files += sorted(p for p in parts.iterdir() if p.suffix in (".list", ".sources"))
    for f in files:
        try:
            text = f.read_text(errors="replace")
        except OSError:
            continue
        if f.suffix == ".sources":  # deb822 stanzas separated by blank lines
            for stanza in re.split(r"\n\s*\n", text):
                fields: dict[str, str] = {}
                key = None
                for line in stanza.splitlines():
                    if not line.strip() or line.lstrip().startswith("#"):
                        continue
                    if line[0] in " \t" and key:
                        fields[key] += " " + line.strip()
                        continue
                    key, _, value = line.partition(":")
                    key = key.strip().lower()
                    fields[key] = value.strip()
                if "deb" not in fields.get("types", "").split() or fields.get("enabled", "yes").lower() == "no":
                    continue
                for uri in fields.get("uris", "").split():
                    yield uri, fields.get("suites", "").split()
        else:
            for line in text.splitlines():
                words = line.split("#", 1)[0].split()
                if not words or words[0] != "deb":
                    continue
                words = words[1:]
                if words and words[0].startswith("["):  # [arch=... signed-by=...]
                    while words and not words[0].endswith("]"):
                        words.pop(0)
                    words = words[1:]
                if len(words) >= 2:
                    yield words[0], [words[1]]


def debian_mirror(apt_dir: Path = Path("/etc/apt")) -> str:
    """The Debian archive this machine's apt uses (not its security or updates archive).

    AIRQ_DEBIAN_MIRROR overrides. Prefers a source listing the bookworm suite; else any source
    whose URI looks like a Debian archive (a Debian trixie host's mirror also serves bookworm).
    """
    if os.environ.get("AIRQ_DEBIAN_MIRROR"):
        return os.environ["AIRQ_DEBIAN_MIRROR"]
    entries = list(_apt_source_entries(apt_dir))
    plain = [
        (uri, suites)
        for uri, suites in entries
        if uri.startswith(("http://", "https://", "file:/")) and "security" not in uri
    ]
    for uri, suites in plain:
        if SUITE in suites:
            return uri
    for uri, suites in plain:
        if uri.rstrip("/").endswith("/debian") and any("-" not in s for s in suites):
            return uri
    raise ArmSetupError(
        f"no Debian archive found in {apt_dir}/sources.list*: set AIRQ_DEBIAN_MIRROR to a Debian mirror URL "
        "that carries arm64 bookworm packages"
    )


# ---------------------------------------------------------------------------------------------- wheels


def locked_versions(path: Path = LOCK_FILE) -> dict[str, str]:
    """{name: version} of the lock file's `name==version` lines ({} without the file, e.g. a wheel install)."""
    try:
        text = path.read_text()
    except OSError:
        return {}
    out = {}
    for raw in text.splitlines():
        name, sep, version = raw.split("#", 1)[0].strip().partition("==")
        if sep:
            out[re.sub(r"[-_.]+", "-", name.strip()).lower()] = version.strip()
    return out


def wheel_requirements() -> list[str]:
    """The bridge's dependencies pinned to the lock's versions (requirements/lock.txt, what `make` installs
    here too), else to this host's installed versions, else unpinned."""
    locked = locked_versions()
    reqs = []
    for name in BRIDGE_DEPS:
        if name in locked:
            reqs.append(f"{name}=={locked[name]}")
            continue
        try:
            reqs.append(f"{name}=={version(name).split('+', 1)[0]}")
        except PackageNotFoundError:
            reqs.append(name)
    return reqs


def _site_key(reqs: list[str]) -> str:
    return hashlib.sha256(json.dumps([*WHEEL_PLATFORMS, "cp311", *reqs]).encode()).hexdigest()[:12]


# ---------------------------------------------------------------------------------------------- build


@dataclass(frozen=True)
class ArmStack:
    rootfs: Path
    site: Path
    qemu: str
    cpu: str = CPU

    def python_command(self, argv: list[str]) -> list[str]:
        """argv for the guest python (e.g. ["-m", "firmware_bridge.serve", ...]) -> the full host command."""
        return [
            "env",
            "-u", "PYTHONHOME",
            "-u", "PYTHONSTARTUP",
            "-u", "VIRTUAL_ENV",
            f"PYTHONPATH={self.site}{os.pathsep}{REPO_ROOT}",
            "PYTHONNOUSERSITE=1",
            self.qemu,
            "-L", str(self.rootfs),
            "-cpu", self.cpu,
            str(self.rootfs / GUEST_PYTHON),
            *argv,
        ]  # fmt: skip


def _read_stamp(d: Path) -> dict | None:
    try:
        return json.loads((d / ".airq-stamp").read_text())
    except (OSError, ValueError):
        return None


def _write_stamp(d: Path, data: dict) -> None:
    (d / ".airq-stamp").write_text(json.dumps(data, indent=1) + "\n")


def _rootfs_recipe() -> dict:
    return {
        "recipe": RECIPE_VERSION,
        "suite": SUITE,
        "arch": "arm64",
        "cpuinfo": hashlib.sha256(cpuinfo_text().encode()).hexdigest()[:12],
    }


@contextlib.contextmanager
def _locked(cache: Path) -> Iterator[None]:
    try:
        cache.mkdir(parents=True, exist_ok=True)
        fd = os.open(cache / ".lock", os.O_RDONLY | os.O_CREAT, 0o644)  # read-only is enough for flock
    except OSError as e:
        raise ArmSetupError(
            f"cannot use the arm64 cache {cache}: {e.strerror} (AIRQ_ARM_CACHE picks another)"
        ) from None
    with os.fdopen(fd) as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _log(f"waiting for another process preparing {cache}")
            fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def _die_with_parent() -> None:
    """preexec_fn: a build step (debootstrap, pip) ends when the preparing process dies."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _run(cmd: list[str], what: str, **kw) -> subprocess.CompletedProcess:
    # subprocess.run kills the child if we are interrupted (KeyboardInterrupt); the caller removes the temp dir
    r = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=_die_with_parent, **kw)
    if r.returncode != 0:
        tail = (r.stderr.strip() or r.stdout.strip()).splitlines()[-15:]
        detail = "\n  ".join(tail)
        raise ArmSetupError(f"{what} failed (exit {r.returncode}): {' '.join(cmd[:6])} ...\n  {detail}")
    return r


def _mkdtemp(prefix: str, cache: Path) -> Path:
    tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=cache))
    tmp.chmod(0o755)  # prepared once as root, then used by anyone
    return tmp


def _replace_dir(tmp: Path, final: Path) -> None:
    if final.exists():
        old = final.with_name(final.name + f".old-{os.getpid()}")
        final.rename(old)
        shutil.rmtree(old, ignore_errors=True)
    tmp.rename(final)


def _build_rootfs(cache: Path, debootstrap: str) -> Path:
    if os.geteuid() != 0:
        raise ArmSetupError(
            f"building the arm64 root filesystem needs root (debootstrap): run `sudo {sys.executable} -m device_emulation.arm prepare` once"
        )
    mirror = debian_mirror()
    tmp = _mkdtemp("rootfs.tmp-", cache)
    t0 = time.monotonic()
    _log(f"building a Debian {SUITE} arm64 root filesystem with Python 3.11 from {mirror} (one-off, ~1 min)")
    try:
        _run(
            [
                debootstrap,
                "--foreign",
                "--arch=arm64",
                "--variant=minbase",
                "--include=python3.11",
                SUITE,
                str(tmp),
                mirror,
            ],
            "debootstrap",
        )
        # --foreign unpacked only the 'required' packages; unpack the rest (python3.11 and its libraries)
        # without running any maintainer script (that would need the emulated second stage).
        debpaths = dict(
            line.split(None, 1) for line in (tmp / "debootstrap" / "debpaths").read_text().splitlines() if line.strip()
        )
        for pkg in (tmp / "debootstrap" / "base").read_text().split():
            deb = tmp / debpaths[pkg].strip().lstrip("/")
            # --keep-directory-symlink: keep the merged-/usr links (lib -> usr/lib) instead of replacing them
            dpkg = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=subprocess.PIPE)
            tar = subprocess.run(
                ["tar", "-x", "--keep-directory-symlink", "-C", str(tmp)],
                stdin=dpkg.stdout,
                capture_output=True,
                text=True,
            )
            dpkg.wait()
            if dpkg.returncode or tar.returncode:
                raise ArmSetupError(f"unpacking {deb.name} failed: {tar.stderr.strip()[-300:]}")
        for link in ("bin", "sbin", "lib"):
            if not (tmp / link).is_symlink():
                raise ArmSetupError(f"rootfs /{link} is no longer a link to usr/{link}: unexpected package layout")
        for deb in (tmp / "var/cache/apt/archives").glob("*.deb"):
            deb.unlink()
        # proc is a link to the host's /proc; a real directory with a plain cpuinfo is what qemu -L reads first
        proc = tmp / "proc"
        if proc.is_symlink() or proc.is_file():
            proc.unlink()
        proc.mkdir(exist_ok=True)
        (proc / "cpuinfo").write_text(cpuinfo_text())
        if not (tmp / GUEST_PYTHON).is_file():
            raise ArmSetupError(f"{GUEST_PYTHON} missing from the root filesystem after unpacking")
        _write_stamp(
            tmp, _rootfs_recipe() | {"mirror": mirror, "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        )
        final = cache / "rootfs"
        _replace_dir(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _log(f"root filesystem ready in {time.monotonic() - t0:.0f} s: {final}")
    return final


def _cpu_view(cache: Path, rootfs: Path, cpu: str) -> Path:
    """rootfs as seen with another CPU's cpuinfo: links to rootfs's top-level entries, its own proc/."""
    final = cache / f"rootfs-{cpu}"
    key = {
        "rootfs_built": (_read_stamp(rootfs) or {}).get("built"),
        "cpuinfo": hashlib.sha256(cpuinfo_text(cpu).encode()).hexdigest()[:12],
    }
    stamp = _read_stamp(final)
    if stamp is not None and all(stamp.get(k) == v for k, v in key.items()):
        return final
    tmp = _mkdtemp(f"rootfs-{cpu}.tmp-", cache)
    try:
        for entry in rootfs.iterdir():
            if entry.name != "proc" and not entry.name.startswith("."):
                (tmp / entry.name).symlink_to(Path("..") / rootfs.name / entry.name)
        (tmp / "proc").mkdir()
        (tmp / "proc" / "cpuinfo").write_text(cpuinfo_text(cpu))
        _write_stamp(tmp, key)
        _replace_dir(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def _wheel_tags(site: Path) -> dict[str, str]:
    """{distribution-version: first wheel tag} of what pip installed, e.g. 'cp311-cp311-manylinux_2_28_aarch64'."""
    tags = {}
    for wheel in sorted(site.glob("*.dist-info/WHEEL")):
        tag = next(
            (line.split(":", 1)[1].strip() for line in wheel.read_text().splitlines() if line.startswith("Tag:")), "?"
        )
        tags[wheel.parent.name.removesuffix(".dist-info")] = tag
    return tags


def _install_site(cache: Path, reqs: list[str]) -> Path:
    final = cache / f"site-{_site_key(reqs)}"
    tmp = _mkdtemp("site.tmp-", cache)
    t0 = time.monotonic()
    _log(f"installing aarch64 wheels ({', '.join(reqs)}) from PyPI")
    try:
        _run(
            [
                sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-input",
                *(arg for plat in WHEEL_PLATFORMS for arg in ("--platform", plat)),
                "--python-version", "3.11", "--implementation", "cp",  # ABIs: cp311, abi3, none (as on the Pi)
                "--only-binary=:all:", "--target", str(tmp), *reqs,
            ],
            "pip install of the aarch64 wheels",
        )  # fmt: skip
        _write_stamp(tmp, {"requirements": reqs, "wheels": _wheel_tags(tmp)})
        _replace_dir(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _log(f"wheels ready in {time.monotonic() - t0:.0f} s: {final}")
    return final


def _verify(stack: ArmStack) -> dict:
    """Import the bridge's stack in the guest and return what it reports (machine, versions)."""
    code = (
        "import json, platform, numpy, onnxruntime, zmq, msgpack, firmware_bridge.device as d;"
        "print(json.dumps(d.device_info('check')))"
    )
    r = _run(stack.python_command(["-c", code]), "the emulated python check", timeout=300)
    info = json.loads(r.stdout.strip().splitlines()[-1])
    if info.get("machine") != "aarch64":
        raise ArmSetupError(f"the emulated python reports machine {info.get('machine')!r}, expected aarch64")
    if stack.cpu.replace("cortex-a", "Cortex-A") not in str(info.get("cpu_model")):
        raise ArmSetupError(f"the emulated python reads cpu model {info.get('cpu_model')!r}, expected {stack.cpu}")
    return info


def prepare(cache: Path | None = None, *, cpu: str | None = None, verify: bool = True) -> ArmStack:
    """Build what is missing (root filesystem, wheels), reuse what is cached; return the stack
    for this CPU model (default: AIRQ_ARM_CPU, else cortex-a72)."""
    cache = cache or cache_dir()
    cpu = selected_cpu(cpu)
    with _locked(cache):
        for leftover in [*cache.glob("*.tmp-*"), *cache.glob("*.old-*")]:  # interrupted earlier builds
            if leftover.is_symlink():
                leftover.unlink()
                continue
            shutil.rmtree(leftover, ignore_errors=True)
        rootfs = cache / "rootfs"
        stamp = _read_stamp(rootfs)
        built = False
        if stamp is None or any(stamp.get(k) != v for k, v in _rootfs_recipe().items()):
            qemu, debootstrap = find_tools()
            rootfs = _build_rootfs(cache, debootstrap)
            built = True
        else:
            qemu = find_qemu()
        reqs = wheel_requirements()
        site = cache / f"site-{_site_key(reqs)}"
        stamp = _read_stamp(site)
        if stamp is None or stamp.get("requirements") != reqs:
            site = _install_site(cache, reqs)
            built = True
            for stale in cache.glob("site-*"):
                if stale != site:
                    shutil.rmtree(stale, ignore_errors=True)
        if cpu != CPU:
            rootfs = _cpu_view(cache, rootfs, cpu)
        stack = ArmStack(rootfs=rootfs, site=site, qemu=qemu, cpu=cpu)
        checked = cache / f".airq-verified-{cpu}"
        key = f"{(_read_stamp(rootfs) or {}).get('built')} {site.name}"
        if verify and (built or not checked.exists() or checked.read_text() != key):
            info = _verify(stack)
            with contextlib.suppress(OSError):  # a cache prepared by root, used by a user: verify again next time
                checked.write_text(key)
            _log(
                f"checked: {info['machine']} python {info['python_version']}, onnxruntime {info['onnxruntime_version']}, "
                f"numpy {info['numpy_version']}, pyzmq {info['pyzmq_version']}, msgpack {info['msgpack_version']}"
            )
        return stack


def emulated_bridge_command(argv: list[str], cpu: str | None = None) -> list[str]:
    """The argv after the python executable (``["-m", "firmware_bridge.serve", ...]``) -> the full command
    that runs it as aarch64 under qemu (CPU model: ``cpu``, else AIRQ_ARM_CPU, else cortex-a72), with
    the arm64 stack prepared or reused from the cache."""
    return prepare(cpu=cpu).python_command(list(argv))


# ---------------------------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(
        prog="python -m device_emulation.arm", description="The bridge's aarch64 stack under qemu emulation."
    )
    p.add_argument("--cpu", choices=tuple(CPUS), help=f"qemu CPU model (default: AIRQ_ARM_CPU, else {CPU})")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("prepare", help="build or reuse the arm64 root filesystem and wheels, and check them")
    sub.add_parser("command", help="print the command prefix that runs the guest python")
    run = sub.add_parser("run", help="run the guest python with these arguments (after --)")
    run.add_argument("args", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # kill -TERM cleans up like Ctrl-C
    try:
        stack = prepare(cpu=a.cpu)
    except ArmSetupError as e:
        print(error_line(e), file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        print("interrupted: nothing half-built was kept; run again to prepare", file=sys.stderr)
        return EXIT_INTERRUPTED
    if a.cmd == "prepare":
        print(f"rootfs: {stack.rootfs}\nwheels: {stack.site}\nqemu: {stack.qemu} -cpu {stack.cpu}")
    elif a.cmd == "command":
        print(" ".join(stack.python_command([])))
    else:
        args = a.args[1:] if a.args[:1] == ["--"] else a.args
        return subprocess.call(stack.python_command(args))
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
