import pytest

from structs import RingBuffer


def filled(capacity, count):
    ring = RingBuffer(capacity)
    for n in range(count):
        ring.append(n)
    return ring


def test_append_until_full():
    ring = filled(3, 2)
    assert list(ring) == [0, 1] and len(ring) == 2 and not ring.is_full()


def test_overwrites_oldest():
    ring = filled(3, 5)
    assert list(ring) == [2, 3, 4] and ring.is_full()


def test_capacity_must_be_positive():
    with pytest.raises(ValueError):
        RingBuffer(0)


def test_popleft():
    ring = filled(3, 4)
    assert ring.popleft() == 1
    assert list(ring) == [2, 3] and len(ring) == 2


def test_popleft_empty():
    with pytest.raises(IndexError):
        RingBuffer(2).popleft()


def test_getitem_positive_and_negative():
    ring = filled(4, 6)
    assert ring[0] == 2 and ring[3] == 5
    assert ring[-1] == 5 and ring[-4] == 2


def test_getitem_out_of_range():
    ring = filled(4, 2)
    with pytest.raises(IndexError):
        ring[2]
    with pytest.raises(IndexError):
        ring[-3]


def test_newest():
    ring = filled(4, 6)
    assert ring.newest(2) == [4, 5]
    assert ring.newest(10) == [2, 3, 4, 5]
