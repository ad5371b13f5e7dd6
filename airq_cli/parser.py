"""argparse with the contract: one-line errors (exit 2), ``python -m`` usage, defaults in --help."""

from __future__ import annotations

import argparse
import copy
import dataclasses
import sys
from pathlib import PurePath
from typing import Any, NoReturn

from airq_cli.contract import EXIT_USAGE, error_line

MODULE_PREFIX = "python -m "


def default_note(action: argparse.Action) -> str:
    """`` (default: X)`` for an action whose default means something, else ""."""
    default = action.default
    if default is None or default is argparse.SUPPRESS or action.help == argparse.SUPPRESS or action.required:
        return ""
    if not action.option_strings and action.nargs not in ("?", "*"):
        return ""  # a required positional has no default to show
    if action.nargs == 0 and not isinstance(action, argparse.BooleanOptionalAction):
        return ""  # store_true / store_const / version: "default: False" says nothing
    if isinstance(default, (list, tuple)):
        shown = " ".join(map(str, default)) or "none"
    elif default == "":
        shown = '""'
    else:
        shown = str(default)
    return f" (default: {shown.replace('%', '%%')})"  # help strings are %-formatted


class HelpFormatter(argparse.HelpFormatter):
    """Every option with a default says it, unless its help already talks about its default."""

    def _format_action(self, action: argparse.Action) -> str:
        if not action.help and default_note(action):  # argparse prints no help line for help=None
            action = copy.copy(action)
            action.help = default_note(action).strip()
        return super()._format_action(action)

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text.lower():
            return text
        return text + default_note(action)


class ArgumentParser(argparse.ArgumentParser):
    """``prog`` is always ``python -m <module>`` (argparse would say ``train.py``); an error is one
    line (argparse prints the whole usage block); help shows defaults."""

    def __init__(self, prog: str | None = None, **kwargs: Any) -> None:
        if prog is None:
            raise TypeError("airq_cli.ArgumentParser needs prog='python -m <module>'")
        if not prog.startswith(MODULE_PREFIX):
            prog = MODULE_PREFIX + prog
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(prog=prog, **kwargs)

    def add_subparsers(self, **kwargs: Any):
        kwargs.setdefault("parser_class", _SubParser)
        return super().add_subparsers(**kwargs)

    def error(self, message: str) -> NoReturn:
        print(error_line(f"{message} (see {self.prog} --help)"), file=sys.stderr)
        sys.exit(EXIT_USAGE)


class _SubParser(ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)  # argparse does not pass the parent's on
        super().__init__(*args, **kwargs)


def defaults_from(
    parser: argparse.ArgumentParser, cls: type, names: dict[str, str] | None = None
) -> argparse.ArgumentParser:
    """Take each flag's default from the dataclass field of the same name (or ``names[dest]``), so it
    is written once. Paths become strings so that ``type=output_dir`` checks them like typed values."""
    # append actions add to their default: a dataclass's list default would be kept under the user's values
    field_of = {
        a.dest: (names or {}).get(a.dest, a.dest)
        for a in parser._actions  # noqa: SLF001 - no public list
        if not isinstance(a, argparse._AppendAction)
    }  # noqa: SLF001
    fields = {f.name: f for f in dataclasses.fields(cls)}
    defaults = {}
    for dest, name in field_of.items():
        f = fields.get(name)
        if f is None:
            continue
        if f.default is not dataclasses.MISSING:
            value = f.default
        elif f.default_factory is not dataclasses.MISSING:
            value = f.default_factory()
        else:
            continue  # a required field: the flag says required=True itself
        defaults[dest] = str(value) if isinstance(value, PurePath) else value
    parser.set_defaults(**defaults)
    return parser
