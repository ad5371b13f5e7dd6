"""User errors: one line on stderr, exit code 2, no traceback."""

from __future__ import annotations

import json
import shutil

import pytest
from policy_helpers import run_module

from policies.errors import run_cli


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:"), err
    assert "\n" not in err and "Traceback" not in err, err
    return err


@pytest.mark.parametrize(
    "args,match",
    [
        (["--policy", "policy9"], "unknown policy preset 'policy9'"),
        (["--algo", "sac"], "unknown algorithm 'sac'"),
        (["--level", "nope"], "unknown level 'nope'"),
        (["--config", "/nonexistent/x.toml"], "config file not found"),
        (["--steps", "0"], "steps must be >= 1"),
    ],
)
def test_train_rejects(tmp_path, capsys, args, match):
    from policies.train import main

    assert run_cli(main, [*args, "--out", str(tmp_path / "r")]) == 2
    assert match in one_line_error(capsys)


def test_train_config_unknown_key(tmp_path, capsys):
    from policies.train import main

    cfg = tmp_path / "x.toml"
    cfg.write_text('policy = "policy1"\nlearning_rat = 0.1\n')
    assert run_cli(main, ["--config", str(cfg), "--out", str(tmp_path / "r")]) == 2
    assert "unknown config key 'learning_rat'" in one_line_error(capsys)


def test_evaluate_missing_and_corrupt_inputs(tmp_path, capsys, tiny_run):
    from policies.evaluate import main

    assert run_cli(main, [str(tmp_path / "missing.onnx")]) == 2
    assert "policy not found" in one_line_error(capsys)

    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"definitely not protobuf" * 10)
    assert run_cli(main, [str(junk)]) == 2
    assert "not a loadable ONNX model" in one_line_error(capsys)

    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    assert run_cli(main, [str(empty_dir)]) == 2
    assert "not a run directory" in one_line_error(capsys)

    broken = tmp_path / "broken"
    shutil.copytree(tiny_run, broken)
    for name in ("best_model.zip", "final_model.zip"):
        (broken / name).write_bytes(b"PK\x03\x04 truncated")
    assert run_cli(main, [str(broken)]) == 2
    assert "corrupt checkpoint" in one_line_error(capsys)


def test_evaluate_observation_size_mismatch(tmp_path, capsys, tiny_onnx):
    """A model that records no observation (a foreign file) and does not fit the level's is a one-line error; an
    exported model flies the camera it records whatever the level's (docs/dynamics.md)."""
    from firmware_bridge.toy_policy import build_mlp_policy
    from policies.evaluate import main

    level = tmp_path / "small_camera.toml"
    level.write_text('level = "small_camera"\n[camera]\nwidth = 16\nheight = 16\n')
    foreign = tmp_path / "foreign.onnx"
    foreign.write_bytes(build_mlp_policy(1032, 16))
    assert run_cli(main, [str(foreign), "--level", str(level), "--episodes", "2", "--out", str(tmp_path)]) == 2
    err = one_line_error(capsys)
    assert "1032" in err and "264" in err
    out = tmp_path / "own"
    assert run_cli(main, [str(tiny_onnx), "--level", str(level), "--episodes", "2", "--out", str(out)]) == 0
    (report,) = [json.loads(p.read_text()) for p in out.glob("*.json")]
    assert report["policies"][tiny_onnx.name]["obs_dim"] == 1032


def test_export_missing_run_dir(tmp_path, capsys):
    from policies.export import main

    assert run_cli(main, [str(tmp_path / "nope"), "-o", str(tmp_path / "x.onnx")]) == 2
    assert "run directory not found" in one_line_error(capsys)


def test_cli_processes_exit_2_without_traceback(tmp_path):
    """The real entry points, as subprocesses: exit status 2 and a single stderr line."""
    for module, args in (
        ("policies.evaluate", [str(tmp_path / "missing.onnx")]),
        ("policies.train", ["--policy", "policy9", "--out", str(tmp_path / "r")]),
    ):
        r = run_module(module, *args)
        assert r.returncode == 2, (module, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error:"), r.stderr


def test_evaluate_unknown_baseline(capsys):
    from policies.evaluate import main

    assert run_cli(main, ["baseline:teleport"]) == 2
    assert "unknown baseline 'teleport'" in one_line_error(capsys)
