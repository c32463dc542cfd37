import pytest

from textkit.template import TemplateError, fields, parse, render, split_field


def test_render():
    assert render("Hello, {name}!", {"name": "Ada"}) == "Hello, Ada!"


def test_render_width_pads():
    assert render("[{n:4}]", {"n": 7}) == "[7   ]"


def test_render_missing_value():
    with pytest.raises(TemplateError, match="no value for 'x'"):
        render("{x}", {})


def test_literal_braces():
    assert render("{{{a}}}", {"a": 1}) == "{1}"
    assert parse("a{{b") == [("text", "a{b")]


def test_parse_parts():
    assert parse("x{a}y") == [("text", "x"), ("field", ("a", 0)), ("text", "y")]


def test_unclosed_and_stray_braces():
    with pytest.raises(TemplateError, match="unclosed field at 2"):
        parse("ab{c")
    with pytest.raises(TemplateError, match="single"):
        parse("a}b")


def test_split_field():
    assert split_field("name:12") == ("name", 12)
    with pytest.raises(TemplateError):
        split_field("2x")


def test_fields_unique_in_order():
    assert fields("{b} {a} {b:3}") == ["b", "a"]
