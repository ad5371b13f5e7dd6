"""The locked install: requirements/lock.txt pins every distribution of the tested venv (all extras).

    python requirements/lock.py write    # write lock.txt from the running venv (what `make lock` ends with)
    python requirements/lock.py check    # list every difference between the running venv and lock.txt

The Makefile installs with `pip install -c requirements/lock.txt ...`, so every machine gets these versions.
Versions are written without their local label (torch 2.13.0+cpu is locked as torch==2.13.0, which pip
matches to the CPU build): the build variant comes from the index (the Makefile takes torch from
PyTorch's CPU wheel index where it can reach it), the lock fixes the release. airq itself is not locked.
"""

from __future__ import annotations

import re
import sys
import sysconfig
from importlib.metadata import distributions
from pathlib import Path

LOCK = Path(__file__).resolve().with_name("lock.txt")
PROJECT = "airq"
HEADER = """\
# The locked install: every distribution of the venv that `make test` and `make test-arm` passed with
# (extras host, dev, airsim, distributed, study, dynamics and mavlink; Linux x86_64, Python 3.11). The Makefile installs
# with `-c` this file.
# Refresh: `make lock` (upgrades .venv to the newest releases pyproject.toml allows, then rewrites this
# file with python requirements/lock.py write); run `make test` and `make test-arm`, then commit it.
# Local version labels are dropped: torch==2.13.0 is the 2.13.0+cpu build taken from
# https://download.pytorch.org/whl/cpu (Makefile).
"""


def canonical(name: str) -> str:
    """PEP 503 normalized distribution name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def public(version: str) -> str:
    """The version without its local label: 2.13.0+cpu -> 2.13.0."""
    return version.split("+", 1)[0]


def installed() -> dict[str, tuple[str, str]]:
    """{canonical name: (name, version)} of every distribution installed in the interpreter's site-packages, but
    airq. Only there: Ray puts its vendored copies (psutil, colorama in ray/thirdparty_files) on sys.path when it
    is imported; they come with Ray's version, not as installs of their own."""
    out: dict[str, tuple[str, str]] = {}
    paths = sysconfig.get_paths()
    for dist in distributions(path=sorted({paths["purelib"], paths["platlib"]})):
        name = dist.metadata["Name"]
        if not name or canonical(name) == PROJECT:
            continue
        out.setdefault(canonical(name), (name, dist.version))  # the first on sys.path is the one imported
    return out


def read_lock(path: Path = LOCK) -> dict[str, tuple[str, str]]:
    """{canonical name: (name, version)} of a lock file's `name==version` lines."""
    out: dict[str, tuple[str, str]] = {}
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        if not sep or not name.strip() or not version.strip():
            raise ValueError(f"{path}:{n}: expected name==version, got {raw!r}")
        out[canonical(name.strip())] = (name.strip(), version.strip())
    return out


def differences(have: dict[str, tuple[str, str]], locked: dict[str, tuple[str, str]]) -> list[str]:
    """One line per distribution that is installed but not locked, locked but not installed, or at another version.

    A locked version without a local label matches an installed one with it (pip's `==` semantics).
    """
    out = []
    for key in sorted(have.keys() | locked.keys()):
        if key not in locked:
            out.append(f"{have[key][0]} {have[key][1]}: installed, not in the lock")
        elif key not in have:
            out.append(f"{locked[key][0]}=={locked[key][1]}: locked, not installed")
        else:
            version, want = have[key][1], locked[key][1]
            if version != want and ("+" in want or public(version) != want):
                out.append(f"{have[key][0]}: installed {version}, locked {want}")
    return out


def render(have: dict[str, tuple[str, str]]) -> str:
    lines = [HEADER]
    for key in sorted(have):
        name, version = have[key]
        lines.append(f"{name}=={public(version)}" + (f"  # installed {version}" if public(version) != version else ""))
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if argv[:1] == ["write"] and len(argv) <= 2:
        path = Path(argv[1]) if len(argv) == 2 else LOCK
        have = installed()
        tmp = path.with_name(path.name + ".partial")
        tmp.write_text(render(have))
        tmp.replace(path)  # atomic: a failed write never leaves a half lock
        print(f"wrote {path} ({len(have)} distributions)")
        return 0
    if argv == ["check"]:
        diff = differences(installed(), read_lock())
        print("\n".join(diff) if diff else f"the venv matches {LOCK}")
        return 1 if diff else 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
