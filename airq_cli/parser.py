"""argparse with the contract: one-line errors (exit 2), ``python -m`` usage, defaults in --help."""

from __future__ import annotations

import argparse
import copy
import dataclasses
import sys
import types
import typing
from collections.abc import Callable, Mapping, Sequence
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


def arg(
    help: str | Callable[[], str] | None = None,  # noqa: A002 - argparse's name
    *,
    flag: str | None = None,
    metavar: str | None = None,
    choices: Sequence[str] | Callable[[], Sequence[str]] | None = None,
    type: Callable[[str], Any] | None = None,  # noqa: A002 - argparse's name
    required: bool = False,
) -> dict[str, Any]:
    """A dataclass field's metadata (under ``cli``) for :func:`add_arguments`: its flag's help and the rest, written
    where the field is. ``flag`` when it is not the field's name with dashes; ``type`` when the annotation's is not the
    check (e.g. ``output_dir``); ``help`` and ``choices`` may be functions, called when a parser is built (a
    registry's names as they are then)."""
    given = {"help": help, "flag": flag, "metavar": metavar, "choices": choices, "type": type}
    return {"cli": {k: v for k, v in given.items() if v is not None} | ({"required": True} if required else {})}


def flag_of(f: dataclasses.Field) -> str:
    """The command-line flag of a dataclass field: its :func:`arg` ``flag``, else ``--`` and its name with dashes."""
    return str(f.metadata.get("cli", {}).get("flag") or "--" + f.name.replace("_", "-"))


def add_arguments(
    parser: argparse.ArgumentParser,
    cls: type,
    *,
    skip: Sequence[str] = (),
    groups: Mapping[str, argparse._ActionsContainer] | None = None,
) -> argparse.ArgumentParser:
    """One flag per field of the dataclass ``cls`` (but ``skip``), in field order, written once: its type from the
    annotation (``X | None`` is X, ``bool`` a switch, ``list[X]`` a repeatable flag), its help and the rest from
    the field's :func:`arg` metadata, its default from the field (:func:`defaults_from`). ``groups``: the container
    (e.g. a mutually exclusive group) a field's flag goes into."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        options = {
            k: v() if k in ("help", "choices") and callable(v) else v for k, v in f.metadata.get("cli", {}).items()
        }
        flag = flag_of(f)
        options.pop("flag", None)
        kind = hints[f.name]
        members = [t for t in typing.get_args(kind) if t is not type(None)]
        if typing.get_origin(kind) in (types.UnionType, typing.Union) and len(members) == 1:
            kind = members[0]
        if kind is bool:
            options["action"] = "store_true"
        elif typing.get_origin(kind) is list:
            options.setdefault("type", typing.get_args(kind)[0])
            options["action"] = "append"
        else:
            options.setdefault("type", kind)
        options["dest"] = f.name
        (groups or {}).get(f.name, parser).add_argument(flag, **options)
    return defaults_from(parser, cls)
