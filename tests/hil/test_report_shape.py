"""report.json keeps its shape: the key paths of a short run's report, lockstep and with latency, are those
report_shape.json records (written by hil.run before its report became typed dataclasses), and a policy's
summary reads back from its JSON unchanged (a --resume takes it from the log that way). A real bridge process,
real onnxruntime."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hil.report import PolicySummary

SHAPES = Path(__file__).with_name("report_shape.json")
# what other packages put in the report (the bridge's hello, the host's packages, the resource profile, nav_env's
# outcome and paired-difference figures, a replay's origin, a board's prediction): their keys are theirs to change
OPAQUE = re.compile(
    r"^\.(device|host_versions|profile)$|\.outcomes$|\.success_difference$|\.prediction$|\.replay_from$"
)


def key_paths(value, prefix=""):
    """Every key path of a JSON document: list elements as [], timing_by_policy's policy paths as *."""
    paths = {prefix or "$"}
    if OPAQUE.search(prefix):
        return paths
    if isinstance(value, dict):
        for key, item in value.items():
            name = "*" if prefix == ".timing_by_policy" else key
            paths |= key_paths(item, f"{prefix}.{name}")
    elif isinstance(value, list):
        for item in value:
            paths |= key_paths(item, f"{prefix}[]")
    return paths


@pytest.mark.parametrize(
    ("timing", "extra"), [("lockstep", []), ("latency", ["--timing", "latency", "--latency", "fixed:5"])]
)
def test_report_json_keeps_its_shape(toy_policies, tmp_path, timing, extra):
    small, big = toy_policies
    argv = ["--policy", small, "--policy", big, "--sim-only", "--episodes", "2", "--level", "easy", "--max-steps", "40"]
    r = subprocess.run(
        [sys.executable, "-m", "hil.run", "--quiet", *map(str, argv + extra), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    expected = json.loads(SHAPES.read_text())[timing]
    assert list(report) == expected["top_level"]
    assert sorted(key_paths(report)) == expected["key_paths"]
    for run in report["runs"]:
        assert PolicySummary.from_json(run).to_json() == run
