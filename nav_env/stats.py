"""Statistics for success rates: Wilson intervals and paired comparisons of two policies."""
from __future__ import annotations

import math

import numpy as np

Z95 = 1.959963984540054


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (as fractions)."""
    if n <= 0:
        return (0.0, 1.0)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def paired_difference(a: np.ndarray, b: np.ndarray, z: float = Z95) -> dict[str, float]:
    """Success-rate difference b - a over the same episodes, with a Wald interval on the paired
    differences (Newcombe-style for matched pairs) and McNemar's exact two-sided p-value."""
    a, b = np.asarray(a, bool), np.asarray(b, bool)
    if a.shape != b.shape:
        raise ValueError(f"paired results need the same episodes, got {a.shape} and {b.shape}")
    n = len(a)
    only_b = int(np.sum(b & ~a))
    only_a = int(np.sum(a & ~b))
    diff = (only_b - only_a) / n if n else 0.0
    var = ((only_a + only_b) / n - diff * diff) / n if n else 0.0
    half = z * math.sqrt(max(var, 0.0))
    return {
        "n": n, "diff": diff, "low": diff - half, "high": diff + half,
        "only_first": only_a, "only_second": only_b, "mcnemar_p": mcnemar_exact(only_a, only_b),
    }


def mcnemar_exact(b: int, c: int) -> float:
    """Exact two-sided McNemar p-value from the discordant counts."""
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2.0**n
    return min(1.0, 2 * tail)
