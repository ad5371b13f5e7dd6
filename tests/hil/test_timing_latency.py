"""hil.run --timing latency: the world keeps flying while the device computes (a real bridge process,
real onnxruntime), with measured, fixed and replayed delays; bad sources are one-line errors."""

import json
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats

from firmware_bridge.toy_policy import build_mlp_policy
from nav_env.latency import QUANTILE_LEVELS, LatencySource, parse_latency, round_trip_quantiles_us


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    path = tmp_path_factory.mktemp("policies") / "toy.onnx"
    path.write_bytes(build_mlp_policy(1032, 32, seed=1))
    return path


def hil_run(*args, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "hil.run", "--quiet", *map(str, args)], capture_output=True, text=True, timeout=timeout
    )


def test_replay_resamples_the_recorded_distribution():
    rng = np.random.default_rng(0)
    recorded_ns = (rng.lognormal(np.log(400e3), 0.5, 20_000)).astype(np.int64)  # a long-tailed round trip
    source = LatencySource("replay", replay_path="r.json", quantiles_us=round_trip_quantiles_us(list(recorded_ns)))
    source.start_episode(7)
    delays = [source.delay_s(0) for _ in range(5000)]
    drawn = np.array(delays) * 1e9
    assert stats.ks_2samp(drawn, recorded_ns).pvalue > 0.01  # the same distribution
    for q in (0.5, 0.9, 0.99):
        assert np.quantile(drawn, q) == pytest.approx(np.quantile(recorded_ns, q), rel=0.05)
    source.start_episode(7)
    assert [source.delay_s(0) for _ in range(5000)] == delays  # same episode seed, same delays


def test_latency_changes_the_flight_and_lockstep_stays_as_before(policy, tmp_path):
    common = ["--policy", policy, "--sim-only", "--episodes", "3", "--level", "easy", "--max-steps", "60"]
    runs = {}
    for name, extra in {
        "lockstep": [],
        "measured": ["--timing", "latency"],
        "fixed": ["--timing", "latency", "--latency", "fixed:250"],
    }.items():
        r = hil_run(*common, *extra, "--out", tmp_path / name)
        assert r.returncode == 0, r.stderr
        runs[name] = json.loads((tmp_path / name / "report.json").read_text())
    assert runs["lockstep"]["timing"] == {"mode": "lockstep"}
    assert runs["fixed"]["timing"]["source"] == "fixed:250"
    by_policy = runs["fixed"]["timing_by_policy"][str(policy)]
    assert by_policy["source"] == "fixed:250" and by_policy["period_s"] is None
    quantiles = runs["measured"]["runs"][0]["round_trip_quantiles_us"]
    assert len(quantiles) == len(QUANTILE_LEVELS) and quantiles == sorted(quantiles) and quantiles[0] > 0

    def path(name):
        return [e["path_length"] for e in runs[name]["runs"][0]["episodes"]]

    # a quarter second of delay on every act flies other paths than lockstep on the same seeded episodes
    assert path("fixed") != path("lockstep")
    # replaying the measured run's round trips: named in the report, the same model
    r = hil_run(
        *common,
        "--timing",
        "latency",
        "--latency",
        f"replay:{tmp_path / 'measured' / 'report.json'}",
        "--out",
        tmp_path / "replay",
    )
    assert r.returncode == 0, r.stderr
    replay = json.loads((tmp_path / "replay" / "report.json").read_text())["timing_by_policy"][str(policy)]
    assert replay["replay_from"]["same_model"] and replay["replay_from"]["policy"] == str(policy)


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--timing", "latency", "--latency", "fixed:-5"], "must be finite and >= 0"),
        (["--timing", "latency", "--latency", "fixed:nan"], "must be finite and >= 0"),
        (["--timing", "latency", "--latency", "fixed:abc"], "needs a number of milliseconds"),
        (["--timing", "latency", "--latency", "replay:/nonexistent/report.json"], "cannot read"),
        (
            ["--timing", "latency", "--latency", "sometimes"],
            "must be measured, fixed:MS, replay:REPORT.json or profile",
        ),
        (["--timing", "latency", "--latency", "profile:nope"], "unknown device profile 'nope'"),
        (["--timing", "latency", "--latency", "profile:"], "needs a board"),
        (["--timing", "latency", "--latency", "profile:native"], "has no prediction for"),
        (["--latency", "fixed:10"], "apply to --timing latency"),
        (["--timing", "latency", "--device-rate", "--rate-hz", "10"], "two different periods"),
    ],
)
def test_bad_latency_sources_are_one_line_errors(policy, tmp_path, extra, needle):
    r = hil_run("--policy", policy, "--sim-only", "--episodes", "1", *extra, "--out", tmp_path / "o")
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.returncode == 2 and len(lines) == 1 and needle in lines[0], r.stderr
    assert not (tmp_path / "o" / "run.jsonl").exists()


def test_a_foreign_json_is_not_a_replay_file(tmp_path):
    foreign = tmp_path / "foreign.json"
    foreign.write_text(json.dumps({"runs": [{"policy": "x", "round_trip_us": {"p50": 3}}]}))
    with pytest.raises(Exception, match="no recorded round trips|with recorded round trips"):
        parse_latency(f"replay:{foreign}")
    foreign.write_text("not json")
    with pytest.raises(Exception, match="is not JSON"):
        parse_latency(f"replay:{foreign}")


def test_a_board_profile_flies_each_model_at_its_predicted_time(policy, tmp_path):
    """profile:pi3b: the model's roofline time on a Pi 3B is its delay, recorded as a prediction; the flight is
    the one a fixed delay of that time gives, episode by episode."""
    from device_emulation.profiles import get_profile
    from device_emulation.roofline import model_cost, predict_device

    predicted_ms = predict_device(model_cost(policy), get_profile("pi3b")).predicted_s * 1e3
    common = ["--policy", policy, "--sim-only", "--episodes", "3", "--level", "easy", "--max-steps", "60"]
    common += ["--timing", "latency"]
    r = hil_run(*common, "--latency", "profile:pi3b", "--out", tmp_path / "board")
    assert r.returncode == 0, r.stderr
    board = json.loads((tmp_path / "board" / "report.json").read_text())
    used = board["timing_by_policy"][str(policy)]
    assert board["timing"]["source"] == used["source"] == "profile:pi3b"
    assert used["predicted_delay_ms"] == pytest.approx(predicted_ms)
    assert used["prediction"]["board"] == "pi3b" and "not measured" in used["prediction"]["label"]
    r = hil_run(*common, "--latency", f"fixed:{predicted_ms!r}", "--out", tmp_path / "fixed")
    assert r.returncode == 0, r.stderr
    fixed = json.loads((tmp_path / "fixed" / "report.json").read_text())

    def flown(report):
        return [(e["outcome"], e["steps"], e["path_length"], e["flight_time"]) for e in report["runs"][0]["episodes"]]

    assert flown(board) == flown(fixed)
