"""Page-range text such as "1-3,5,8-9": parse to numbers and compress back."""

from exprcalc.errors import ExprError


def parse_ranges(text, limit=None):
    numbers = []
    column = 0
    for part in text.split(","):
        piece = part.strip()
        if not piece:
            raise ExprError("empty range", column)
        low, dash, high = piece.partition("-")
        start = int(low)
        end = int(high) if dash else start
        if end < start:
            raise ExprError(f"range {piece!r} runs backwards", column)
        if limit is not None and end > limit:
            raise ExprError(f"{end} is past the last page {limit}", column)
        numbers.extend(range(start, end + 1))
        column += len(part) + 1
    return sorted(set(numbers))


def compress(numbers):
    spans = []
    for number in sorted(set(numbers)):
        if spans and spans[-1][1] + 1 == number:
            spans[-1][1] = number
        else:
            spans.append([number, number])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def count_pages(text):
    return len(parse_ranges(text))
