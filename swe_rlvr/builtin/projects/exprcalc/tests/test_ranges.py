import pytest

from exprcalc import ExprError
from exprcalc.ranges import compress, count_pages, parse_ranges


def test_parse_ranges():
    assert parse_ranges("1-3,5,8-9") == [1, 2, 3, 5, 8, 9]


def test_parse_ranges_overlaps_and_spaces():
    assert parse_ranges(" 4-6 , 5-7") == [4, 5, 6, 7]
    assert parse_ranges("3-3") == [3]


def test_parse_ranges_backwards():
    with pytest.raises(ExprError) as info:
        parse_ranges("1,5-2")
    assert info.value.column == 2


def test_parse_ranges_limit():
    assert parse_ranges("1-4", limit=4) == [1, 2, 3, 4]
    with pytest.raises(ExprError, match="past the last page"):
        parse_ranges("2-5", limit=4)


def test_parse_ranges_empty_part():
    with pytest.raises(ExprError, match="empty range"):
        parse_ranges("1,,2")


def test_compress():
    assert compress([9, 1, 2, 3, 5, 8]) == "1-3,5,8-9"
    assert compress([4]) == "4"
    assert compress([]) == ""


def test_count_pages():
    assert count_pages("1-10,5") == 10
