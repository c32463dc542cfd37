"""Invoices: lines with quantity and tax rate, an invoice-wide percentage discount."""

from dataclasses import dataclass
from decimal import Decimal

from ledger import currency
from ledger.money import CurrencyMismatch, Money


@dataclass(frozen=True)
class Line:
    description: str
    unit_price: Money
    quantity: int
    tax_rate: Decimal

    def net(self):
        return self.unit_price * self.quantity


class Invoice:
    def __init__(self, code, discount_percent=0):
        self.currency = currency.normalize_code(code)
        self.discount_percent = Decimal(str(discount_percent))
        self.lines = []

    def add(self, description, unit_price, quantity=1, tax_rate="0"):
        if unit_price.currency != self.currency:
            raise CurrencyMismatch(f"line {description!r} is in {unit_price.currency}, "
                                   f"the invoice is in {self.currency}")
        if quantity <= 0:
            raise ValueError(f"quantity must be positive, got {quantity}")
        self.lines.append(Line(description, unit_price, quantity, Decimal(str(tax_rate))))

    def subtotal(self):
        return self._sum(line.net() for line in self.lines).rounded()

    def discount(self):
        return (self.subtotal() * (self.discount_percent / 100)).rounded()

    def tax(self):
        factor = 1 - self.discount_percent / 100
        return self._sum((line.net() * factor * line.tax_rate).rounded() for line in self.lines)

    def total(self):
        return self.subtotal() - self.discount() + self.tax()

    def _sum(self, amounts):
        total = Money.zero(self.currency)
        for amount in amounts:
            total = total + amount
        return total
