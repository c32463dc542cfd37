from decimal import Decimal

import pytest

from ledger import CurrencyMismatch, Money, UnknownCurrency


def test_of_and_arithmetic():
    a = Money.of("19.99", "EUR")
    assert (a + a).amount == Decimal("39.98")
    assert (a - Money.of("0.99", "EUR")).amount == Decimal("19.00")
    assert (a * 3).amount == Decimal("59.97")
    assert (2 * a).amount == Decimal("39.98")
    assert (-a).amount == Decimal("-19.99")


def test_unknown_currency():
    with pytest.raises(UnknownCurrency):
        Money.of("1", "XYZ")


def test_subtracting_other_currency_raises():
    with pytest.raises(CurrencyMismatch):
        Money.of("1", "EUR") - Money.of("1", "USD")


def test_rounded_to_minor_units():
    assert Money.of("2.346", "EUR").rounded().amount == Decimal("2.35")
    assert Money.of("10.4", "JPY").rounded().amount == Decimal("10")


def test_allocate_even():
    parts = Money.of("90", "EUR").allocate([1, 2])
    assert [p.amount for p in parts] == [Decimal("30.00"), Decimal("60.00")]


def test_allocate_rejects_zero_ratios():
    with pytest.raises(ValueError):
        Money.of("1", "EUR").allocate([0, 0])


def test_format():
    assert Money.of("1234.5", "EUR").format() == "EUR 1,234.50"
    assert Money.of("-5", "USD").format() == "-USD 5.00"


def test_multiply_by_decimal_is_exact():
    assert (Money.of("19.99", "EUR") * Decimal("0.1")).amount == Decimal("1.999")
