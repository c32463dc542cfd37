"""An exact fraction in lowest terms with a positive denominator."""

from statkit.numtheory import gcd


class Fraction:
    def __init__(self, numerator, denominator=1):
        if denominator == 0:
            raise ZeroDivisionError("denominator is zero")
        if denominator < 0:
            numerator, denominator = -numerator, -denominator
        common = gcd(numerator, denominator)
        self.numerator = numerator // common
        self.denominator = denominator // common

    def __repr__(self):
        return f"Fraction({self.numerator}, {self.denominator})"

    def __eq__(self, other):
        other = as_fraction(other)
        return self.numerator == other.numerator and self.denominator == other.denominator

    def __lt__(self, other):
        other = as_fraction(other)
        return self.numerator * other.denominator < other.numerator * self.denominator

    def __add__(self, other):
        other = as_fraction(other)
        return Fraction(self.numerator * other.denominator + other.numerator * self.denominator,
                        self.denominator * other.denominator)

    def __sub__(self, other):
        other = as_fraction(other)
        return Fraction(self.numerator * other.denominator - other.numerator * self.denominator,
                        self.denominator * other.denominator)

    def __mul__(self, other):
        other = as_fraction(other)
        return Fraction(self.numerator * other.numerator, self.denominator * other.denominator)

    def __truediv__(self, other):
        other = as_fraction(other)
        if other.numerator == 0:
            raise ZeroDivisionError("division by a zero fraction")
        return Fraction(self.numerator * other.denominator, self.denominator * other.numerator)

    def floor(self):
        return self.numerator // self.denominator

    def to_mixed(self):
        whole = abs(self.numerator) // self.denominator
        rest = abs(self.numerator) % self.denominator
        sign = "-" if self.numerator < 0 else ""
        if rest == 0:
            return f"{sign}{whole}"
        if whole == 0:
            return f"{sign}{rest}/{self.denominator}"
        return f"{sign}{whole} {rest}/{self.denominator}"


def as_fraction(value):
    if isinstance(value, Fraction):
        return value
    if isinstance(value, int):
        return Fraction(value, 1)
    raise TypeError(f"cannot use {type(value).__name__} as a fraction")


def parse_fraction(text):
    text = text.strip()
    if "/" not in text:
        return Fraction(int(text))
    top, _, bottom = text.partition("/")
    return Fraction(int(top), int(bottom))
