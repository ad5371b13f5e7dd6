"""hil.run's --timing is resolved once, by check_args, into one typed value every later decision reads: lockstep,
or latency with each policy's delay source; a replay's report is read once however many policies it serves."""

import json
from pathlib import Path

import pytest

from firmware_bridge.protocol import sha256_hex
from hil.loop import DEADLINE_FRACTION, Latency, Lockstep
from hil.run import LatencyTiming, RunArgs, check_args
from nav_env.latency import QUANTILE_LEVELS


@pytest.fixture(scope="module")
def policies(toy_policies):
    return tuple(str(p) for p in toy_policies)


def test_lockstep_paces_the_wall_clock(policies):
    setup = check_args(RunArgs(policy=list(policies), sim_only=True, level="easy", rate_hz=50.0))
    assert setup.timing == Lockstep() and setup.timing.describe() == {"mode": "lockstep"}
    assert setup.pace_hz == 50.0 and setup.deadline_s == pytest.approx(DEADLINE_FRACTION / 50.0)


def test_latency_gives_each_policy_its_delay_and_leaves_the_wall_clock_free(policies):
    args = RunArgs(
        policy=list(policies), sim_only=True, level="easy", timing="latency", latency="fixed:5", rate_hz=20.0
    )
    setup = check_args(args)
    assert isinstance(setup.timing, LatencyTiming)
    assert setup.pace_hz is None  # --rate-hz is the simulated control period
    assert setup.deadline_s == args.timeout_s  # a late action flies late; only a lost one is a miss
    assert [(p.source.spec, p.period_s, p.device_rate) for p in setup.timing.policies] == [("fixed:5", 0.05, False)] * 2
    assert setup.timing.describe() == {"mode": "latency", "source": "fixed:5", "device_rate": False, "rate_hz": 20.0}
    assert setup.timing.policies[0].describe() == {"mode": "latency", "source": "fixed:5", "period_s": 0.05}
    with_deadline = check_args(RunArgs(**vars(args) | {"deadline_ms": 30.0}))
    assert with_deadline.deadline_s == pytest.approx(0.03)


def test_a_replay_report_is_read_once(policies, tmp_path, monkeypatch):
    report = tmp_path / "pi.json"
    runs = [
        {"policy": f"pi/{Path(p).name}", "sha256": sha256_hex(Path(p).read_bytes()), "round_trip_us": {"p50": ms * 1e3}}
        | {"round_trip_quantiles_us": [ms * 1e3] * len(QUANTILE_LEVELS)}
        for p, ms in zip(policies, (2.0, 7.0))
    ]
    report.write_text(json.dumps({"mode": "device pi:5555", "device": None, "runs": runs}))
    reads = []
    read_text = Path.read_text

    def counting(self, *args, **kwargs):
        if self == report:
            reads.append(self)
        return read_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", counting)
    setup = check_args(
        RunArgs(policy=list(policies), sim_only=True, level="easy", timing="latency", latency=f"replay:{report}")
    )
    assert len(reads) == 1
    assert isinstance(setup.timing, LatencyTiming)
    chosen: list[Latency] = list(setup.timing.policies)
    assert [p.source.replay_from["round_trip_p50_us"] for p in chosen] == [2000.0, 7000.0]  # each its own model's
    assert all(p.source.replay_from["same_model"] for p in chosen)
