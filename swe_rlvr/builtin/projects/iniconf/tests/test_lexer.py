import pytest

from iniconf.errors import ParseError
from iniconf.lexer import strip_inline_comment, tokenize


def test_sections_and_entries():
    lines = tokenize("[a]\nx = 1\ny: 2\n")
    assert [(l.kind, l.name, l.value) for l in lines] == [
        ("section", "a", ""), ("entry", "x", "1"), ("entry", "y", "2")]


def test_comments_and_blank_lines_are_skipped():
    lines = tokenize("# top\n\n[a]\n; note\nx = 1\n")
    assert [l.name for l in lines] == ["a", "x"]


def test_keys_are_lower_cased():
    assert tokenize("[a]\nMaxSize = 3\n")[1].name == "maxsize"


def test_inline_comment_needs_whitespace():
    assert strip_inline_comment("8080 ; port") == "8080"
    assert strip_inline_comment("#fff") == "#fff"


def test_missing_bracket_raises():
    with pytest.raises(ParseError):
        tokenize("[a\nx = 1\n")


def test_entry_without_separator_raises():
    with pytest.raises(ParseError):
        tokenize("[a]\njust words\n")
