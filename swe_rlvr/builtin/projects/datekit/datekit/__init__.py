"""datekit: Gregorian calendar arithmetic on (year, month, day) tuples."""

from datekit.calendar import days_in_month, day_of_year, is_leap, weekday
from datekit.arithmetic import add_days, add_months, days_between, from_ordinal, to_ordinal
from datekit.text import format_date, parse_date
from datekit.weeks import business_days, iso_week

__all__ = ["days_in_month", "day_of_year", "is_leap", "weekday", "add_days", "add_months",
           "days_between", "from_ordinal", "to_ordinal", "format_date", "parse_date",
           "business_days", "iso_week"]
