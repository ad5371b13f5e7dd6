"""Paired statistics at the sizes the study uses (thousands of episodes) against independent values."""

from fractions import Fraction
from math import comb

import numpy as np
import pytest

from nav_env.stats import mcnemar_exact, newcombe_paired_interval, paired_difference, wilson_interval


def binomial_lower_tail(n: int, k: int) -> int:
    """sum(comb(n, i) for i in 0..k), exactly, each term from the one before (comb(n, i + 1) = comb(n, i) *
    (n - i) / (i + 1), an exact integer division): one multiplication per term instead of a comb() each,
    which took seconds at n = 10,000."""
    term, total = 1, 0
    for i in range(k + 1):
        total += term
        term = term * (n - i) // (i + 1)
    return total


def exact_mcnemar_by_integers(only_first: int, only_second: int) -> float:
    """The two-sided exact binomial p in integer arithmetic: independent of scipy and never overflows."""
    n, k = only_first + only_second, min(only_first, only_second)
    return float(min(Fraction(1), 2 * Fraction(binomial_lower_tail(n, k), 2**n)))


def test_binomial_lower_tail_is_the_sum_of_combs():
    for n in (0, 1, 2, 7, 60, 301):
        for k in range(n + 1):
            assert binomial_lower_tail(n, k) == sum(comb(n, i) for i in range(k + 1)), (n, k)
    assert binomial_lower_tail(1100, 500) == sum(comb(1100, i) for i in range(501))


@pytest.mark.parametrize("only_first,only_second", [(0, 6), (600, 500), (700, 324), (1500, 1500), (4980, 5020)])
def test_mcnemar_exact_holds_past_1024_discordant_pairs(only_first, only_second):
    # The old sum(comb)/2.0**n raised OverflowError from 1024 discordant pairs on.
    assert mcnemar_exact(only_first, only_second) == pytest.approx(
        exact_mcnemar_by_integers(only_first, only_second), rel=1e-9, abs=1e-300
    )


def test_mcnemar_is_symmetric_and_one_without_discordant_pairs():
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(120, 80) == pytest.approx(mcnemar_exact(80, 120))


@pytest.mark.parametrize(
    "cells,expected",
    [
        # Newcombe (1998), Stat Med 17:2635, Table II (e, f, g, h) -> interval for p1 - p2 = (f - g) / n.
        ((36, 12, 2, 0), (0.0569, 0.3404)),
        ((18, 12, 2, 18), (0.0562, 0.3290)),
        ((53, 0, 0, 1), (-0.0729, 0.0729)),
    ],
)
def test_newcombe_interval_matches_the_published_examples(cells, expected):
    both, only_first, only_second, neither = cells
    # nav_env reports second - first, the negative of Newcombe's p1 - p2.
    low, high = newcombe_paired_interval(both, only_first, only_second, neither)
    assert (-high, -low) == pytest.approx(expected, abs=1e-4)


def test_paired_difference_at_ten_thousand_episodes():
    rng = np.random.default_rng(7)
    a = rng.random(10_000) < 0.80
    b = a.copy()
    flip = rng.random(10_000) < 0.12  # ~1200 discordant pairs: past the old overflow
    b[flip] = ~b[flip]
    d = paired_difference(a, b)
    assert d["n"] == 10_000 and d["only_first"] + d["only_second"] == int(flip.sum()) > 1024
    assert d["low"] < d["diff"] < d["high"] and d["high"] - d["low"] < 0.03
    assert d["only_first"] == int(np.sum(a & ~b)) and d["only_second"] == int(np.sum(b & ~a))
    assert d["mcnemar_p"] == pytest.approx(exact_mcnemar_by_integers(d["only_first"], d["only_second"]), rel=1e-9)


def test_no_discordant_pairs_still_gives_an_interval():
    # Identical outcomes on 10,000 episodes: the Wald interval was +0.0..+0.0; Newcombe's has width.
    a = np.zeros(10_000, bool)
    a[:8_000] = True
    d = paired_difference(a, a.copy())
    assert d["diff"] == 0.0 and d["low"] < 0.0 < d["high"] and d["mcnemar_p"] == 1.0


def test_interval_stays_inside_minus_one_to_one():
    # 99 of 100 solved only by the second: the Wald interval printed "+99.0% (+97.0% to +101.0%)".
    a = np.zeros(100, bool)
    b = np.ones(100, bool)
    b[0] = False
    d = paired_difference(a, b)
    assert d["diff"] == pytest.approx(0.99) and -1.0 <= d["low"] < 0.99 < d["high"] <= 1.0


def test_newcombe_coverage_near_nominal_at_ten_thousand():
    # Seeded simulation: 300 replicates of 10,000 correlated pairs; a 95% interval covers the true difference
    # in about 95% of them (binomial spread at 300 replicates is about +-2.5 points).
    rng = np.random.default_rng(11)
    probs = np.array([0.70, 0.06, 0.09, 0.15])  # both, only first, only second, neither
    true_diff = probs[2] - probs[1]
    covered = 0
    for _ in range(300):
        both, only_first, only_second, neither = rng.multinomial(10_000, probs)
        low, high = newcombe_paired_interval(both, only_first, only_second, neither)
        covered += low <= true_diff <= high
    assert 0.91 <= covered / 300 <= 0.99


def test_wilson_interval_against_hand_values():
    lo, hi = wilson_interval(50, 100)
    assert abs(lo - 0.4038) < 1e-4 and abs(hi - 0.5962) < 1e-4
    assert wilson_interval(0, 10)[0] == 0.0 and wilson_interval(10, 10)[1] == 1.0
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_paired_difference_refuses_unpaired_inputs():
    with pytest.raises(ValueError, match="same episodes"):
        paired_difference(np.ones(3, bool), np.ones(4, bool))
