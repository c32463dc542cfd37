"""Binary search over sorted lists."""


def bisect_left(items, target):
    low, high = 0, len(items)
    while low < high:
        middle = (low + high) // 2
        if items[middle] < target:
            low = middle + 1
        else:
            high = middle
    return low


def bisect_right(items, target):
    low, high = 0, len(items)
    while low < high:
        middle = (low + high) // 2
        if items[middle] <= target:
            low = middle + 1
        else:
            high = middle
    return low


def find(items, target):
    index = bisect_left(items, target)
    if index < len(items) and items[index] == target:
        return index
    return -1


def count_in_range(items, low, high):
    """How many values v satisfy low <= v <= high."""
    return bisect_right(items, high) - bisect_left(items, low)


def insert_sorted(items, value):
    index = bisect_right(items, value)
    return items[:index] + [value] + items[index:]


def nearest(items, target):
    if not items:
        raise ValueError("nearest in an empty list")
    index = bisect_left(items, target)
    if index == 0:
        return items[0]
    if index == len(items):
        return items[-1]
    before, after = items[index - 1], items[index]
    return before if target - before <= after - target else after
