"""One MAVLink endpoint grammar: every form docs/autopilot.md lists (section 4) and malformed ones are accepted or
refused alike by hil.run (--telemetry and --fc) and by the bridge (firmware_bridge.serve and firmware_bridge.systemd
--fc), a refusal in one line naming what is wrong. All of it is checked before anything opens, without pymavlink."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
from pathlib import Path

import pytest

from airq_cli import UserError
from firmware_bridge import serve, systemd
from firmware_bridge.actuators import check_fc
from firmware_bridge.mavlink_link import ENDPOINT_FORMS, NETWORK_KINDS, parse_endpoint
from hil.args import RunArgs
from hil.setup import check_args

REPO = Path(__file__).resolve().parents[2]
POLICY = REPO / "models" / "policy1_int8.onnx"
GOOD_TELEMETRY = "tcp:127.0.0.1:5762"


def documented_forms() -> list[tuple[str, str]]:
    """(form, example) for each row of docs/autopilot.md's endpoint table."""
    section = (REPO / "docs" / "autopilot.md").read_text().split("\n## 4. MAVLink endpoints\n", 1)[1]
    return re.findall(r"^\| `([a-z]+:[A-Z]+:[A-Z]+)` \| `([^`]+)` \|", section, re.M)


DOCUMENTED = documented_forms()
ACCEPTED = [example for _, example in DOCUMENTED] + [
    "tcp:localhost:5760",
    "tcpin:127.0.0.1:5760",
    "udpout:10.0.0.2:65535",
    "udpin:0.0.0.0:1",
    "serial:COM3:57600",
    "serial:/dev/serial/by-id/usb-ArduPilot_fmuv3-if00:115200",
]
REFUSED = {
    "": "a MAVLink endpoint is serial:DEVICE:BAUD",
    "5762": "a MAVLink endpoint is serial:DEVICE:BAUD",  # a bare port
    "/dev/ttyUSB0": "a MAVLink endpoint is serial:DEVICE:BAUD",  # a device without serial:
    "tcp:127.0.0.1:5760 ": "without spaces",
    "tcp:127.0.0.1": "tcp needs HOST:PORT",  # no port
    "udpin:14550": "udpin needs HOST:PORT",
    "tcp::5760": "tcp needs HOST:PORT",  # no host
    "udpout:127.0.0.1:": "udpout PORT must be a number within 1..65535",
    "tcp:127.0.0.1:0": "tcp PORT must be a number within 1..65535",
    "udpin:0.0.0.0:70000": "udpin PORT must be a number within 1..65535",
    "tcpin:0.0.0.0:http": "tcpin PORT must be a number within 1..65535",
    "udp:::1:14550": "no IPv6",
    "bluetooth:aa:bb": "unknown MAVLink link kind 'bluetooth'",
    "TCP:127.0.0.1:5760": "unknown MAVLink link kind 'TCP'",
    "udpbcast:255.255.255.255:14550": "unknown MAVLink link kind 'udpbcast'",
    "serial:": "serial needs DEVICE:BAUD",
    "serial:/dev/serial0": "serial needs DEVICE:BAUD",
    "serial::921600": "serial needs DEVICE:BAUD",
    "serial:/dev/serial0:fast": "serial BAUD must be a positive whole number",
    "serial:/dev/serial0:0": "serial BAUD must be a positive whole number",
}


def hil_errors(spec: str) -> tuple[str | None, str | None]:
    """hil.run's answer to ``spec`` as --telemetry and as --fc: None (accepted) or the UserError's text."""
    answers: list[str | None] = []
    for telemetry, fc in ((spec, GOOD_TELEMETRY), (GOOD_TELEMETRY, spec)):
        try:
            check_args(RunArgs(sim_only=True, backend="autopilot", telemetry=telemetry, fc=fc))
            answers.append(None)
        except UserError as e:
            answers.append(str(e))
    return answers[0], answers[1]


def test_the_docs_list_the_grammar_the_parser_reads():
    forms = [form for form, _ in DOCUMENTED]
    assert sorted(f.partition(":")[0] for f in forms) == sorted(["serial", *NETWORK_KINDS])
    assert set(re.findall(r"[a-z]+:[A-Z]+:[A-Z]+", ENDPOINT_FORMS)) == set(forms)  # what --help says
    for form, example in DOCUMENTED:
        assert example.startswith(form.partition(":")[0] + ":")


@pytest.mark.parametrize("spec", ACCEPTED)
def test_an_endpoint_is_accepted_by_hil_run_and_by_the_bridge(spec, capsys):
    assert hil_errors(spec) == (None, None)
    check_fc("mavlink", spec)  # what firmware_bridge.serve checks --fc with, before it opens anything
    assert systemd.main(["--actuator", "mavlink", "--fc", spec]) in (0, None)
    assert f"--fc {spec}" in capsys.readouterr().out
    endpoint = parse_endpoint(spec)
    if endpoint.kind == "serial":
        device, baud = spec.removeprefix("serial:").rsplit(":", 1)
        assert (endpoint.device, endpoint.baud) == (device, int(baud))
    else:
        assert endpoint.device == spec and endpoint.baud is None and 1 <= (endpoint.port or 0) <= 65535


@pytest.mark.parametrize(("spec", "message"), REFUSED.items(), ids=[repr(s) for s in REFUSED])
def test_a_bad_endpoint_is_refused_alike_in_one_line(spec, message, capsys, monkeypatch):
    with pytest.raises(ValueError) as caught:
        parse_endpoint(spec)
    problem = str(caught.value)
    assert message in problem and "\n" not in problem and repr(spec) in problem
    assert hil_errors(spec) == (f"--telemetry: {problem}", f"--fc: {problem}")
    monkeypatch.setattr(logging, "basicConfig", lambda **kwargs: None)  # serve.main's, for this process's logging
    for main in (serve.main, systemd.main):
        with pytest.raises(SystemExit) as done:
            main(["--actuator", "mavlink", "--fc", spec])
        assert done.value.code == 2
        assert capsys.readouterr().err.splitlines()[-1:] == [f"error: --fc: {problem}"]


def test_the_command_lines_refuse_the_same_line():
    """python -m hil.run and python -m firmware_bridge.serve, each a process as a user runs them."""
    spec = "tcp:127.0.0.1:0"
    hil = subprocess.run(
        [sys.executable, "-m", "hil.run", "--policy", str(POLICY), "--sim-only", "--backend", "autopilot",
         "--telemetry", GOOD_TELEMETRY, "--fc", spec],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    bridge = subprocess.run(
        [sys.executable, "-m", "firmware_bridge.serve", "--actuator", "mavlink", "--fc", spec],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert hil.returncode == bridge.returncode == 2
    refusal = "error: --fc: tcp PORT must be a number within 1..65535, got '0' in 'tcp:127.0.0.1:0'"
    assert hil.stderr.splitlines() == bridge.stderr.splitlines() == [refusal]


def test_the_link_opens_what_the_parser_read():
    pytest.importorskip("pymavlink", reason="a MAVLink link needs the mavlink extra (make installs it)")
    from firmware_bridge.mavlink_link import MavlinkLink

    opened: list[tuple[str, dict]] = []

    class Closed:
        def close(self) -> None:
            pass

    def connect(device: str, **kwargs: object) -> Closed:
        opened.append((device, kwargs))
        return Closed()

    for spec, role in (("serial:/dev/serial0:921600", "companion"), ("tcpin:0.0.0.0:5760", "gcs")):
        MavlinkLink(spec, role, connect=connect).close()  # never started: nothing read or sent
    assert opened == [
        ("/dev/serial0", {"source_system": 1, "source_component": 191, "autoreconnect": True, "baud": 921600}),
        ("tcpin:0.0.0.0:5760", {"source_system": 255, "source_component": 190, "autoreconnect": True}),
    ]
