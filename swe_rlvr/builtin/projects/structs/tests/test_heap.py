import pytest

from structs import MinHeap
from structs.heap import nsmallest


def test_pop_in_order():
    heap = MinHeap([5, 1, 4, 2, 3])
    assert [heap.pop() for _ in range(5)] == [1, 2, 3, 4, 5]


def test_peek_does_not_remove():
    heap = MinHeap([3, 2])
    assert heap.peek() == 2 and len(heap) == 2


def test_empty_heap_errors():
    with pytest.raises(IndexError):
        MinHeap().pop()
    with pytest.raises(IndexError):
        MinHeap().peek()


def test_duplicates():
    assert MinHeap([2, 1, 2, 1]).drain() == [1, 1, 2, 2]


def test_sift_down_picks_smaller_child():
    heap = MinHeap()
    heap.items = [9, 4, 2, 7, 8, 3]
    heap.sift_down(0)
    assert heap.items == [2, 4, 3, 7, 8, 9]


def test_sift_up_stops_at_parent():
    heap = MinHeap([1, 5, 6])
    heap.push(5)
    assert heap.items == [1, 5, 6, 5]


def test_nsmallest():
    assert nsmallest([7, 3, 9, 1], 2) == [1, 3]
    assert nsmallest([2], 5) == [2]
