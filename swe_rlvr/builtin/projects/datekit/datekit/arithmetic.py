"""Adding to dates and measuring between them, via day ordinals (0001-01-01 is day 1)."""

from datekit.calendar import days_in_month, days_in_year, day_of_year


def to_ordinal(date):
    year = date[0]
    previous = year - 1
    days_before_year = previous * 365 + previous // 4 - previous // 100 + previous // 400
    return days_before_year + day_of_year(date)


def from_ordinal(ordinal):
    if ordinal < 1:
        raise ValueError("ordinals start at 1")
    year = 1 + (ordinal - 1) * 400 // 146097
    while to_ordinal((year, 1, 1)) > ordinal:
        year -= 1
    while to_ordinal((year + 1, 1, 1)) <= ordinal:
        year += 1
    remaining = ordinal - to_ordinal((year, 1, 1)) + 1
    month = 1
    while remaining > days_in_month(year, month):
        remaining -= days_in_month(year, month)
        month += 1
    return (year, month, remaining)


def add_days(date, days):
    return from_ordinal(to_ordinal(date) + days)


def days_between(start, end):
    return to_ordinal(end) - to_ordinal(start)


def add_months(date, months):
    year, month, day = date
    index = year * 12 + (month - 1) + months
    year, month = divmod(index, 12)
    month += 1
    return (year, month, min(day, days_in_month(year, month)))


def age_on(birth, today):
    years = today[0] - birth[0]
    if (today[1], today[2]) < (birth[1], birth[2]):
        years -= 1
    return years


def days_left_in_year(date):
    return days_in_year(date[0]) - day_of_year(date)
