import pytest

from textkit import center, justify, truncate, wrap
from textkit.layout import dedent, indent


def test_wrap():
    assert wrap("the quick brown fox jumps", 10) == ["the quick", "brown fox", "jumps"]


def test_wrap_exact_fit():
    assert wrap("ab cd ef", 5) == ["ab cd", "ef"]


def test_wrap_long_word_alone():
    assert wrap("a extraordinary b", 5) == ["a", "extraordinary", "b"]


def test_wrap_empty_and_bad_width():
    assert wrap("   ", 4) == []
    with pytest.raises(ValueError):
        wrap("x", 0)


def test_justify_spreads_extra_spaces_left_first():
    assert justify("a b c", 7) == "a  b  c"
    assert justify("a b c", 8) == "a   b  c"


def test_justify_single_word_and_overfull():
    assert justify("word", 6) == "word  "
    assert justify("aa bb", 3) == "aa bb"


def test_center():
    assert center("ab", 6) == "  ab  "
    assert center("ab", 5, "*") == "*ab**"
    assert center("abcdef", 3) == "abcdef"


def test_truncate():
    assert truncate("Hello, world", 8) == "Hello..."
    assert truncate("short", 5) == "short"


def test_truncate_tiny_width():
    assert truncate("Hello", 2) == ".."
    assert truncate("Hello", 4, ellipsis="~") == "Hel~"


def test_indent_skips_blank_lines():
    assert indent("a\n\nb", "> ") == "> a\n\n> b"
    assert indent("a\n", "-", skip_blank=False) == "-a\n-"


def test_dedent():
    assert dedent("    a\n      b\n\n    c") == "a\n  b\n\nc"
    assert dedent("") == ""
