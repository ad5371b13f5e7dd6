"""hil.run on the AirSim backend: the whole loop (bridge process, real client library, fake
simulator) with a map's obstacles (--airsim-scene) and lockstep stepping."""

import json
import subprocess
import sys

import pytest

from firmware_bridge.toy_policy import build_mlp_policy
from nav_env import load_level


@pytest.mark.skipif(
    __import__("importlib").util.find_spec("cosysairsim") is None, reason="cosysairsim not installed (airsim extra)"
)
def test_hil_run_on_airsim_with_scene_and_lockstep(serve, tmp_path):
    scene = {"cylinders": [[8.0, 8.0, 1.0], [22.0, 20.0, 1.5]], "boxes": [[12.0, 3.0, 14.0, 6.0]]}
    (tmp_path / "map.json").write_text(json.dumps(scene))
    server = serve(load_level("default"), scene)
    policy = tmp_path / "p.onnx"
    policy.write_bytes(build_mlp_policy(1032, 16))
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "hil.run",
            "--quiet",
            "--policy",
            str(policy),
            "--sim-only",
            "--backend",
            "airsim",
            "--airsim-host",
            server.host,
            "--airsim-port",
            str(server.port),
            "--airsim-scene",
            str(tmp_path / "map.json"),
            "--airsim-lockstep",
            "--episodes",
            "2",
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["backend"] == "airsim" and report["args"]["airsim_lockstep"] is True
    run = report["runs"][0]
    assert run["outcomes"]["episodes"] == 2 and run["steps"] > 0


def test_bad_scene_file_is_a_one_line_error(tmp_path):
    bad = tmp_path / "map.json"
    bad.write_text("{not json")
    policy = tmp_path / "p.onnx"
    policy.write_bytes(build_mlp_policy(1032, 16))
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "hil.run",
            "--quiet",
            "--policy",
            str(policy),
            "--sim-only",
            "--backend",
            "airsim",
            "--airsim-port",
            "1",
            "--airsim-scene",
            str(bad),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "cannot read scene" in r.stderr, r.stderr
