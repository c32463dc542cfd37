from exprcalc.querystring import build_query, is_hex, parse_query, query_dict, quote, unquote


def test_unquote():
    assert unquote("a%20b+c") == "a b c"
    assert unquote("caf%C3%A9") == "café"


def test_unquote_keeps_bad_escapes():
    assert unquote("100%") == "100%"
    assert unquote("%zz%4") == "%zz%4"
    assert unquote("%41") == "A"


def test_is_hex():
    assert is_hex("4f") and is_hex("A0")
    assert not is_hex("g1") and not is_hex("4")


def test_quote():
    assert quote("a b&c") == "a+b%26c"
    assert quote("café") == "caf%C3%A9"
    assert quote("safe-._~") == "safe-._~"


def test_parse_query():
    assert parse_query("?a=1&b=x+y&flag&&c=") == [("a", "1"), ("b", "x y"), ("flag", ""),
                                                   ("c", "")]


def test_query_dict_repeats():
    assert query_dict("tag=a&tag=b&n=1") == {"tag": ["a", "b"], "n": ["1"]}


def test_build_query_round_trip():
    pairs = [("q", "a&b"), ("page", "2")]
    assert build_query(pairs) == "q=a%26b&page=2"
    assert parse_query(build_query(pairs)) == pairs
