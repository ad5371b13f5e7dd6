"""quarl.tune_runner on a real local Ray Tune: 2 cells x 2 seeds, one trial failing on purpose, the study record and
the summary saying so (exit 1), a rerun resuming only that trial; --dry-run; and the bad input a user can give
``python -m quarl run``, each one line and exit 2.

The pipeline is a stand-in (tests/quarl/quarl_fake_pipeline.py, given to run_study as a dotted path: the CLI always
runs quarl.pipeline.run_trial); it counts its calls in calls.txt and fails for the names listed in <out>/fail.txt.
One Ray session serves the whole file."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from quarl.config import load_config
from quarl.errors import QuarlError
from quarl.results import TrialResult

# found, not imported: Ray must be imported after RAY_AUTH_MODE is set (quarl.tune_runner.require_ray does both)
if importlib.util.find_spec("ray") is None:
    pytest.skip("Ray is not installed (airq[study])", allow_module_level=True)

REPO = Path(__file__).resolve().parents[2]
FAKE = "quarl_fake_pipeline.run_trial"  # tests/quarl is on sys.path (pytest's rootdir-less import mode)
CONFIG = """
name = "tiny"
seeds = [0, 1]
eval_episodes = 3

[[cell]]
env = "CartPole-v1"
algo = "ppo"
steps = 1000

[[cell]]
env = "Pendulum-v1"
algo = "td3"
steps = 500
"""
NAMES = ["CartPole-v1_ppo_s0", "CartPole-v1_ppo_s1", "Pendulum-v1_td3_s0", "Pendulum-v1_td3_s1"]
FAILING = "CartPole-v1_ppo_s1"


@pytest.fixture(scope="module")
def ray_session():
    from quarl import tune_runner

    session = tune_runner.start_ray(None)
    yield session
    tune_runner.stop_ray(session)


def _config(tmp_path: Path, text: str = CONFIG) -> Path:
    path = tmp_path / "tiny.toml"
    path.write_text(text)
    return path


def _calls(out: Path) -> dict[str, int]:
    return {n: len((out / "trials" / n / "calls.txt").read_text().split()) for n in NAMES}


def test_a_failed_trial_is_reported_then_a_rerun_retries_only_it(ray_session, tmp_path, capfd):
    from quarl.tune_runner import plan_study, run_study

    config = load_config(_config(tmp_path))
    out = tmp_path / "study"
    out.mkdir()
    (out / "fail.txt").write_text(FAILING)

    plan = plan_study(config, out, trial_fn=FAKE)
    assert plan.warnings == [] and [t.state for t in plan.trials] == ["new"] * 4
    text = "\n".join(plan.lines())
    assert all(n in text for n in NAMES) and "4 to run" in text and "core-hours" in text

    study = run_study(config, out, trial_fn=FAKE, config_file=tmp_path / "tiny.toml")
    assert study.exit_code == 1
    record = json.loads((out / "study.json").read_text())
    assert record == study.record and record["status"] == "failed"
    assert record["counts"] == {"trials": 4, "done": 3, "failed": 1, "unfinished": 0}
    rows = {r["name"]: r for r in record["trials"]}
    assert sorted(rows) == NAMES
    error = f"ValueError: planned failure of {FAILING}"  # the message's first line only
    assert record["errors"] == [{"trial": FAILING, "error": error}]
    assert rows[FAILING]["status"] == "failed" and rows[FAILING]["trial_json"] is None
    for name in set(NAMES) - {FAILING}:
        row = rows[name]
        assert row["status"] == "done" and row["error"] is None
        result = TrialResult.load(out / row["trial_json"])
        assert row["fp32_mean"] == result.policy("fp32").mean and result.seed == row["spec"]["seed"]
    # each trial's output went to its own log.txt, a C library's or a child's (fd 1) too; the traceback as well
    for name in NAMES:
        log = (out / rows[name]["log"]).read_text()
        assert f"fake stdout {name}" in log and f"fake stderr {name}" in log and f"fake fd 1 {name}" in log
    assert "Traceback" in (out / rows[FAILING]["log"]).read_text()
    assert (out / rows[FAILING]["tune_dir"]).is_dir() and record["tune"]["trial_fn"] == FAKE
    assert record["config_file"] == str(tmp_path / "tiny.toml") and record["config"]["name"] == "tiny"
    assert record["machine"]["logical_cpus"] == os.cpu_count() and record["sessions"][0]["resumed"] is False
    summary = "\n".join(study.summary_lines())
    assert f"FAILED     {FAILING}" in summary and error in summary and "3 done, 1 failed" in summary
    # one line per trial start and end, with the time and what remains; Tune's own tables and tracebacks are off
    err = capfd.readouterr().err
    starts = [line for line in err.splitlines() if "] start " in line]
    assert sorted(line.split("] start ")[1].split()[0] for line in starts) == NAMES, err
    ends = [line for line in err.splitlines() if " done " in line or " FAILED " in line]
    assert len(ends) == 4 and "0 of 4 remain" in ends[-1], err
    assert any(f"FAILED {FAILING}" in line and error in line for line in ends)
    assert "Traceback" not in err and "Configuration for experiment" not in err, err
    assert _calls(out) == dict.fromkeys(NAMES, 1)

    # the same --out again, the cause fixed: only the failed trial runs, the finished ones are kept
    (out / "fail.txt").unlink()
    assert [t.state for t in plan_study(config, out, trial_fn=FAKE).trials] == ["done", "retry", "done", "done"]
    again = run_study(config, out, trial_fn=FAKE)
    assert again.exit_code == 0 and again.record["status"] == "done"
    assert again.record["counts"] == {"trials": 4, "done": 4, "failed": 0, "unfinished": 0}
    assert again.record["errors"] == [] and all(r["trial_json"] for r in again.record["trials"])
    assert _calls(out) == {n: 2 if n == FAILING else 1 for n in NAMES}
    sessions = again.record["sessions"]
    assert [s["resumed"] for s in sessions] == [False, True] and sessions[1]["ran"] == [FAILING]
    assert "resuming" in capfd.readouterr().err

    # --fresh never touches a recorded study; a different config is not mixed into it
    with pytest.raises(QuarlError, match="already holds a study"):
        run_study(config, out, trial_fn=FAKE, fresh=True)
    other = load_config(_config(tmp_path, CONFIG.replace("seeds = [0, 1]", "seeds = [0, 2]")))
    with pytest.raises(QuarlError, match="holds study 'tiny' of other trials"):
        run_study(other, out, trial_fn=FAKE)
    assert _calls(out) == {n: 2 if n == FAILING else 1 for n in NAMES}


# ------------------------------------------------------------------------------------------------ the CLI
def _env(**extra: str) -> dict[str, str]:
    return os.environ | {"PYTHONPATH": str(REPO), "RAY_DISABLE_USAGE_STATS": "1"} | extra


def _quarl(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "quarl", *args], cwd=REPO, env=env or _env(), capture_output=True, text=True, timeout=120
    )


def _error(args: list[str], env: dict[str, str] | None = None) -> str:
    done = _quarl(args, env)
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr[-2000:]
    return lines[0]


def test_dry_run_prints_the_trials_and_their_cost_without_running_any(tmp_path):
    config = _config(tmp_path, CONFIG.replace("steps = 500", ""))  # the td3 cell on the zoo's budget
    out = tmp_path / "study"
    done = _quarl(["run", str(config), "--dry-run", "--out", str(out)])
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {line.split()[0]: line.split() for line in done.stdout.splitlines() if line.split()[0] in NAMES}
    assert sorted(rows) == NAMES
    assert rows["CartPole-v1_ppo_s0"][1:3] == ["1,000", "1,500"] and rows["CartPole-v1_ppo_s0"][-1] == "new"
    # the zoo's budget resolved (Pendulum TD3: 20,000), QAT 6 widths x 0.25 of it, a cost from the measured rate
    assert rows["Pendulum-v1_td3_s0"][1:3] == ["20,000", "30,000"] and rows["Pendulum-v1_td3_s0"][4] != "?"
    assert "estimate for the 4 trials to run:" in done.stdout and "local, " in done.stdout
    assert not out.exists()  # nothing written, no Ray started


@pytest.mark.parametrize(
    "args, says",
    [
        (["run", "missing.toml"], "missing.toml: no such config file"),
        (["run", "{config}", "--address", "127.0.0.1:1"], "--address 127.0.0.1:1: no Ray head answers there"),
        (["run", "{config}", "--address", "nonsense"], "expected HOST:PORT of a Ray head"),
        (["run", "{config}", "--address", "ray://127.0.0.1:10001"], "Ray Client (ray://) is not supported"),
        (["run", "{config}", "--dry-run", "--address", "127.0.0.1:1"], "no Ray head answers there"),
        (["run", "{config}", "--max-concurrent", "0"], "expected an integer >= 1"),
        (["run", "{config}", "--out", "{file}"], "is a file, expected a directory"),
        (["run", "{bad}"], "unknown key(s) ['sead']"),
        (["run", "{config}", "--fresh", "--out", "{study}"], "--fresh: "),
        (["run", "{config}", "--dry-run", "--fresh", "--out", "{study}"], "already holds a study (study.json)"),
    ],
)
def test_bad_input_is_one_line(tmp_path, args, says):
    paths = {
        "config": _config(tmp_path),
        "file": tmp_path / "a-file",
        "bad": tmp_path / "bad.toml",
        "study": tmp_path / "study",
    }
    paths["file"].write_text("")
    paths["bad"].write_text(CONFIG.replace("seeds", "sead"))
    paths["study"].mkdir()
    (paths["study"] / "study.json").write_text("{}")
    line = _error([a.format(**{k: str(v) for k, v in paths.items()}) for a in args])
    assert says in line, line


def test_without_ray_tune_it_names_the_extra_to_install(tmp_path):
    # a ray that cannot be imported, as on a machine without the [study] extra
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "__init__.py").write_text("raise ImportError('No module named ray')\n")
    env = _env(PYTHONPATH=f"{tmp_path}{os.pathsep}{REPO}")
    for extra in ([], ["--dry-run"]):
        line = _error(["run", str(_config(tmp_path)), "--out", str(tmp_path / "o"), *extra], env)
        assert "Ray Tune is not installed" in line and "airq[study]" in line, line
