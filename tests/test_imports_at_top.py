"""Imports stand at the top of a module. An import inside a function body is allowed only when it is deferred on
purpose: it imports a heavy or optional package (HEAVY below, with why), or a comment says why (``deferred:``
on the import's line, or heading its block of imports just above it). A first-party module that imports a heavy
package at its top needs the comment: the test cannot tell it from any other module.

Deferring an import to break an import cycle is not a reason: tests/test_architecture.py forbids cycles, even
through imports inside functions.

For the counts in a change's notes (total and first-party imports inside function bodies, per package):

    python -c 'from tests.test_imports_at_top import body_import_counts; print(body_import_counts())'
"""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

from tests.test_architecture import ALL, REPO

PACKAGES = tuple(sorted(ALL))

# Packages a function may import without a comment: heavy (their import costs a CLI's --help or a bad flag's
# one-line error most of a second or more; tests/test_cli_contract.py checks several) or optional (an extra, or a
# package some installs run without), by top-level name.
HEAVY = {
    "torch": "seconds to import",
    "stable_baselines3": "imports torch",
    "onnx": "~0.2 s to import; host side only, the Pi runs without it",
    "onnxruntime": "~0.3 s to import; the CLIs answer a wrong flag before it loads",
    "matplotlib": "plots only; nav_env and the reports' data code import without it",
    "mpl_toolkits": "matplotlib's toolkits, as matplotlib",
    "PIL": "Pillow: GIF frames only",
    "scipy": "over a second to import (scipy.stats), for a few statistics",
    "statsmodels": "statistics only, heavy as scipy",
    "jinja2": "the HTML reports only",
    "ray": "the distributed / study extra; seconds to import",
    "mujoco": "the dynamics extra (nav_env's mujoco backend)",
    "numba": "the dynamics extra; compiles at import",
    "pymavlink": "the mavlink extra (the bridge runs without it)",
    "airsim": "the airsim extra (Microsoft's client)",
    "cosysairsim": "the airsim extra",
    "msgpackrpc": "the AirSim clients' RPC layer (airsim extra)",
    "minatar": "the study extra (registers MinAtar's envs)",
    "ale_py": "the study extra (registers the Atari envs)",
    "pybullet_envs_gymnasium": "the locomotion extra",
    "tqdm": "optional: airq_cli imports only the standard library, and nav_env runs without tqdm",
}

MARK = "deferred:"

Import = ast.Import | ast.ImportFrom


def body_imports(tree: ast.Module) -> list[Import]:
    """Every import inside a function or method body (nested ones too), in source order."""
    found: list[Import] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if in_function and isinstance(child, ast.Import | ast.ImportFrom):
                found.append(child)
            visit(child, in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda))

    visit(tree, False)
    return sorted(found, key=lambda n: (n.lineno, n.col_offset))


def imported_names(node: Import) -> list[str]:
    """The modules an import names; a relative import as its dots and module (``..pkg``)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    return ["." * node.level + (node.module or "")]


def is_first_party(node: Import) -> bool:
    return any(name.startswith(".") or name.split(".")[0] in PACKAGES for name in imported_names(node))


def is_heavy(node: Import) -> bool:
    return all(not name.startswith(".") and name.split(".")[0] in HEAVY for name in imported_names(node))


def comment_lines(source: str) -> dict[int, str]:
    """{line number: comment text} of the source's comments (tokens, so text inside strings is no comment)."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return {t.start[0]: t.string for t in tokens if t.type == tokenize.COMMENT}


def marked(node: Import, comments: dict[int, str], own_lines: set[int], import_lines: set[int]) -> bool:
    """A ``deferred:`` comment on one of the import's lines, or in the comment just above the block of imports
    it stands in (a block of deferred imports shares one comment). Another import's end-of-line comment speaks
    for that import only, and a comment between two imports starts a new block."""
    if any(MARK in comments.get(n, "") for n in range(node.lineno, (node.end_lineno or node.lineno) + 1)):
        return True
    line = node.lineno - 1
    while line in import_lines and line not in own_lines:
        line -= 1
    while line in own_lines:
        if MARK in comments[line]:
            return True
        line -= 1
    return False


def unexplained(source: str, path: str) -> list[str]:
    """``path:line: import`` for each import inside a function body of ``source`` that nothing allows."""
    tree = ast.parse(source, path)
    comments = comment_lines(source)
    lines = source.splitlines()
    own_lines = {n for n in comments if lines[n - 1].lstrip().startswith("#")}
    imports = [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]
    import_lines = {line for n in imports for line in range(n.lineno, (n.end_lineno or n.lineno) + 1)}
    return [
        f"{path}:{node.lineno}: {ast.unparse(node)}"
        for node in body_imports(tree)
        if not is_heavy(node) and not marked(node, comments, own_lines, import_lines)
    ]


def package_files(packages: tuple[str, ...] = PACKAGES) -> list[Path]:
    return [p for package in packages for p in sorted((REPO / package).rglob("*.py"))]


def body_import_counts(packages: tuple[str, ...] = PACKAGES) -> dict[str, tuple[int, int]]:
    """{package: (imports inside function bodies, of them first-party)}, and the sum under "total". An import
    statement counts once, however many names it imports."""
    counts: dict[str, tuple[int, int]] = {}
    for package in packages:
        nodes = [n for p in sorted((REPO / package).rglob("*.py")) for n in body_imports(ast.parse(p.read_text()))]
        counts[package] = (len(nodes), sum(is_first_party(n) for n in nodes))
    counts["total"] = (sum(t for t, _ in counts.values()), sum(f for _, f in counts.values()))
    return counts


def test_imports_inside_functions_are_deferred_on_purpose():
    wrong = [line for path in package_files() for line in unexplained(path.read_text(), str(path.relative_to(REPO)))]
    assert not wrong, (
        "imports inside function bodies: move them to the top of the module, or, if the module they import is "
        f"heavy or optional, say so in a `# {MARK} ...` comment on the line above:\n" + "\n".join(wrong)
    )


def test_the_check_sees_what_it_should():
    source = '''
import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pkg.types import Thing


def plain():
    import os
    return os.sep


def heavy():
    import torch
    from matplotlib import pyplot
    from onnxruntime.quantization import quantize_static
    return torch, pyplot, quantize_static


def commented():
    # deferred: pkg.model imports torch at its top
    from pkg.model import Model
    from pkg.other import helper
    import pkg.third  # deferred: the AirSim client pulls msgpackrpc in
    # a comment on why, but not the word
    from pkg.fourth import nothing
    return Model, helper, pkg.third, nothing


def mixed():
    import torch, os
    from . import sibling
    return torch, os, sibling


class K:
    def method(self):
        text = """
        # deferred: inside a string, not a comment
        """
        from pkg.late import late

        def inner():
            from pkg.inner import deep
            return deep

        return text, late, inner


pending = lambda: __import__("json")
'''
    assert unexplained(source, "p/m.py") == [
        "p/m.py:10: import os",
        "p/m.py:27: from pkg.fourth import nothing",
        "p/m.py:32: import torch, os",
        "p/m.py:33: from . import sibling",
        "p/m.py:42: from pkg.late import late",
        "p/m.py:45: from pkg.inner import deep",
    ]
    nodes = body_imports(ast.parse(source))
    assert [n.lineno for n in nodes] == [10, 15, 16, 17, 23, 24, 25, 27, 32, 33, 42, 45]
    assert [is_first_party(n) for n in nodes].count(True) == 1  # `from . import sibling`; "pkg" is no package here
