from decimal import Decimal

import pytest

from ledger import Invoice, Money


def eur(text):
    return Money.of(text, "EUR")


def test_subtotal_and_total_without_discount():
    inv = Invoice("EUR")
    inv.add("Widget", eur("19.99"), quantity=3, tax_rate="0.20")
    inv.add("Manual", eur("5.00"))
    assert inv.subtotal().amount == Decimal("64.97")
    assert inv.tax().amount == Decimal("11.99")
    assert inv.total().amount == Decimal("76.96")


def test_discount_amount():
    inv = Invoice("EUR", discount_percent=10)
    inv.add("Widget", eur("19.99"), quantity=3)
    assert inv.discount().amount == Decimal("6.00")
    assert inv.total().amount == Decimal("53.97")


def test_empty_invoice():
    assert Invoice("USD").total().amount == Decimal("0.00")


def test_quantity_must_be_positive():
    with pytest.raises(ValueError):
        Invoice("EUR").add("Widget", eur("1.00"), quantity=0)
