import pytest

from datekit import add_days, add_months, days_between, from_ordinal, to_ordinal
from datekit.arithmetic import age_on, days_left_in_year


def test_to_ordinal():
    assert to_ordinal((1, 1, 1)) == 1
    assert to_ordinal((2024, 1, 1)) == 738886


def test_from_ordinal_round_trip():
    for date in [(1, 1, 1), (2000, 2, 29), (2023, 12, 31), (2024, 3, 1)]:
        assert from_ordinal(to_ordinal(date)) == date


def test_from_ordinal_rejects_zero():
    with pytest.raises(ValueError):
        from_ordinal(0)


def test_add_days():
    assert add_days((2024, 2, 28), 2) == (2024, 3, 1)
    assert add_days((2023, 12, 31), 1) == (2024, 1, 1)
    assert add_days((2024, 1, 1), -1) == (2023, 12, 31)


def test_days_between():
    assert days_between((2024, 1, 1), (2025, 1, 1)) == 366
    assert days_between((2024, 3, 10), (2024, 3, 1)) == -9


def test_add_months_clamps_day():
    assert add_months((2024, 1, 31), 1) == (2024, 2, 29)
    assert add_months((2023, 11, 15), 3) == (2024, 2, 15)
    assert add_months((2024, 3, 31), -1) == (2024, 2, 29)


def test_add_months_year_boundary():
    assert add_months((2024, 12, 1), 1) == (2025, 1, 1)
    assert add_months((2024, 1, 1), -1) == (2023, 12, 1)


def test_age_on():
    assert age_on((2000, 6, 15), (2024, 6, 14)) == 23
    assert age_on((2000, 6, 15), (2024, 6, 15)) == 24


def test_days_left_in_year():
    assert days_left_in_year((2024, 12, 31)) == 0
    assert days_left_in_year((2023, 1, 1)) == 364
