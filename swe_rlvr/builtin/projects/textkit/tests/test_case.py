from textkit import camel_to_snake, slugify, snake_to_camel, title_case
from textkit.case import swap_case_words


def test_camel_to_snake():
    assert camel_to_snake("parseHttpResponse") == "parse_http_response"
    assert camel_to_snake("HTTPServer") == "http_server"
    assert camel_to_snake("already_snake") == "already_snake"


def test_camel_to_snake_leading_capital():
    assert camel_to_snake("Value") == "value"


def test_snake_to_camel():
    assert snake_to_camel("parse_http_response") == "parseHttpResponse"
    assert snake_to_camel("user_id", upper_first=True) == "UserId"


def test_snake_to_camel_extra_underscores():
    assert snake_to_camel("__a__b") == "aB"
    assert snake_to_camel("___") == ""


def test_title_case_small_words():
    assert title_case("the lord of the rings") == "The Lord of the Rings"
    assert title_case("what it is for") == "What It Is For"


def test_title_case_lowers_the_rest():
    assert title_case("hELLO wORLD") == "Hello World"


def test_slugify():
    assert slugify("  Hello, World! 2024 ") == "hello-world-2024"
    assert slugify("a--b", separator="_") == "a_b"
    assert slugify("!!!") == ""


def test_swap_case_words():
    assert swap_case_words("a b c d") == "A b C d"
    assert swap_case_words("a b c d", every=3) == "A b c D"
