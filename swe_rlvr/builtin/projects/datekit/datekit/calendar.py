"""Facts about years and months."""

MONTH_DAYS = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def is_leap(year):
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def days_in_month(year, month):
    if not 1 <= month <= 12:
        raise ValueError(f"month must be within 1..12, got {month}")
    if month == 2 and is_leap(year):
        return 29
    return MONTH_DAYS[month - 1]


def days_in_year(year):
    return 366 if is_leap(year) else 365


def day_of_year(date):
    year, month, day = date
    return sum(days_in_month(year, m) for m in range(1, month)) + day


def is_valid(date):
    year, month, day = date
    return 1 <= month <= 12 and 1 <= day <= days_in_month(year, month)


def weekday(date):
    """Monday is 0 and Sunday is 6 (Zeller's congruence, shifted)."""
    year, month, day = date
    if month < 3:
        month += 12
        year -= 1
    century, rest = divmod(year, 100)
    h = (day + 13 * (month + 1) // 5 + rest + rest // 4 + century // 4 + 5 * century) % 7
    return (h + 5) % 7


def quarter(date):
    return (date[1] - 1) // 3 + 1
