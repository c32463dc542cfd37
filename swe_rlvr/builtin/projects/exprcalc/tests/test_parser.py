import pytest

from exprcalc import ExprError, parse


def test_parse_precedence():
    assert parse("1 + 2 * 3") == ("bin", "+", ("num", 1), ("bin", "*", ("num", 2), ("num", 3)))


def test_parse_left_associative_subtraction():
    assert parse("8 - 3 - 2") == ("bin", "-", ("bin", "-", ("num", 8), ("num", 3)), ("num", 2))


def test_parse_power_is_right_associative():
    assert parse("2 ** 3 ** 2") == ("bin", "**", ("num", 2), ("bin", "**", ("num", 3), ("num", 2)))


def test_parse_unary_minus_below_power():
    assert parse("-x ** 2") == ("neg", ("bin", "**", ("name", "x"), ("num", 2)))


def test_parse_unary_plus_is_dropped():
    assert parse("+4") == ("num", 4)


def test_parse_parentheses():
    assert parse("(1 + 2) * 3") == ("bin", "*", ("bin", "+", ("num", 1), ("num", 2)), ("num", 3))


def test_parse_call_arguments():
    assert parse("max(1, y, 3)") == ("call", "max", [("num", 1), ("name", "y"), ("num", 3)])


def test_parse_call_without_arguments():
    assert parse("f()") == ("call", "f", [])


def test_parse_unclosed_parenthesis():
    with pytest.raises(ExprError, match=r"expected '\)'"):
        parse("(1 + 2")


def test_parse_trailing_tokens():
    with pytest.raises(ExprError) as info:
        parse("1 2")
    assert info.value.column == 2


def test_parse_missing_operand():
    with pytest.raises(ExprError) as info:
        parse("3 *")
    assert info.value.column == 3
