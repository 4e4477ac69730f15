"""The interval the GPU benchmarks give for a median of paired ratios (benchmarks/device/_report.py)."""

from __future__ import annotations

import math
import random
import statistics
import sys

import pytest
from support.paths import REPO

sys.path.insert(0, str(REPO / "benchmarks" / "device"))
from _report import median_interval  # noqa: E402


@pytest.mark.parametrize("n", [0, 1, 5])
def test_too_few_values_have_no_95_percent_interval(n: int) -> None:
    assert median_interval([float(i) for i in range(n)]) is None


@pytest.mark.parametrize(("n", "low", "high"), [(6, 1, 6), (10, 2, 9), (15, 4, 12), (20, 6, 15), (25, 8, 18)])
def test_the_bounds_are_the_order_statistics_of_the_binomial_tables(n: int, low: int, high: int) -> None:
    # The values arrive unsorted: the interval is taken from the sorted ones.
    values = [float(v) for v in random.Random(n).sample(range(1, n + 1), n)]
    assert median_interval(values) == [float(low), float(high)]


def test_bounds_are_rounded_to_the_digits_asked() -> None:
    values = [0.90123, 0.91234, 0.92345, 0.93456, 0.94567, 0.95678]
    assert median_interval(values, digits=3) == [0.901, 0.957]


def test_it_covers_the_true_median_at_least_as_often_as_it_says() -> None:
    rng = random.Random(0)
    trials, covered = 2000, 0
    for _ in range(trials):
        # Skewed ratios around a known median (exp(0) = 1), like step-time ratios on a drifting machine.
        values = [statistics.NormalDist(0, 0.05).inv_cdf(rng.random()) for _ in range(15)]
        low, high = median_interval([math.exp(v) for v in values])
        covered += low <= 1.0 <= high
    # The n = 15 interval covers with probability 1 - 2 * P(Binomial(15, 1/2) <= 3) = 0.965.
    assert 0.95 <= covered / trials <= 0.98
