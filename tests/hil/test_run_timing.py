"""hil.run's --timing is resolved once, by check_args, into each policy's timing, which every later decision reads:
lockstep, or latency with the policy's delay source; a replay's report is read once however many policies it serves."""

import json
from pathlib import Path

import pytest

from firmware_bridge.protocol import sha256_hex
from hil.args import RunArgs
from hil.loop import DEADLINE_FRACTION, LOCKSTEP
from hil.setup import check_args
from nav_env.latency import QUANTILE_LEVELS


@pytest.fixture(scope="module")
def policies(toy_policies):
    return tuple(str(p) for p in toy_policies)


def test_lockstep_paces_the_wall_clock(policies):
    setup = check_args(RunArgs(policy=list(policies), sim_only=True, level="easy", rate_hz=50.0))
    assert setup.timings == (LOCKSTEP, LOCKSTEP) and LOCKSTEP.describe() == {"mode": "lockstep"}
    assert setup.describe_timing() == {"mode": "lockstep"}
    assert setup.pace_hz == 50.0 and setup.deadline_s == pytest.approx(DEADLINE_FRACTION / 50.0)


def test_latency_gives_each_policy_its_delay_and_leaves_the_wall_clock_free(policies):
    args = RunArgs(
        policy=list(policies), sim_only=True, level="easy", timing="latency", latency="fixed:5", rate_hz=20.0
    )
    setup = check_args(args)
    assert setup.pace_hz is None  # --rate-hz is the simulated control period
    assert setup.deadline_s == args.timeout_s  # a late action flies late; only a lost one is a miss
    assert [(t.latency.spec, t.period_s, t.device_rate) for t in setup.timings if t.latency] == [
        ("fixed:5", 0.05, False)
    ] * 2
    assert setup.describe_timing() == {"mode": "latency", "source": "fixed:5", "device_rate": False, "rate_hz": 20.0}
    assert setup.timings[0].describe() == {"mode": "latency", "source": "fixed:5", "period_s": 0.05}
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
    chosen = [t.latency for t in setup.timings if t.latency]
    assert [s.replay_from["round_trip_p50_us"] for s in chosen] == [2000.0, 7000.0]  # each its own model's
    assert len(chosen) == 2 and all(s.replay_from["same_model"] for s in chosen)
