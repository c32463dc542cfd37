import math

import pytest

from statkit import describe, mean, median, mode, percentile, sample_variance, stdev, variance
from statkit.describe import value_range, zscores

DATA = [2, 4, 4, 4, 5, 5, 7, 9]


def test_mean():
    assert mean(DATA) == 5.0
    with pytest.raises(ValueError):
        mean([])


def test_median_odd_and_even():
    assert median([3, 1, 2]) == 2
    assert median([4, 1, 3, 2]) == 2.5


def test_median_of_nothing():
    with pytest.raises(ValueError):
        median([])


def test_mode_prefers_smallest_on_tie():
    assert mode([3, 1, 3, 1, 2]) == 1
    assert mode([5, 5, 2]) == 5


def test_variance_and_stdev():
    assert variance(DATA) == 4.0
    assert stdev(DATA) == 2.0


def test_sample_variance():
    assert sample_variance([1, 2, 3, 4]) == pytest.approx(5 / 3)
    with pytest.raises(ValueError):
        sample_variance([1])


def test_percentile_interpolates():
    assert percentile([15, 20, 35, 40, 50], 40) == 29.0
    assert percentile([1, 2, 3, 4], 50) == 2.5


def test_percentile_extremes():
    assert percentile([5, 1, 3], 0) == 1
    assert percentile([5, 1, 3], 100) == 5


def test_percentile_out_of_range():
    with pytest.raises(ValueError):
        percentile([1, 2], 101)
    with pytest.raises(ValueError):
        percentile([1, 2], -1)


def test_value_range():
    assert value_range([3, -2, 7]) == 9


def test_zscores():
    assert zscores([2, 4, 4, 4, 5, 5, 7, 9])[0] == -1.5
    assert zscores([3, 3]) == [0.0, 0.0]


def test_describe():
    summary = describe(DATA)
    assert summary["n"] == 8 and summary["median"] == 4.5
    assert (summary["min"], summary["max"]) == (2, 9)
    assert math.isclose(summary["stdev"], 2.0)
