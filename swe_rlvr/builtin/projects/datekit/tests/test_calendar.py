import pytest

from datekit import day_of_year, days_in_month, is_leap, weekday
from datekit.calendar import days_in_year, is_valid, quarter


def test_is_leap():
    assert is_leap(2024) and is_leap(2000)
    assert not is_leap(1900) and not is_leap(2023)


def test_days_in_month():
    assert days_in_month(2024, 2) == 29
    assert days_in_month(2023, 2) == 28
    assert days_in_month(2023, 12) == 31
    assert days_in_month(2023, 4) == 30


def test_days_in_month_rejects_bad_month():
    with pytest.raises(ValueError):
        days_in_month(2023, 13)
    with pytest.raises(ValueError):
        days_in_month(2023, 0)


def test_days_in_year():
    assert days_in_year(2024) == 366 and days_in_year(2100) == 365


def test_day_of_year():
    assert day_of_year((2023, 1, 1)) == 1
    assert day_of_year((2024, 3, 1)) == 61
    assert day_of_year((2023, 12, 31)) == 365


def test_is_valid():
    assert is_valid((2024, 2, 29))
    assert not is_valid((2023, 2, 29))
    assert not is_valid((2023, 4, 0))


def test_weekday():
    assert weekday((2024, 6, 1)) == 5
    assert weekday((2024, 1, 1)) == 0
    assert weekday((2000, 2, 29)) == 1
    assert weekday((2023, 12, 31)) == 6


def test_quarter():
    assert [quarter((2024, m, 1)) for m in (1, 3, 4, 12)] == [1, 1, 2, 4]
