import pytest

from structs import IntervalSet


def spans(*pairs):
    s = IntervalSet()
    for start, end in pairs:
        s.add(start, end)
    return s


def test_add_keeps_order():
    assert spans((8, 9), (1, 3)).intervals() == [(1, 3), (8, 9)]


def test_touching_intervals_merge():
    assert spans((1, 3), (3, 5), (8, 9)).intervals() == [(1, 5), (8, 9)]


def test_overlapping_intervals_merge():
    assert spans((1, 4), (6, 9), (3, 7)).intervals() == [(1, 9)]


def test_add_between():
    assert spans((1, 2), (8, 9), (4, 5)).intervals() == [(1, 2), (4, 5), (8, 9)]


def test_empty_interval_ignored_and_inverted_rejected():
    assert spans((2, 2)).intervals() == []
    with pytest.raises(ValueError):
        spans((3, 1))


def test_contains_is_half_open():
    s = spans((1, 4))
    assert 1 in s and 3 in s
    assert 4 not in s and 0 not in s


def test_remove_splits():
    s = spans((0, 10))
    s.remove(3, 5)
    assert s.intervals() == [(0, 3), (5, 10)]


def test_remove_edges():
    s = spans((0, 4), (6, 9))
    s.remove(4, 6)
    assert s.intervals() == [(0, 4), (6, 9)]
    s.remove(2, 7)
    assert s.intervals() == [(0, 2), (7, 9)]


def test_total_length_and_gaps():
    s = spans((0, 2), (5, 6), (8, 10))
    assert s.total_length() == 5
    assert s.gaps() == [(2, 5), (6, 8)]
