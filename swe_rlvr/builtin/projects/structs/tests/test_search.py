import pytest

from structs import bisect_left, bisect_right, find
from structs.search import count_in_range, insert_sorted, nearest

ITEMS = [1, 2, 2, 2, 5, 8]


def test_bisect_left():
    assert bisect_left(ITEMS, 2) == 1
    assert bisect_left(ITEMS, 0) == 0
    assert bisect_left(ITEMS, 9) == 6


def test_bisect_right():
    assert bisect_right(ITEMS, 2) == 4
    assert bisect_right(ITEMS, 8) == 6


def test_find():
    assert find(ITEMS, 5) == 4
    assert find(ITEMS, 3) == -1
    assert find(ITEMS, 9) == -1


def test_count_in_range():
    assert count_in_range(ITEMS, 2, 5) == 4
    assert count_in_range(ITEMS, 6, 7) == 0


def test_insert_sorted():
    assert insert_sorted([1, 3, 5], 4) == [1, 3, 4, 5]
    assert insert_sorted([1, 3], 0) == [0, 1, 3]


def test_nearest():
    assert nearest([1, 4, 10], 6) == 4
    assert nearest([1, 4, 10], 8) == 10
    assert nearest([1, 4, 10], 0) == 1
    assert nearest([1, 4, 10], 99) == 10


def test_nearest_tie_goes_low():
    assert nearest([2, 4], 3) == 2


def test_nearest_empty():
    with pytest.raises(ValueError):
        nearest([], 1)
