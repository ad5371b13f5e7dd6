"""docs/pi-install.md is followed by people on a fresh Pi: its commands must exist as written."""

from __future__ import annotations

import importlib
import re
import shlex
from pathlib import Path

import pytest

from firmware_bridge.cli import OneLineArgumentParser

GUIDE = (Path(__file__).resolve().parents[1] / "docs" / "pi-install.md").read_text()


def shell_lines() -> list[str]:
    blocks = re.findall(r"```sh\n(.*?)```", GUIDE, re.S)
    return [line for block in blocks for line in block.splitlines() if line.strip()]


def bridge_commands() -> list[tuple[str, list[str]]]:
    commands = []
    for line in shell_lines():
        match = re.search(r"python -m (firmware_bridge\.\w+)(.*)", line)
        if match:
            args = shlex.split(match.group(2), comments=True)
            if ">" in args:  # a redirect ends the command's own arguments
                args = args[: args.index(">")]
            commands.append((match.group(1), args))
    return commands


class Parsed(Exception):
    """Raised right after argparse accepted the arguments, so nothing else of the command runs."""


def test_the_guide_uses_every_device_command():
    modules = {module for module, _ in bridge_commands()}
    assert modules == {
        "firmware_bridge.serve",
        "firmware_bridge.keys",
        "firmware_bridge.systemd",
        "firmware_bridge.bench",
    }


@pytest.mark.parametrize("module,args", bridge_commands(), ids=lambda v: v if isinstance(v, str) else " ".join(v))
def test_each_device_command_parses_as_written(module, args, monkeypatch):
    original = OneLineArgumentParser.parse_args

    def parse_then_stop(self, argv=None, namespace=None):
        raise Parsed(original(self, argv, namespace))

    monkeypatch.setattr(OneLineArgumentParser, "parse_args", parse_then_stop)
    main = importlib.import_module(module).main
    if args == ["--help"]:
        with pytest.raises(SystemExit) as exit_info:
            main(args)
        assert exit_info.value.code == 0
        return
    with pytest.raises(Parsed):  # SystemExit(2) here would mean a flag the code does not have
        main(args)


def test_the_guide_keeps_what_a_fresh_pi_needs():
    text = " ".join(shell_lines())
    assert "dpkg --print-architecture" in GUIDE and "uname -m` must" not in GUIDE
    assert "scp -r" not in text and "pip wheel --no-deps" in text
    assert "no authentication" not in GUIDE
    serve = [
        args
        for module, args in bridge_commands()
        if module in ("firmware_bridge.serve", "firmware_bridge.systemd") and "--help" not in args
    ]
    assert serve and all("--curve-secret" in a and "--curve-clients" in a for a in serve)
    bench = [args for module, args in bridge_commands() if module == "firmware_bridge.bench"]
    assert bench and all("--policy" in a for a in bench)  # the Pi has no onnx to build the default MLP
    # Keys and the policy live outside the service's working directory (/var/lib/airq-bridge).
    assert "/var/lib/airq-bridge/" not in text.replace("--home-dir /var/lib/airq-bridge ", "")
