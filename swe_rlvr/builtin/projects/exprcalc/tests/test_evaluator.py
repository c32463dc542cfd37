import pytest

from exprcalc import ExprError, evaluate, parse
from exprcalc.evaluator import apply_operator, call, free_names


def test_evaluate_precedence():
    assert evaluate("2 + 3 * 4") == 14


def test_evaluate_subtraction_chain():
    assert evaluate("10 - 4 - 3") == 3


def test_evaluate_power_chain():
    assert evaluate("2 ** 3 ** 2") == 512


def test_evaluate_negative_power():
    assert evaluate("-2 ** 2") == -4


def test_evaluate_variables():
    assert evaluate("x * y + 1", {"x": 3, "y": 5}) == 16


def test_evaluate_unknown_name():
    with pytest.raises(ExprError, match="unknown name 'z'"):
        evaluate("z + 1")


def test_apply_operator_division_kinds():
    assert apply_operator("/", 7, 2) == 3.5
    assert apply_operator("//", 7, 2) == 3
    assert apply_operator("%", 7, 3) == 1


def test_apply_operator_division_by_zero():
    with pytest.raises(ExprError, match="division by zero"):
        apply_operator("/", 1, 0)
    with pytest.raises(ExprError):
        apply_operator("%", 1, 0)


def test_apply_operator_floor_of_negative():
    assert apply_operator("//", -7, 2) == -4


def test_call_min_max():
    assert call("min", [4, 2, 8]) == 2
    assert call("max", [4, 2, 8]) == 8


def test_call_arity():
    with pytest.raises(ExprError, match="takes 1 to 1"):
        call("abs", [1, 2])
    with pytest.raises(ExprError):
        call("round", [])


def test_call_round_digits():
    assert call("round", [2.5]) == 3
    assert call("round", [1.2345, 2]) == 1.23


def test_call_sqrt():
    assert call("sqrt", [16]) == 4.0
    with pytest.raises(ExprError, match="negative"):
        call("sqrt", [-1])


def test_call_unknown_function():
    with pytest.raises(ExprError, match="unknown function"):
        evaluate("cube(2)")


def test_evaluate_call_in_expression():
    assert evaluate("max(x, 10) % 7", {"x": 12}) == 5
    assert evaluate("abs(3 - 5) * 2") == 4


def test_free_names():
    assert free_names(parse("a + max(b, 2) * -c")) == {"a", "b", "c"}
    assert free_names(parse("1 + 2")) == set()
