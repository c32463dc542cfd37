"""Conversions from raw option strings to Python values."""

import re

TRUE_WORDS = {"1", "yes", "true", "on"}
FALSE_WORDS = {"0", "no", "false", "off"}
SIZE_UNITS = {"": 1, "B": 1, "K": 1024, "KB": 1024, "M": 1024 ** 2, "MB": 1024 ** 2,
              "G": 1024 ** 3, "GB": 1024 ** 3}
DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*")
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)([smhd])")


def to_bool(raw):
    lowered = raw.strip().lower()
    if lowered in TRUE_WORDS:
        return True
    if lowered in FALSE_WORDS:
        return False
    raise ValueError(f"not a boolean: {raw!r}")


def to_int(raw):
    text = raw.strip().replace("_", "")
    if text.lower().startswith(("0x", "-0x")):
        return int(text, 16)
    return int(text)


def to_list(raw, sep=","):
    """'a, b,, c' -> ['a', 'b', 'c']; line breaks separate items too."""
    items = raw.replace("\n", sep).split(sep)
    return [item.strip() for item in items if item.strip()]


def to_size(raw):
    """'512' -> 512, '10KB' -> 10240, '1.5M' -> 1572864 (binary units)."""
    match = _SIZE.fullmatch(raw)
    unit = match.group(2).upper() if match else None
    if unit not in SIZE_UNITS:
        raise ValueError(f"not a size: {raw!r}")
    return int(float(match.group(1)) * SIZE_UNITS[unit])


def to_seconds(raw):
    """'90' -> 90.0, '1m30s' -> 90.0, '2h' -> 7200.0."""
    text = raw.strip().lower()
    if re.fullmatch(r"\d+(?:\.\d+)?", text):
        return float(text)
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a duration: {raw!r}")
    return float(sum(float(n) * DURATION_UNITS[u] for n, u in parts))
