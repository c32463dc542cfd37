"""Reading and writing dates as text."""

from datekit.calendar import is_valid

MONTH_NAMES = ("January", "February", "March", "April", "May", "June", "July", "August",
               "September", "October", "November", "December")


def parse_date(text):
    parts = text.strip().split("-")
    if len(parts) != 3 or [len(p) for p in parts] != [4, 2, 2]:
        raise ValueError(f"expected YYYY-MM-DD, got {text!r}")
    if not all(p.isdigit() for p in parts):
        raise ValueError(f"expected digits in {text!r}")
    date = (int(parts[0]), int(parts[1]), int(parts[2]))
    if not is_valid(date):
        raise ValueError(f"no such date: {text!r}")
    return date


def format_date(date, style="iso"):
    year, month, day = date
    if style == "iso":
        return f"{year:04d}-{month:02d}-{day:02d}"
    if style == "long":
        return f"{day} {MONTH_NAMES[month - 1]} {year}"
    raise ValueError(f"unknown style {style!r}; choose iso or long")


def month_from_name(name):
    prefix = name.strip().lower()[:3]
    for index, month in enumerate(MONTH_NAMES):
        if month.lower().startswith(prefix) and len(prefix) == 3:
            return index + 1
    raise ValueError(f"unknown month {name!r}")
