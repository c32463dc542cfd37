import pytest

from statkit import bin_edges, bin_index, histogram
from statkit.bins import cumulative_counts, densest_bin


def test_bin_edges():
    assert bin_edges(0, 10, 4) == [0, 2.5, 5.0, 7.5, 10.0]


def test_bin_edges_rejects_bad_input():
    with pytest.raises(ValueError):
        bin_edges(0, 10, 0)
    with pytest.raises(ValueError):
        bin_edges(5, 5, 2)


def test_bin_index_inside():
    assert bin_index(0, 0, 10, 5) == 0
    assert bin_index(3.9, 0, 10, 5) == 1
    assert bin_index(4, 0, 10, 5) == 2


def test_bin_index_upper_edge_in_last_bin():
    assert bin_index(10, 0, 10, 5) == 4


def test_bin_index_outside():
    assert bin_index(-0.1, 0, 10, 5) is None
    assert bin_index(10.5, 0, 10, 5) is None


def test_histogram():
    assert histogram([1, 2, 2, 3, 9], bins=4) == [3, 1, 0, 1]


def test_histogram_with_bounds():
    assert histogram([0, 5, 10, 15], bins=2, low=0, high=10) == [1, 2]


def test_cumulative_counts():
    assert cumulative_counts([3, 0, 2]) == [3, 3, 5]


def test_densest_bin():
    assert densest_bin([1, 4, 2, 4]) == 1
