"""Money: a Decimal amount in a currency."""

from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

from ledger import currency

ROUNDING = ROUND_HALF_UP


class CurrencyMismatch(ValueError):
    pass


@dataclass(frozen=True)
class Money:
    amount: Decimal
    currency: str

    @classmethod
    def of(cls, amount, code):
        return cls(Decimal(str(amount)), currency.normalize_code(code))

    @classmethod
    def zero(cls, code):
        return cls.of(0, code)

    def rounded(self):
        return Money(self.amount.quantize(currency.quantum(self.currency), rounding=ROUNDING),
                     self.currency)

    def __add__(self, other):
        self._check(other)
        return Money(self.amount + other.amount, self.currency)

    def __sub__(self, other):
        self._check(other)
        return Money(self.amount - other.amount, self.currency)

    def __neg__(self):
        return Money(-self.amount, self.currency)

    def __mul__(self, factor):
        if isinstance(factor, float):
            factor = Decimal(repr(factor))
        return Money(self.amount * Decimal(factor), self.currency)

    __rmul__ = __mul__

    def allocate(self, ratios):
        """Split into parts proportional to `ratios`; the parts add up to the rounded whole."""
        total = sum(ratios)
        if not ratios or total <= 0:
            raise ValueError("ratios must be non-negative and add up to more than zero")
        unit = currency.quantum(self.currency)
        units = int(self.rounded().amount / unit)
        shares = [units * ratio // total for ratio in ratios]
        for i in range(units - sum(shares)):
            shares[i] += 1
        return [Money(share * unit, self.currency) for share in shares]

    def format(self):
        """'EUR 1,234.50', '-JPY 1,234'."""
        places = currency.minor_units(self.currency)
        text = f"{abs(self.rounded().amount):,.{places}f}"
        sign = "-" if self.amount < 0 else ""
        return f"{sign}{self.currency} {text}"

    def _check(self, other):
        if not isinstance(other, Money):
            raise TypeError(f"cannot combine Money with {type(other).__name__}")
        if other.currency != self.currency:
            raise CurrencyMismatch(f"cannot combine {self.currency} with {other.currency}")
