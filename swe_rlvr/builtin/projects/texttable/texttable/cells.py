"""Cell values: inference from CSV text, CSV text, and display text."""


def infer(text):
    """'42' -> 42, '4.5' -> 4.5, 'TRUE' -> True, '' -> None, '007' -> '007', else the text."""
    stripped = text.strip()
    if not stripped:
        return None
    lowered = stripped.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if len(stripped) > 1 and stripped.startswith("0") and stripped[1].isdigit():
        return stripped
    for convert in (int, float):
        try:
            return convert(stripped)
        except ValueError:
            pass
    return stripped


def to_text(value):
    """The CSV form of a value, which `infer` reads back to the same value."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def format_cell(value, precision=None):
    """Display text: floats with `precision` decimals when given, None as empty."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float) and precision is not None:
        return f"{value:.{precision}f}"
    return str(value)


def is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)
