"""The folders show the flow, and the imports keep it: env -> policies -> quantize; the loop (hil) <-> the
device (firmware_bridge); the studies on top. Each package may import only the packages below it, and no
module imports itself back, inside a package or across them. docs/architecture.md draws the same picture."""

import ast
import tomllib
from collections.abc import Collection
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
    # device.py describes the machine; mavlink_link is the one MAVLink link (both stdlib only at import)
    "nav_env": {"airq_cli", "firmware_bridge.device", "firmware_bridge.mavlink_link"},
    "policies": {"airq_cli", "nav_env", "firmware_bridge.device"},
    "quantize": {"airq_cli", "nav_env", "policies", "firmware_bridge.device", "firmware_bridge.int8_kernels"},
    "device_emulation": {"airq_cli", "firmware_bridge"},
    "hil": {"airq_cli", "nav_env", "firmware_bridge", "device_emulation"},  # no policies, no quantize, no torch
    # ActorQ: an fp32 learner and int8 actors, on top of training and quantization; never on the Pi
    "actorq": {"airq_cli", "nav_env", "policies", "quantize", "firmware_bridge"},
    # the QuaRL study on standard tasks: training, export and quantization of SB3 policies; of the
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


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for package in sorted(ALL) for p in sorted((REPO / package).rglob("*.py"))}


def imported_modules(module: str, source: str, modules: Collection[str], is_package: bool = False) -> set[str]:
    """The modules among ``modules`` that ``module`` (its text: ``source``) imports, wherever the import stands:
    at the top, inside a function or method, or under ``if TYPE_CHECKING:`` (a type a module names is part of
    what it depends on, and mypy reads it). ``from pkg import name`` is the submodule pkg.name where there is
    one, else pkg itself. The parent packages an import runs first (``import a.b.c`` runs a/__init__.py) are
    not edges: an __init__.py that re-exports its submodules would otherwise close a cycle with each of them,
    and Python allows that one (the parent is in sys.modules before its submodules run). Names built at run
    time (importlib) are not seen."""

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    package = module if is_package else module.rpartition(".")[0]
    found: set[str | None] = set()
    for node in ast.walk(ast.parse(source, module)):
        if isinstance(node, ast.Import):
            found.update(known(a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{anchor}.{base}" if base else anchor
            found.update(known(f"{base}.{a.name}") for a in node.names)
    return {m for m in found if m is not None}


def import_graph() -> dict[str, set[str]]:
    return {
        m: imported_modules(m, path.read_text(), MODULES, is_package=path.name == "__init__.py")
        for m, path in MODULES.items()
    }


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module, and modules that import themselves (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph[v]:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(cycles)


def test_no_import_cycles():
    graph = import_graph()
    cycles = import_cycles(graph)
    described = [
        " <-> ".join(c) + ": " + "; ".join(f"{m} imports {', '.join(sorted(graph[m] & set(c)))}" for m in c)
        for c in cycles
    ]
    assert not cycles, "import cycles (move what both sides need below them):\n" + "\n".join(described)


def test_the_cycle_check_sees_every_import():
    modules = {"p", "p.a", "p.b", "p.sub", "p.sub.c", "q"}
    source = """
import q
from typing import TYPE_CHECKING
if TYPE_CHECKING:
    from p.sub.c import Thing
def later():
    from . import b
    from .sub import c, helper
class K:
    def method(self):
        from p import name_in_init
"""
    assert imported_modules("p.a", source, modules) == {"q", "p.sub.c", "p.b", "p.sub", "p"}
    assert imported_modules("p.sub", "from . import c\nfrom .. import a", modules, is_package=True) == {
        "p.sub.c",
        "p.a",
    }
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"d"}, "e": {"a"}}) == [["a", "b", "c"], ["d"]]


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


def test_mypy_checks_every_package():
    files = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]["files"]
    assert set(files) == ALL, f"packages outside mypy's files (pyproject.toml [tool.mypy]): {sorted(ALL - set(files))}"


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


def test_the_study_stages_render_nothing():
    """deployment_study's stages and the memory-fit experiment return data: only the commands (study.py,
    memfit.py) and the render modules themselves import a render module."""
    graph = import_graph()
    render = {m for m in MODULES if m.startswith("deployment_study.render")}
    importers = {m for m, imported in graph.items() if imported & render} - render
    assert importers <= {"deployment_study.study", "deployment_study.memfit"}, importers
