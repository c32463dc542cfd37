import pytest

from datekit import format_date, parse_date
from datekit.text import month_from_name


def test_parse_date():
    assert parse_date("2024-02-29") == (2024, 2, 29)
    assert parse_date(" 0999-12-01 ") == (999, 12, 1)


def test_parse_date_rejects_bad_shapes():
    for text in ("2024-2-29", "2024/02/29", "24-02-29", "2024-02-29-1"):
        with pytest.raises(ValueError):
            parse_date(text)


def test_parse_date_rejects_impossible_dates():
    with pytest.raises(ValueError, match="no such date"):
        parse_date("2023-02-29")
    with pytest.raises(ValueError, match="digits"):
        parse_date("2023-0a-01")


def test_format_date():
    assert format_date((987, 3, 4)) == "0987-03-04"
    assert format_date((2024, 6, 1), "long") == "1 June 2024"
    with pytest.raises(ValueError):
        format_date((2024, 6, 1), "short")


def test_month_from_name():
    assert month_from_name("March") == 3
    assert month_from_name(" dec ") == 12
    with pytest.raises(ValueError):
        month_from_name("Ju")
