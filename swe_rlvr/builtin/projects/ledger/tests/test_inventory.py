import pytest

from ledger import Inventory, OutOfStock


@pytest.fixture
def stock():
    inv = Inventory()
    inv.add("SKU-1", 10)
    return inv


def test_reserve_reduces_available(stock):
    stock.reserve("SKU-1", 4)
    assert stock.available("SKU-1") == 6
    assert stock.on_hand("SKU-1") == 10


def test_reserve_more_than_stock_raises(stock):
    with pytest.raises(OutOfStock):
        stock.reserve("SKU-1", 11)


def test_release(stock):
    stock.reserve("SKU-1", 4)
    stock.release("SKU-1", 3)
    assert stock.available("SKU-1") == 9


def test_ship_reserved(stock):
    stock.reserve("SKU-1", 4)
    stock.ship("SKU-1", 4)
    assert stock.on_hand("SKU-1") == 6
    assert stock.reserved("SKU-1") == 0


def test_ship_unreserved_raises(stock):
    with pytest.raises(OutOfStock):
        stock.ship("SKU-1", 1)


@pytest.mark.parametrize("qty", [0, -1, 1.5])
def test_bad_quantities(stock, qty):
    with pytest.raises(ValueError):
        stock.add("SKU-1", qty)
