"""Split expression text into (kind, text, column) tokens."""

from exprcalc.errors import ExprError

OPERATORS = ("**", "//", "+", "-", "*", "/", "%", "(", ")", ",")


def tokenize(text):
    tokens = []
    pos = 0
    while pos < len(text):
        char = text[pos]
        if char.isspace():
            pos += 1
        elif char.isdigit() or char == "." and next_is_digit(text, pos):
            end = scan_number(text, pos)
            tokens.append(("num", text[pos:end], pos))
            pos = end
        elif char.isalpha() or char == "_":
            end = scan_name(text, pos)
            tokens.append(("name", text[pos:end], pos))
            pos = end
        else:
            op = match_operator(text, pos)
            if op is None:
                raise ExprError(f"unexpected character {char!r}", pos)
            tokens.append(("op", op, pos))
            pos += len(op)
    return tokens


def next_is_digit(text, pos):
    return pos + 1 < len(text) and text[pos + 1].isdigit()


def scan_number(text, pos):
    end = pos
    seen_dot = False
    while end < len(text) and (text[end].isdigit() or text[end] == "." and not seen_dot):
        if text[end] == ".":
            seen_dot = True
        end += 1
    if end < len(text) and text[end] in "eE":
        exp = end + 1
        if exp < len(text) and text[exp] in "+-":
            exp += 1
        if exp < len(text) and text[exp].isdigit():
            end = exp
            while end < len(text) and text[end].isdigit():
                end += 1
    return end


def scan_name(text, pos):
    end = pos + 1
    while end < len(text) and (text[end].isalnum() or text[end] == "_"):
        end += 1
    return end


def match_operator(text, pos):
    for op in OPERATORS:
        if text[pos:pos + len(op)] == op:
            return op
    return None


def number_value(text):
    if "." in text or "e" in text or "E" in text:
        return float(text)
    return int(text)
