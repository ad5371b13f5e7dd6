"""The backend registry (nav_env.backends): every decision that depends on the backend asks its descriptor, so no
module outside the registry compares backend names, and a new backend is one registry entry."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import numpy as np
import pytest

from airq_cli import UserError
from hil.args import RunArgs, parse_args
from hil.setup import check_args
from nav_env import backends
from nav_env.backends import (
    AirSimOptions,
    AutopilotOptions,
    EmbeddedOptions,
    MujocoOptions,
    backend_names,
    get_backend,
    make_env,
    simulator,
)
from nav_env.config import ConfigError, load_level
from nav_env.env import NavEnv
from nav_env.vector import NavVectorEnv
from policies.config import TrainConfig
from tests.test_architecture import ALL

REPO = Path(__file__).resolve().parents[2]
PACKAGES = tuple(sorted(ALL))
REGISTRY = REPO / "nav_env" / "backends.py"
POLICY = REPO / "models" / "policy1_int8.onnx"


def _names_a_backend(node: ast.expr, names: set[str]) -> bool:
    if isinstance(node, ast.Constant):
        return node.value in names
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_names_a_backend(e, names) for e in node.elts)
    return False


def backend_comparisons(source: str, names: set[str]) -> list[tuple[int, str]]:
    """Comparisons against a backend's name (``==``, ``!=``, ``in`` a tuple of names) and ``case "name":``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(_names_a_backend(n, names) for n in (node.left, *node.comparators)):
            found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.match_case) and any(
            isinstance(n, ast.MatchValue) and _names_a_backend(n.value, names) for n in ast.walk(node.pattern)
        ):
            found.append((node.pattern.lineno, ast.unparse(node.pattern)))
    return found


def test_no_module_compares_backend_names_outside_the_registry():
    names = set(backend_names())
    assert backend_comparisons("if b == 'mujoco' or b not in ('airsim', 'x'):\n    pass", names)  # the finder finds
    assert backend_comparisons("match b:\n    case 'autopilot':\n        pass", names)
    assert not backend_comparisons("if get_backend(b).in_process:\n    pass", names)
    found = [
        f"{path.relative_to(REPO)}:{line}: {text}"
        for package in PACKAGES
        for path in sorted((REPO / package).rglob("*.py"))
        if path != REGISTRY
        for line, text in backend_comparisons(path.read_text(), names)
    ]
    assert not found, "ask nav_env.backends.get_backend(name) what the backend can do:\n" + "\n".join(found)


def test_lookup_and_options_errors_are_one_line():
    with pytest.raises(ValueError, match=r"^unknown backend 'bullet' \(known: embedded, mujoco, airsim, autopilot\)$"):
        get_backend("bullet")
    with pytest.raises(ConfigError, match="unknown backend 'bullet'"):
        NavEnv(backend="bullet")
    cfg = load_level("easy")
    with pytest.raises(ValueError, match="^the mujoco backend takes MujocoOptions, got AirSimOptions$"):
        make_env(cfg, "mujoco", options=AirSimOptions())
    with pytest.raises(ConfigError, match=r"^the airsim backend does not run in this process \(in-process backends: "
                       r"embedded, mujoco\)$"):  # fmt: skip
        simulator(cfg, 4, "airsim")
    with pytest.raises(ConfigError, match="^the embedded simulator has no vehicle dynamics to configure"):
        simulator(cfg, 1, "embedded", dynamics="x.toml")


def test_descriptors_say_what_each_backend_can_do():
    assert backend_names() == ("embedded", "mujoco", "airsim", "autopilot")
    assert backend_names(in_process=True) == ("embedded", "mujoco")
    assert backend_names(dynamics_config=True) == ("mujoco",)
    assert backend_names(bridge_first=True) == backend_names(flies_real_vehicle=True) == ("autopilot",)
    assert backend_names(own_clock=True) == ("autopilot",)
    assert [get_backend(b).is_default for b in backend_names()] == [True, False, False, False]
    options = {"embedded": EmbeddedOptions, "mujoco": MujocoOptions, "airsim": AirSimOptions,
               "autopilot": AutopilotOptions}  # fmt: skip
    assert {b: get_backend(b).options for b in backend_names()} == options
    # a command line's values reach the options its fields name; what is not given keeps the default
    args = {"airsim_host": "10.0.0.2", "airsim_port": None, "telemetry": "udpin:0.0.0.0:14550"}
    assert get_backend("airsim").options_from(args) == AirSimOptions(host="10.0.0.2")
    assert get_backend("autopilot").options_from(args) == AutopilotOptions(telemetry="udpin:0.0.0.0:14550")
    assert get_backend("mujoco").options_from(args) == MujocoOptions()


def test_every_in_process_backend_runs_the_vector_env_and_the_single_env():
    for name in backend_names(in_process=True):
        venv = NavVectorEnv(3, level="easy", backend=name)
        obs, _ = venv.reset(seed=5)
        obs2, *_ = venv.step(np.zeros(3, dtype=np.int64))
        assert obs2.shape == obs.shape == (3, load_level("easy").obs_dim), name
        env = make_env(load_level("easy"), name)
        assert isinstance(env, NavEnv) and env.backend == name
        first, _ = env.reset(seed=5)
        np.testing.assert_array_equal(first, obs[0])  # the same seed: the same first observation
        venv.close()
        env.close()


def test_a_new_backend_is_one_registry_entry(monkeypatch):
    """A backend registered under a new name is at once a choice of hil.run and a backend to train in, with its
    capabilities: here a second name for the embedded simulator flies the same episodes."""
    twin = dataclasses.replace(get_backend("embedded"), name="twin", help="the embedded simulator again")
    monkeypatch.setitem(backends._REGISTRY, "twin", twin)
    assert "twin" in backend_names(in_process=True)
    cfg = load_level("easy")
    a, b = NavEnv(config=cfg, backend="twin"), NavEnv(config=cfg)
    np.testing.assert_array_equal(a.reset(seed=3)[0], b.reset(seed=3)[0])
    for _ in range(5):
        np.testing.assert_array_equal(a.step(1)[0], b.step(1)[0])
    TrainConfig(backend="twin").validate()
    assert parse_args(["--policy", str(POLICY), "--sim-only", "--backend", "twin"]).backend == "twin"


def test_what_a_backend_cannot_do_is_refused_by_the_commands():
    with pytest.raises(Exception, match=r"backend must be one nav_env trains in \(embedded, mujoco\), got 'airsim'"):
        TrainConfig(backend="airsim").validate()
    latency = RunArgs(policy=[str(POLICY)], sim_only=True, backend="airsim", timing="latency")
    with pytest.raises(UserError, match=r"needs a simulator nav_env runs \(--backend embedded or mujoco\)"):
        check_args(latency)
    paced = RunArgs(policy=[str(POLICY)], sim_only=True, backend="autopilot", rate_hz=10.0, telemetry="tcp:a:1")
    with pytest.raises(UserError, match="--backend autopilot flies in the autopilot's clock"):
        check_args(paced)
    with pytest.raises(UserError, match="^--telemetry applies to --backend autopilot$"):
        check_args(RunArgs(policy=[str(POLICY)], sim_only=True, backend="mujoco", telemetry="tcp:a:1"))
