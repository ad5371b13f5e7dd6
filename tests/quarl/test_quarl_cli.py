"""python -m quarl run with a bad study config: refused when the config loads (before Ray, before any trial), in
one stderr line naming the key or the cell, exit 2 (airq_cli's contract). The same checks in-process through
quarl.config.parse_config, for the values a TOML file can hold."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from quarl.config import parse_config
from quarl.errors import QuarlError

REPO = Path(__file__).resolve().parents[2]
CELL = '[[cell]]\nenv = "{env}"\nalgo = "{algo}"\nsteps = 1000\n'


def _config(tmp_path: Path, settings: str = "", env: str = "CartPole-v1", algo: str = "ppo") -> Path:
    path = tmp_path / "study.toml"
    path.write_text(f'name = "cli"\nseeds = [0]\n{settings}\n' + CELL.format(env=env, algo=algo))
    return path


def _run(config: Path, out: Path) -> subprocess.CompletedProcess:
    env = os.environ | {"PYTHONPATH": str(REPO), "RAY_DISABLE_USAGE_STATS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "quarl", "run", str(config), "--dry-run", "--out", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _one_line_error(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 2, (done.returncode, done.stderr[-3000:])
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in done.stderr, done.stderr[-3000:]
    return lines[0]


@pytest.mark.parametrize(
    ("env", "algo", "says"),
    [
        ("Foo-v0", "ppo", "cell 1: no hyperparameters for Foo-v0 with ppo"),
        ("Pendulum-v1", "sac", "cell 1: no hyperparameters for Pendulum-v1 with sac"),  # a known env, not this cell
    ],
)
def test_a_cell_without_zoo_hyperparameters_fails_at_load_time(tmp_path, env, algo, says):
    config, out = _config(tmp_path, env=env, algo=algo), tmp_path / "out"
    line = _one_line_error(_run(config, out))
    assert str(config) in line and says in line and "known: CartPole-v1 (a2c, dqn, ppo)" in line, line
    assert not out.exists()  # nothing planned, nothing written


@pytest.mark.parametrize(
    ("settings", "says"),
    [
        ('eval_episodes = "ten"', "'eval_episodes' must be an integer, got 'ten'"),
        ('qat_delay_fraction = "0.3"', "'qat_delay_fraction' must be a number, got '0.3'"),
    ],
)
def test_a_value_of_the_wrong_type_is_one_line_naming_its_key(tmp_path, settings, says):
    config, out = _config(tmp_path, settings), tmp_path / "out"
    line = _one_line_error(_run(config, out))
    assert str(config) in line and says in line, line
    assert not out.exists()


BASE = {"name": "x", "seeds": [0], "cell": [{"env": "CartPole-v1", "algo": "ppo"}]}


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"eval_episodes": 10.5}, "'eval_episodes' must be an integer, got 10.5"),
        ({"eval_episodes": True}, "'eval_episodes' must be an integer, got True"),
        ({"threads": "2"}, "'threads' must be an integer"),
        ({"qat_steps_fraction": [0.25]}, "'qat_steps_fraction' must be a number"),
        ({"rounding": 1}, "'rounding' must be a string, got 1"),
        ({"quantize_failed_baselines": "no"}, "'quantize_failed_baselines' must be true or false, got 'no'"),
        ({"quantize_failed_baselines": 0}, "'quantize_failed_baselines' must be true or false, got 0"),
        ({"ptq_bits": 8}, "'ptq_bits' must be a list of integers, got 8"),
        ({"qat_bits": [4, "2"]}, "'qat_bits' must be a list of integers"),
        ({"ptq_targets": "int8"}, "'ptq_targets' must be a list of strings, got 'int8'"),
        ({"cell": [{"env": "CartPole-v1", "algo": "ppo", "steps": "1e5"}]}, "cell 1: 'steps' must be an integer"),
        ({"cell": [3]}, "cell 1: a cell is a [[cell]] table"),
        ({"cell": [{"env": "MinAtar/Pong-v1", "algo": "dqn"}]}, "no hyperparameters for MinAtar/Pong-v1 with dqn"),
    ],
)
def test_parse_config_names_the_bad_key(change, says):
    with pytest.raises(QuarlError) as e:
        parse_config(BASE | change, "study.toml")
    message = str(e.value)
    assert message.startswith("study.toml: ") and says in message and "\n" not in message, message


def test_parse_config_accepts_every_known_kind_of_cell():
    cells = [
        {"env": "CartPole-v1", "algo": "DQN"},  # algorithms in any case
        {"env": "PongNoFrameskip-v4", "algo": "ppo"},  # any Atari game
        {"env": "MinAtar/Breakout-v1", "algo": "a2c"},
        {"env": "Pendulum-v1", "algo": "td3", "steps": 1500},
    ]
    config = parse_config(
        BASE | {"cell": cells, "qat_delay_fraction": 0, "ptq_bits": [8, 4], "quantize_failed_baselines": False}
    )
    assert [(t.env_id, t.algo, t.steps) for t in config.trials()] == [
        ("CartPole-v1", "dqn", None),
        ("PongNoFrameskip-v4", "ppo", None),
        ("MinAtar/Breakout-v1", "a2c", None),
        ("Pendulum-v1", "td3", 1500),
    ]
    assert config.trial.ptq_bits == (8, 4) and config.trial.qat_delay_fraction == 0
    assert config.trial.quantize_failed_baselines is False and all(
        not t.quantize_failed_baselines for t in config.trials()
    )


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ([], "no study.json (not a `quarl run` output directory)"),
        (["--targets", "int4"], "--targets must be among fp16, int8, int8-w7, int8-dynamic, got int4"),
    ],
)
def test_requantize_bad_input_is_one_line(tmp_path, args, says):
    env = os.environ | {"PYTHONPATH": str(REPO)}
    (tmp_path / "study").mkdir()
    if args:
        (tmp_path / "study" / "study.json").write_text('{"trials": []}')
    done = subprocess.run(
        [sys.executable, "-m", "quarl", "requantize", str(tmp_path / "study"), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert says in _one_line_error(done)
