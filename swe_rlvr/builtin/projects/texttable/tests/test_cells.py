import pytest

from texttable.cells import format_cell, infer, is_number, to_text


@pytest.mark.parametrize("text,expected", [
    ("42", 42), ("-3", -3), ("4.5", 4.5), ("true", True), ("false", False),
    ("", None), ("   ", None), ("Oslo", "Oslo"), ("0", 0), ("0.25", 0.25),
], ids=["int", "negative", "float", "true", "false", "empty", "blank", "word", "zero", "fraction"])
def test_infer(text, expected):
    assert infer(text) == expected
    assert type(infer(text)) is type(expected)


def test_to_text():
    assert to_text(None) == ""
    assert to_text(False) == "false"
    assert to_text(1.5) == "1.5"


def test_format_cell():
    assert format_cell(None) == ""
    assert format_cell(True) == "yes"
    assert format_cell(2.0, precision=2) == "2.00"
    assert format_cell(7, precision=2) == "7"


def test_is_number():
    assert is_number(3)
    assert not is_number(True)
    assert not is_number("3")
