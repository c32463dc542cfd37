import pytest

from datekit import business_days, iso_week
from datekit.weeks import is_weekend, next_weekday, week_start


def test_iso_week():
    assert iso_week((2024, 6, 1)) == (2024, 22)
    assert iso_week((2024, 1, 1)) == (2024, 1)


def test_iso_week_year_boundaries():
    assert iso_week((2021, 1, 3)) == (2020, 53)
    assert iso_week((2019, 12, 30)) == (2020, 1)


def test_week_start():
    assert week_start((2024, 6, 1)) == (2024, 5, 27)
    assert week_start((2024, 5, 27)) == (2024, 5, 27)


def test_is_weekend():
    assert is_weekend((2024, 6, 1)) and is_weekend((2024, 6, 2))
    assert not is_weekend((2024, 6, 3))


def test_business_days():
    assert business_days((2024, 6, 3), (2024, 6, 10)) == 5
    assert business_days((2024, 6, 1), (2024, 6, 4)) == 1
    assert business_days((2024, 6, 3), (2024, 6, 3)) == 0


def test_business_days_rejects_reversed():
    with pytest.raises(ValueError):
        business_days((2024, 6, 5), (2024, 6, 3))


def test_next_weekday():
    assert next_weekday((2024, 6, 1), 0) == (2024, 6, 3)
    assert next_weekday((2024, 6, 3), 0) == (2024, 6, 10)
