import pytest

from statkit import Fraction
from statkit.fraction import as_fraction, parse_fraction


def test_lowest_terms_and_sign():
    f = Fraction(6, -8)
    assert (f.numerator, f.denominator) == (-3, 4)
    assert repr(f) == "Fraction(-3, 4)"


def test_zero_denominator():
    with pytest.raises(ZeroDivisionError):
        Fraction(1, 0)


def test_add_and_sub():
    assert Fraction(1, 2) + Fraction(1, 3) == Fraction(5, 6)
    assert Fraction(1, 2) - Fraction(1, 3) == Fraction(1, 6)
    assert Fraction(1, 2) + 1 == Fraction(3, 2)


def test_mul_and_div():
    assert Fraction(2, 3) * Fraction(3, 4) == Fraction(1, 2)
    assert Fraction(2, 3) / Fraction(4, 9) == Fraction(3, 2)


def test_div_by_zero_fraction():
    with pytest.raises(ZeroDivisionError):
        Fraction(1, 2) / Fraction(0, 5)


def test_ordering():
    assert Fraction(1, 3) < Fraction(1, 2)
    assert not Fraction(1, 2) < Fraction(1, 2)


def test_floor():
    assert Fraction(7, 2).floor() == 3
    assert Fraction(-7, 2).floor() == -4


def test_to_mixed():
    assert Fraction(7, 2).to_mixed() == "3 1/2"
    assert Fraction(-7, 2).to_mixed() == "-3 1/2"
    assert Fraction(1, 3).to_mixed() == "1/3"
    assert Fraction(4, 2).to_mixed() == "2"


def test_as_fraction():
    assert as_fraction(3) == Fraction(3, 1)
    with pytest.raises(TypeError):
        as_fraction(0.5)


def test_parse_fraction():
    assert parse_fraction(" 3/9 ") == Fraction(1, 3)
    assert parse_fraction("5") == Fraction(5)
