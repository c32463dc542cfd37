import pytest

from texttable import Table

PEOPLE = Table(["name", "team", "score"], [
    ["ann", "red", 7], ["bob", "blue", 3], ["cy", "red", 5], ["di", "blue", 9]])


def test_column_and_select():
    assert PEOPLE.column("score") == [7, 3, 5, 9]
    assert PEOPLE.select("score", "name").rows[0] == [7, "ann"]


def test_unknown_column():
    with pytest.raises(KeyError):
        PEOPLE.column("age")


def test_where():
    assert len(PEOPLE.where("score", lambda s: s > 4)) == 3


def test_sort_by():
    assert PEOPLE.sort_by("score").column("name") == ["bob", "cy", "ann", "di"]
    assert PEOPLE.sort_by("score", reverse=True).column("name") == ["di", "ann", "cy", "bob"]


def test_sort_by_puts_missing_last():
    table = Table(["x"], [[2], [None], [1]])
    assert table.sort_by("x").column("x") == [1, 2, None]


def test_group_sum():
    assert PEOPLE.group_sum("team", "score") == {"red": 12, "blue": 12}


def test_row_too_long_raises():
    with pytest.raises(ValueError):
        Table(["a"], [[1, 2]])
