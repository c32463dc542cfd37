"""Split INI text into logical lines: section headers and key/value entries."""

from dataclasses import dataclass

from iniconf.errors import ParseError

COMMENT_PREFIXES = ("#", ";")


@dataclass(frozen=True)
class Line:
    kind: str  # "section" or "entry"
    lineno: int
    name: str
    value: str = ""


def tokenize(text):
    """Return the logical lines of `text`; indented lines continue the previous entry."""
    lines = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not stripped or stripped.startswith(COMMENT_PREFIXES):
            continue
        if raw[0] in " \t" and lines and lines[-1].kind == "entry":
            lines[-1] = _continue(lines[-1], stripped)
        elif stripped.startswith("["):
            lines.append(_section(stripped, lineno))
        else:
            lines.append(_entry(stripped, lineno))
    return lines


def _continue(entry, stripped):
    value = "\n".join(part for part in (entry.value, stripped) if part)
    return Line("entry", entry.lineno, entry.name, value)


def _section(stripped, lineno):
    if not stripped.endswith("]"):
        raise ParseError(lineno, f"section header {stripped!r} is missing its closing ']'")
    name = stripped[1:-1].strip()
    if not name:
        raise ParseError(lineno, "empty section name")
    return Line("section", lineno, name)


def _entry(stripped, lineno):
    positions = [p for p in (stripped.find("="), stripped.find(":")) if p >= 0]
    if not positions:
        raise ParseError(lineno, f"expected 'key = value', got {stripped!r}")
    cut = min(positions)
    key = stripped[:cut].strip().lower()
    if not key:
        raise ParseError(lineno, "entry has an empty key")
    value = strip_inline_comment(stripped[cut + 1:].strip())
    return Line("entry", lineno, key, value)


def strip_inline_comment(value):
    """Drop a trailing ' ; comment' or ' # comment'; a '#' inside a word stays."""
    for i, ch in enumerate(value):
        if ch in "#;" and i > 0 and value[i - 1] in " \t":
            return value[:i].rstrip()
    return value
