"""A module's private names (one leading underscore) are its own: no first-party module imports another's, reads
or writes another module's private attribute, or calls a private method a base class in another module defines.
What one module needs of another is that module's public, documented API. A class may use the private members
of any class its own module defines. Third-party private names (SB3's ``_setup_lr_schedule``, torch's
``_conv_forward``) are out of scope: the finder reports only names a first-party module defines, and
``THIRD_PARTY`` lists the third-party uses whose name a first-party module happens to define as well."""

import ast
from collections.abc import Collection
from dataclasses import dataclass
from functools import cache

from tests.test_architecture import ALL, MODULES, REPO


def is_private(name: str) -> bool:
    """One or more leading underscores, not a dunder, not the throwaway ``_``."""
    return name.startswith("_") and name != "_" and not (name.startswith("__") and name.endswith("__"))


def defined_names(tree: ast.Module) -> set[str]:
    """Every private name the module defines: functions, methods and classes at any depth, names assigned
    anywhere (module globals, class attributes, dataclass fields) and attributes assigned through ``self`` or
    ``cls``. A name a module imports is the other module's."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name)
            and node.value.id in ("self", "cls")
        ):
            names.add(node.attr)
    return {n for n in names if is_private(n)}


def imported_module(module: str, node: ast.ImportFrom, is_package: bool) -> str:
    """The absolute module name of ``from ... import``, relative imports resolved against ``module``."""
    if not node.level:
        return node.module or ""
    parts = module.split(".") if is_package else module.split(".")[:-1]
    anchor = ".".join(parts[: len(parts) - node.level + 1])
    return f"{anchor}.{node.module}" if node.module else anchor


@dataclass(frozen=True)
class Use:
    path: str
    line: int
    text: str  # ``from m import _name``, ``import m._name`` or the attribute access, ``obj._name``

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.text}"


def private_uses(sources: dict[str, tuple[str, str, bool]], packages: Collection[str] = ALL) -> list[Use]:
    """Uses of another first-party module's private names in ``sources`` (module -> (path, text, is_package)):
    ``from m import _name`` and ``import m._name`` of a module ``m`` in ``packages``; ``obj._name`` where the module
    does not define ``_name`` and another module does; ``self._name``, ``cls._name`` and ``super()._name``
    likewise (a subclass reaching into its base class in another module). A name no first-party module defines
    belongs to a third-party library and is not reported."""
    trees = {m: ast.parse(text, path) for m, (path, text, _) in sources.items()}
    defined = {m: defined_names(tree) for m, tree in trees.items()}
    uses: list[Use] = []
    for module, tree in trees.items():
        path, _, is_package = sources[module]
        others = set().union(*(names for m, names in defined.items() if m != module))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                source = imported_module(module, node, is_package)
                if source.split(".")[0] in packages and source != module:
                    uses += [
                        Use(path, node.lineno, f"from {source} import {a.name}")
                        for a in node.names
                        if is_private(a.name)
                    ]
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] in packages and any(is_private(p) for p in alias.name.split(".")):
                        uses.append(Use(path, node.lineno, f"import {alias.name}"))
            elif isinstance(node, ast.Attribute) and is_private(node.attr):
                if node.attr in defined[module] or node.attr not in others:
                    continue
                base = node.value
                is_super = isinstance(base, ast.Call) and isinstance(base.func, ast.Name) and base.func.id == "super"
                owner = "super()" if is_super else ast.unparse(base)
                uses.append(Use(path, node.lineno, f"{owner}.{node.attr}"))
    return sorted(uses, key=lambda u: (u.path, u.line, u.text))


@cache
def first_party_uses() -> tuple[Use, ...]:
    sources = {m: (str(p.relative_to(REPO)), p.read_text(), p.name == "__init__.py") for m, p in MODULES.items()}
    return tuple(private_uses(sources))


# Private names of third-party objects that a first-party module also happens to define (the finder cannot tell
# the objects apart): (file, use) -> whose name it is.
THIRD_PARTY = {
    ("actorq/learner.py", "model._on_step"): "stable_baselines3's DQN: the target network copy learn() makes",
    ("airq_cli/parser.py", "parser._actions"): "argparse.ArgumentParser: it has no public list of its actions",
}


def test_no_module_uses_another_modules_private_names():
    uses = [u for u in first_party_uses() if (u.path, u.text) not in THIRD_PARTY]
    assert not uses, "another module's private names (make what a module needs of another public API):\n" + "\n".join(
        map(str, uses)
    )


def test_each_third_party_exception_is_still_needed():
    found = {(u.path, u.text) for u in first_party_uses()}
    assert set(THIRD_PARTY) <= found, f"exceptions that match nothing (remove them): {set(THIRD_PARTY) - found}"


def test_the_finder_flags_reach_ins_and_passes_a_modules_own_names():
    sources = {
        "p.sim": (
            "p/sim.py",
            """
def _hash(x): return x
class Sim:
    _registry = {}
    def __init__(self):
        self._arrays = []
    def _move(self): pass
    def run(self, other: "Sim"):
        other._move()  # a class of this module: its own
        return _hash(self._arrays)
""",
            False,
        ),
        "p.world": (
            "p/world.py",
            """
from p.sim import Sim, _hash
from . import sim
import argparse, p._impl
class World(Sim):
    def _own(self): pass
    def step(self):
        super()._move()
        self._own()
        self._arrays.append(_hash(1))
        sim._hash(2)
    @classmethod
    def make(cls):
        return cls._registry
def poke(s):
    s._move()
    s._arrays = []
    parser = argparse.ArgumentParser()
    return parser._actions, parser.__class__  # third party: not a first-party definition; a dunder
""",
            False,
        ),
        "p": ("p/__init__.py", "from .sim import Sim, _hash\n", True),
    }
    found = [str(u) for u in private_uses(sources, {"p"})]
    assert found == [
        "p/__init__.py:1: from p.sim import _hash",
        "p/world.py:2: from p.sim import _hash",
        "p/world.py:4: import p._impl",
        "p/world.py:8: super()._move",
        "p/world.py:10: self._arrays",
        "p/world.py:11: sim._hash",
        "p/world.py:14: cls._registry",
        "p/world.py:16: s._move",
        "p/world.py:17: s._arrays",
    ], found
