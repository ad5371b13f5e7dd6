"""The folders show the flow, and the imports keep it: env -> policies -> quantize; the loop (hil) <-> the
device (firmware_bridge); the studies on top. Each package may import only the packages below it.
docs/architecture.md draws the same picture."""

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ALL = {
    "airq_cli",
    "firmware_bridge",
    "nav_env",
    "policies",
    "quantize",
    "hil",
    "device_emulation",
    "deployment_study",
    "actorq",
    "quarl",
}
# module prefixes a package may import (a package name allows all of it)
ALLOWED = {
    "airq_cli": set(),  # the tools' shared contract: standard library only
    "firmware_bridge": set(),  # the Pi install is this package alone
    "nav_env": {"airq_cli", "firmware_bridge.device"},  # device.py describes the machine (stdlib only)
    "policies": {"airq_cli", "nav_env", "firmware_bridge.device"},
    "quantize": {"airq_cli", "nav_env", "policies", "firmware_bridge.device", "firmware_bridge.int8_kernels"},
    "device_emulation": {"airq_cli", "firmware_bridge"},
    "hil": {"airq_cli", "nav_env", "firmware_bridge", "device_emulation"},  # no policies, no quantize, no torch
    # ActorQ (issue 17): an fp32 learner and int8 actors, on top of training and quantization; never on the Pi
    "actorq": {"airq_cli", "nav_env", "policies", "quantize", "firmware_bridge"},
    # the QuaRL study on standard tasks (issue 18): training, export and quantization of SB3 policies; of the
    # nav env only the plotting helper and the HTML page every report uses
    "quarl": {
        "airq_cli",
        "nav_env.render",
        "nav_env.report_page",
        "policies",
        "quantize",
        "firmware_bridge.device",
        "firmware_bridge.int8_kernels",
    },
    "deployment_study": ALL - {"deployment_study"},  # a study sits on every stage
}


def first_party_imports(package: str) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in sorted((REPO / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                if name.split(".")[0] in ALL - {package}:
                    found.setdefault(name, set()).add(str(path.relative_to(REPO)))
    return found


@pytest.mark.parametrize("package", sorted(ALL))
def test_imports_point_down_the_stack(package):
    allowed = ALLOWED[package]
    wrong = {
        name: sorted(files)
        for name, files in first_party_imports(package).items()
        if not any(name == a or name.startswith(a + ".") for a in allowed)
    }
    assert not wrong, f"{package} imports what sits above or beside it: {wrong}"


def test_every_package_is_placed():
    on_disk = {p.parent.name for p in REPO.glob("*/__init__.py")}
    assert on_disk == ALL, f"a package without a place in the architecture: {on_disk ^ ALL}"


def test_no_torch_in_the_env_the_loop_or_the_device():
    for package in ("nav_env", "hil", "firmware_bridge", "device_emulation", "airq_cli"):
        for path in (REPO / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module:
                    names = [node.module]
                else:
                    continue
                assert not any(n.split(".")[0] in ("torch", "stable_baselines3") for n in names), path
