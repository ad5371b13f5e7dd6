"""Statistics for success rates: Wilson intervals and paired comparisons of two policies.

Both policies fly the same seeded episodes, so they are compared as matched pairs: the p-value is
McNemar's exact test (a binomial test on the discordant episodes, scipy.stats.binomtest) and the
interval for the difference of success rates is Newcombe's hybrid score interval for paired
proportions (Newcombe 1998, Stat Med 17:2635, method 10), built from scipy's Wilson intervals of
the two marginal rates. Unlike a Wald interval it stays inside [-1, 1] and is not zero-width when
no episode differs.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

Z95 = 1.959963984540054
CONFIDENCE = 0.95


def wilson_interval(successes: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (as fractions); (0, 1) when n is 0."""
    if n <= 0:
        return (0.0, 1.0)
    # deferred: scipy, imported when first needed: scipy.stats takes ~1.5 s to import
    from scipy.stats import binomtest

    ci = binomtest(int(successes), int(n)).proportion_ci(confidence_level=confidence, method="wilson")
    return (max(0.0, float(ci.low)), min(1.0, float(ci.high)))


def mcnemar_exact(only_first: int, only_second: int) -> float:
    """Exact two-sided McNemar p-value from the discordant counts (1.0 when there are none)."""
    discordant = only_first + only_second
    if discordant == 0:
        return 1.0
    # deferred: scipy: over a second to import
    from scipy.stats import binomtest

    return float(binomtest(only_first, discordant, 0.5).pvalue)


def newcombe_paired_interval(
    both: int, only_first: int, only_second: int, neither: int, confidence: float = CONFIDENCE
) -> tuple[float, float]:
    """Newcombe's method-10 interval for p_second - p_first over matched pairs.

    The cells are counts of pairs: success in both, only in the first, only in the second, in
    neither. Each marginal rate gets its Wilson interval; the two are combined "square and add"
    with a correction for their correlation (phi), clipped as Newcombe defines it.
    """
    n = both + only_first + only_second + neither
    if n <= 0:
        return (-1.0, 1.0)
    first, second = both + only_first, both + only_second
    p1, p2 = first / n, second / n
    l1, u1 = wilson_interval(first, n, confidence)
    l2, u2 = wilson_interval(second, n, confidence)
    # phi: the correlation of the two classifications, with Newcombe's continuity adjustment of the
    # cross product (zero when any margin is empty).
    margins = first * (n - first) * second * (n - second)
    phi = 0.0
    if margins > 0:
        cross = both * neither - only_first * only_second
        adjusted = cross - n / 2 if cross > n / 2 else (cross if cross < 0 else 0.0)
        phi = adjusted / math.sqrt(margins)
    diff = p2 - p1
    low = diff - math.sqrt(max(0.0, (p2 - l2) ** 2 - 2 * phi * (p2 - l2) * (u1 - p1) + (u1 - p1) ** 2))
    high = diff + math.sqrt(max(0.0, (u2 - p2) ** 2 - 2 * phi * (u2 - p2) * (p1 - l1) + (p1 - l1) ** 2))
    return (max(-1.0, low), min(1.0, high))


def paired_difference(a: npt.ArrayLike, b: npt.ArrayLike, confidence: float = CONFIDENCE) -> dict[str, float]:
    """Success-rate difference b - a over the same episodes: Newcombe's paired interval and
    McNemar's exact p. `only_first` counts episodes only `a` solved, `only_second` only `b`."""
    a, b = np.asarray(a, bool), np.asarray(b, bool)
    if a.shape != b.shape:
        raise ValueError(f"paired results need the same episodes, got {a.shape} and {b.shape}")
    n = len(a)
    both = int(np.sum(a & b))
    only_a = int(np.sum(a & ~b))
    only_b = int(np.sum(b & ~a))
    neither = n - both - only_a - only_b
    low, high = newcombe_paired_interval(both, only_a, only_b, neither, confidence)
    return {
        "n": n,
        "diff": (only_b - only_a) / n if n else 0.0,
        "low": low,
        "high": high,
        "only_first": only_a,
        "only_second": only_b,
        "mcnemar_p": mcnemar_exact(only_a, only_b),
    }
