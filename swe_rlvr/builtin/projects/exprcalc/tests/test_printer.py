from exprcalc import parse, to_text
from exprcalc.printer import depth, precedence_of


def test_to_text_keeps_needed_parentheses():
    assert to_text(parse("(1 + 2) * (3 + 4)")) == "(1 + 2) * (3 + 4)"


def test_to_text_drops_redundant_parentheses():
    assert to_text(parse("(1 * 2) + 3")) == "1 * 2 + 3"


def test_to_text_right_operand_of_subtraction():
    assert to_text(parse("2 - (3 - 4)")) == "2 - (3 - 4)"
    assert to_text(parse("(2 - 3) - 4")) == "2 - 3 - 4"


def test_to_text_power_associativity():
    assert to_text(parse("(2 ** 3) ** 2")) == "(2 ** 3) ** 2"
    assert to_text(parse("2 ** (3 ** 2)")) == "2 ** 3 ** 2"


def test_to_text_negation():
    assert to_text(parse("-(1 + 2)")) == "-(1 + 2)"
    assert to_text(parse("-x")) == "-x"


def test_to_text_call():
    assert to_text(parse("max(a,1+2)")) == "max(a, 1 + 2)"


def test_precedence_of():
    assert precedence_of(parse("1 + 2")) == 1
    assert precedence_of(parse("1 * 2")) == 2
    assert precedence_of(parse("-1")) == 3
    assert precedence_of(parse("x")) == 5


def test_depth():
    assert depth(parse("1")) == 1
    assert depth(parse("1 + 2 * 3")) == 3
    assert depth(parse("-f(1, 2 + 3)")) == 4
    assert depth(parse("f()")) == 1
