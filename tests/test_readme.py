"""README.md is a user's first screen and docs/results.md holds every measured figure: the quick start's commands
run as written (each module's --help), the README stays short and narrow, every results section names its command
and when, on what CPU and with which versions it was measured, the docs state the present, and every relative link
leads somewhere."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
RESULTS = REPO / "docs" / "results.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
FIRST_SCREEN = 60  # lines: the set-up commands and the quick start of the six jobs sit within them
MAX_LINES = 300
MAX_WIDTH = 120
SUBCOMMAND = re.compile(r"^[a-z][a-z0-9-]*$")  # `quantize ptq`; a path, a flag or `baseline:x` is an argument


def first_screen() -> list[str]:
    return README.read_text().splitlines()[:FIRST_SCREEN]


def quick_start_commands() -> list[tuple[str, list[str]]]:
    """(module, arguments) of each command line `python -m MODULE ...` on the README's first screen, in order."""
    commands = []
    for line in first_screen():
        match = re.match(r"\s*(?:\$ )?python -m ([\w.]+)(.*)", line)
        if match:
            commands.append((match.group(1), shlex.split(match.group(2), comments=True)))
    return commands


def help_argv(module: str, args: list[str]) -> list[str]:
    """`python -m X sub ...` -> `python -m X sub --help`; `python -m X ...` -> `python -m X --help`."""
    sub = args[:1] if args and SUBCOMMAND.match(args[0]) else []
    return [module, *sub, "--help"]


def run_help(argv: list[str]) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    return subprocess.run(
        [sys.executable, "-m", *argv], cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False
    )


def test_the_first_screen_sets_up_then_starts_the_five_jobs():
    text = "\n".join(first_screen())
    assert "make demo" in text and "make test" in text
    assert text.index("make demo") < text.index("## Quick start")
    modules = [module for module, _ in quick_start_commands()]
    for job in ("policies.train", "quantize", "hil.run", "firmware_bridge.serve", "policies.evaluate"):
        assert job in modules, f"the quick start has no `python -m {job}` within the first {FIRST_SCREEN} lines"
    runs = [args for module, args in quick_start_commands() if module == "hil.run"]
    assert any("--sim-only" in args for args in runs) and any("--host" in args for args in runs)


COMMANDS = quick_start_commands()


@pytest.mark.parametrize("module,args", COMMANDS, ids=[" ".join([m, *a])[:70] for m, a in COMMANDS])
def test_each_quick_start_command_answers_help_with_its_flags(module, args):
    argv = help_argv(module, args)
    done = run_help(argv)
    assert done.returncode == 0, f"python -m {' '.join(argv)} exited {done.returncode}: {done.stderr[-2000:]}"
    assert f"usage: python -m {' '.join(argv[:-1])}" in done.stdout
    flags = {arg.split("=")[0] for arg in args if arg.startswith("--")}
    missing = sorted(flag for flag in flags if flag not in done.stdout)
    assert not missing, f"the README passes {missing} to python -m {' '.join(argv[:-1])}, whose --help has none"


def test_readme_is_short_and_narrow():
    lines = README.read_text().splitlines()
    assert len(lines) < MAX_LINES, f"README.md has {len(lines)} lines (under {MAX_LINES} wanted)"
    wide = [(n, len(line)) for n, line in enumerate(lines, 1) if len(line) > MAX_WIDTH]
    assert not wide, f"README.md lines over {MAX_WIDTH} characters (line, length): {wide}"


# docs/results.md: every `## ` section is one measured result. It names the command that gives its figures on a
# line starting "Command:" and, on a paragraph starting "Measured:", the date, the CPU model, the CPU's int8
# instruction set and the versions; a table or figure sits below the section's first "Command:" line.
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
CPU = re.compile(r"\b(AMD EPYC|Intel Xeon)\b")
INT8_ISA = re.compile(r"\b(AVX2|AVX-512 VNNI|VNNI|NEON)\b")
VERSION = re.compile(r"\b(onnxruntime|numpy|torch|Python|pyzmq|Ray|gymnasium) \d+\.\d+")
COMMAND = re.compile(r"`(python -m |python |make |bash |pytest )")


def results_sections() -> tuple[str, list[tuple[str, str]]]:
    parts = re.split(r"^## (.+)$", RESULTS.read_text(), flags=re.M)
    return parts[0], list(zip(parts[1::2], parts[2::2], strict=True))


def paragraphs_starting(body: str, label: str) -> list[str]:
    return [p for p in re.split(r"\n\s*\n", body) if p.lstrip().startswith(label)]


def test_results_page_has_sections_and_no_figures_above_them():
    preamble, sections = results_sections()
    assert len(sections) >= 10
    assert not re.search(r"^\|", preamble, re.M), "a table above the first section has no command"


@pytest.mark.parametrize("title,body", results_sections()[1], ids=[title for title, _ in results_sections()[1]])
def test_each_result_names_its_command_date_machine_and_versions(title, body):
    commands = paragraphs_starting(body, "Command:")
    assert commands and all(COMMAND.search(c) for c in commands), f"{title!r}: no `Command:` with its command"
    measured = paragraphs_starting(body, "Measured:")
    assert measured, f"{title!r}: no `Measured:` paragraph"
    for paragraph in measured:
        text = " ".join(paragraph.split())
        for what, pattern in (("date", DATE), ("CPU", CPU), ("int8 instruction set", INT8_ISA), ("version", VERSION)):
            assert pattern.search(text), f"{title!r}: its Measured paragraph names no {what}: {text[:200]}"
    first_command = body.index("Command:")
    for table in re.finditer(r"^\|", body, re.M):
        assert table.start() > first_command, f"{title!r}: a table above the section's command"


# README and docs state the present: history lives in git, not in prose.
STALE = {
    "an issue number": re.compile(r"\bissue #?\d+", re.I),
    "a past value in parentheses": re.compile(r"\(was\b"),
    "a commit of an earlier run": re.compile(r"\b(commit|code|clone of) [0-9a-f]{7,40}\b"),
    "an earlier session": re.compile(r"\bearlier session", re.I),
    "the unchecked VNNI claim": re.compile(r"not yet on an AVX-512", re.I),
}


@pytest.mark.parametrize("path", [README, *DOCS], ids=lambda p: str(p.relative_to(REPO)))
def test_docs_state_the_present(path):
    found = [
        f"{path.name}:{n}: {what}: {line.strip()[:100]}"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        for what, pattern in STALE.items()
        if pattern.search(line)
    ]
    assert not found, "\n".join(found)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return {slug(h) for h in re.findall(r"^#+ (.+)$", text, re.M)}


@pytest.mark.parametrize("path", [README, *DOCS], ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_lead_somewhere(path):
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", path.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(target)
    assert not broken, f"{path.name}: links to nothing: {broken}"
