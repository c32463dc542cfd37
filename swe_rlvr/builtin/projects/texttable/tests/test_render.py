from texttable import Table, read_csv, render
from texttable.width import display_width, pad, truncate


def test_render_grid():
    table = Table(["name", "n"], [["ann", 7], ["bo", 12]])
    assert render(table) == (
        "+------+----+\n"
        "| name |  n |\n"
        "+------+----+\n"
        "| ann  |  7 |\n"
        "| bo   | 12 |\n"
        "+------+----+\n")


def test_mixed_column_is_left_aligned():
    table = Table(["v"], [[1], ["x"]])
    assert "| 1 |" in render(table)


def test_precision():
    table = Table(["x"], [[1.5], [2.25]])
    assert "| 2.25 |" in render(table, precision=2)
    assert "| 1.50 |" in render(table, precision=2)


def test_missing_values_render_empty():
    table = read_csv("a,b\n1,\n")
    assert render(table).splitlines()[3] == "| 1 |   |"


def test_display_width_and_pad():
    assert display_width("abc") == 3
    assert display_width("東京") == 4
    assert display_width("e\u0301") == 1
    assert pad("ab", 4) == "ab  "
    assert pad("ab", 4, "right") == "  ab"


def test_truncate_short_text_unchanged():
    assert truncate("abc", 5) == "abc"
