"""ISO 4217 currency codes and their minor units."""

from decimal import Decimal

MINOR_UNITS = {"EUR": 2, "USD": 2, "GBP": 2, "CHF": 2, "JPY": 0, "KRW": 0, "KWD": 3, "BHD": 3}


class UnknownCurrency(ValueError):
    pass


def normalize_code(code):
    """' eur ' -> 'EUR'; raise for codes this library does not know."""
    normalized = code.strip().upper()
    if normalized not in MINOR_UNITS:
        raise UnknownCurrency(f"unknown currency {code!r}; known: {', '.join(sorted(MINOR_UNITS))}")
    return normalized


def minor_units(code):
    return MINOR_UNITS[normalize_code(code)]


def quantum(code):
    """The smallest amount of the currency: Decimal('0.01') for EUR, Decimal('1') for JPY."""
    return Decimal(1).scaleb(-minor_units(code))
