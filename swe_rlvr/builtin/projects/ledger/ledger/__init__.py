"""ledger: exact money, invoices and stock."""

from ledger.currency import UnknownCurrency
from ledger.inventory import Inventory, OutOfStock
from ledger.invoice import Invoice
from ledger.money import CurrencyMismatch, Money

__all__ = ["UnknownCurrency", "Inventory", "OutOfStock", "Invoice", "CurrencyMismatch", "Money"]
