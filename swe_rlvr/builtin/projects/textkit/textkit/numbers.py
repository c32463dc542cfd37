"""Numbers as words: ordinals and Roman numerals."""

ROMAN = [(1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"), (50, "L"),
         (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")]
ROMAN_VALUES = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}


def ordinal(n):
    if 10 <= n % 100 <= 20:
        suffix = "th"
    else:
        suffix = {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def to_roman(n):
    if not 0 < n < 4000:
        raise ValueError("Roman numerals cover 1..3999")
    out = []
    for value, letters in ROMAN:
        while n >= value:
            out.append(letters)
            n -= value
    return "".join(out)


def from_roman(text):
    total = 0
    previous = 0
    for char in reversed(text.upper()):
        if char not in ROMAN_VALUES:
            raise ValueError(f"not a Roman numeral: {text!r}")
        value = ROMAN_VALUES[char]
        if value < previous:
            total -= value
        else:
            total += value
            previous = value
    return total


def plural(count, singular, plural_form=None):
    if count == 1:
        return f"{count} {singular}"
    if plural_form is None:
        if singular.endswith(("s", "x", "ch", "sh")):
            plural_form = singular + "es"
        elif singular.endswith("y") and singular[-2:-1] not in "aeiou":
            plural_form = singular[:-1] + "ies"
        else:
            plural_form = singular + "s"
    return f"{count} {plural_form}"


def human_bytes(size):
    units = ["B", "KB", "MB", "GB", "TB"]
    index = 0
    while size >= 1024 and index < len(units) - 1:
        size /= 1024
        index += 1
    if index == 0:
        return f"{size} B"
    return f"{size:.1f} {units[index]}"
