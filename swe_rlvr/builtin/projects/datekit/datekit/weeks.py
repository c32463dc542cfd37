"""Weeks: ISO week numbers and business days."""

from datekit.arithmetic import add_days, to_ordinal
from datekit.calendar import weekday


def iso_week(date):
    """(ISO year, week): week 1 holds the year's first Thursday."""
    thursday = add_days(date, 3 - weekday(date))
    year = thursday[0]
    first = to_ordinal((year, 1, 1))
    return (year, (to_ordinal(thursday) - first) // 7 + 1)


def week_start(date):
    return add_days(date, -weekday(date))


def is_weekend(date):
    return weekday(date) >= 5


def business_days(start, end):
    """Weekdays from `start` (counted) to `end` (not counted)."""
    if to_ordinal(end) < to_ordinal(start):
        raise ValueError("end must not be before start")
    count = 0
    current = start
    while to_ordinal(current) < to_ordinal(end):
        if not is_weekend(current):
            count += 1
        current = add_days(current, 1)
    return count


def next_weekday(date, target):
    ahead = (target - weekday(date)) % 7
    if ahead == 0:
        ahead = 7
    return add_days(date, ahead)
