"""hil.bench's closed-loop rate against its two baselines: the in-process loop and the bare echo loop."""

import argparse

import pytest

from hil.bench import print_table, summarize_rows


def rep(k: int, hz: float, local: float, echo: float | None) -> dict:
    row = {
        "repeat": k,
        "actuation_hz": hz,
        "in_process_hz": local,
        "in_process_inference_p50_us": 40.0,
        "steps": 300,
        "deadline_misses": 0,
        "overhead_p50_us": 120.0 + k,
        "success_rate": 0.5,
    }
    if echo is not None:
        row.update(echo_hz=echo, echo_round_trip_p50_us=90.0 + k, echo_deadline_misses=0)
    return row


def test_rates_and_ratios_are_medians_of_the_repeats(capsys):
    reps = [rep(0, 2000.0, 5000.0, 2500.0), rep(1, 1800.0, 6000.0, 3000.0), rep(2, 2200.0, 5500.0, 2000.0)]
    got = {"rtt": [300_000, 310_000], "infer": [40_000, 41_000], "echo": [90_000, 95_000]}
    row = summarize_rows("models/p.onnx", 0.0, reps, got)
    assert row["actuation_hz"] == 2000.0 and row["in_process_hz"] == 5500.0 and row["echo_hz"] == 2500.0
    assert row["closed_loop_over_in_process"] == pytest.approx(2000.0 / 5500.0)
    assert row["closed_loop_over_echo"] == pytest.approx(2000.0 / 2500.0)
    print_table([row], argparse.Namespace(level="default", episodes=3, repeats=3), [0.0])
    out = capsys.readouterr().out
    header, line = out.splitlines()[1:3]
    assert "echo Hz" in header and "2,500" in line and "0.80" in line and "0.36" in line


def test_without_echo_the_echo_columns_read_missing(capsys):
    from airq_cli import MISSING

    reps = [rep(0, 2000.0, 5000.0, None)]
    row = summarize_rows("p.onnx", 0.0, reps, {"rtt": [300_000], "infer": [40_000], "echo": []})
    assert "echo_hz" not in row and "closed_loop_over_echo" not in row
    print_table([row], argparse.Namespace(level="easy", episodes=1, repeats=1), [0.0])
    assert MISSING in capsys.readouterr().out.splitlines()[2]
