"""Build a Config from INI text."""

from pathlib import Path

from iniconf.config import DEFAULT_SECTION, Config
from iniconf.errors import ParseError
from iniconf.lexer import tokenize


def parse(text):
    sections, defaults = {}, {}
    current = None
    for line in tokenize(text):
        if line.kind == "section":
            current = defaults if line.name == DEFAULT_SECTION else sections.setdefault(line.name, {})
        elif current is None:
            raise ParseError(line.lineno, f"entry {line.name!r} appears before any [section] header")
        else:
            current[line.name] = line.value
    return Config(sections, defaults)


def load(path):
    return parse(Path(path).read_text(encoding="utf-8"))
