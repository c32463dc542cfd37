"""Stock levels per SKU with reservations for open orders."""


class OutOfStock(RuntimeError):
    pass


class Inventory:
    def __init__(self):
        self._on_hand = {}
        self._reserved = {}

    def on_hand(self, sku):
        return self._on_hand.get(sku, 0)

    def reserved(self, sku):
        return self._reserved.get(sku, 0)

    def available(self, sku):
        return self.on_hand(sku) - self.reserved(sku)

    def add(self, sku, qty):
        _check_quantity(qty)
        self._on_hand[sku] = self.on_hand(sku) + qty

    def reserve(self, sku, qty):
        _check_quantity(qty)
        if qty > self.available(sku):
            raise OutOfStock(f"cannot reserve {qty} of {sku}: {self.available(sku)} available")
        self._reserved[sku] = self.reserved(sku) + qty

    def release(self, sku, qty):
        _check_quantity(qty)
        self._reserved[sku] = max(0, self.reserved(sku) - qty)

    def ship(self, sku, qty):
        """Ship reserved units: they leave both the reservation and the stock."""
        _check_quantity(qty)
        if qty > self.reserved(sku):
            raise OutOfStock(f"cannot ship {qty} of {sku}: only {self.reserved(sku)} reserved")
        self._reserved[sku] = self.reserved(sku) - qty
        self._on_hand[sku] = self.on_hand(sku) - qty


def _check_quantity(qty):
    if not isinstance(qty, int) or qty <= 0:
        raise ValueError(f"quantity must be a positive integer, got {qty!r}")
