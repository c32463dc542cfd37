"""Display width of text in a monospace terminal, and padding/truncation by it."""

import unicodedata

ELLIPSIS = "…"


def char_width(ch):
    if unicodedata.combining(ch):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def display_width(text):
    return sum(char_width(ch) for ch in text)


def pad(text, width, align="left"):
    fill = " " * max(0, width - display_width(text))
    return fill + text if align == "right" else text + fill


def truncate(text, max_width):
    """Cut `text` to at most `max_width` columns, ending in an ellipsis when cut."""
    if display_width(text) <= max_width:
        return text
    out = ""
    for ch in text:
        if display_width(out + ch) > max_width - 1:
            break
        out += ch
    return out + ELLIPSIS
