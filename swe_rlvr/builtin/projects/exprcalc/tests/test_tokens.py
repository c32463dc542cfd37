import pytest

from exprcalc import ExprError, tokenize
from exprcalc.tokens import number_value, scan_name, scan_number


def test_tokenize_kinds_and_columns():
    assert tokenize("12 + x") == [("num", "12", 0), ("op", "+", 3), ("name", "x", 5)]


def test_tokenize_two_character_operators():
    assert [t[1] for t in tokenize("2**3//4")] == ["2", "**", "3", "//", "4"]


def test_tokenize_leading_dot_number():
    assert tokenize(".5*2")[0] == ("num", ".5", 0)


def test_tokenize_lone_dot_is_an_error():
    with pytest.raises(ExprError) as info:
        tokenize("1 + .")
    assert info.value.column == 4


def test_tokenize_unexpected_character_column():
    with pytest.raises(ExprError) as info:
        tokenize("ab $ 3")
    assert info.value.column == 3


def test_scan_number_stops_at_second_dot():
    assert scan_number("1.2.3", 0) == 3


def test_scan_number_exponents():
    assert scan_number("1e5", 0) == 3
    assert scan_number("2.5E-3)", 0) == 6
    assert scan_number("7e+", 0) == 1


def test_scan_number_from_offset():
    assert scan_number("x=42;", 2) == 4


def test_scan_name_with_digits_and_underscores():
    assert scan_name("rate_2b+1", 0) == 7
    assert scan_name("a", 0) == 1


def test_number_value_int_and_float():
    assert number_value("42") == 42 and isinstance(number_value("42"), int)
    assert number_value("4.5") == 4.5
    assert number_value("1e3") == 1000.0
