from semverkit import max_satisfying, min_satisfying, sort_versions, unique_versions


def test_sort_versions():
    assert sort_versions(["1.10.0", "1.2.0", "1.2.0-beta"]) == ["1.2.0-beta", "1.2.0", "1.10.0"]


def test_sort_versions_reverse_keeps_strings():
    assert sort_versions(["1.0.0", "2.0.0+x"], reverse=True) == ["2.0.0+x", "1.0.0"]


def test_max_and_min_satisfying():
    versions = ["1.2.0", "1.9.9", "2.0.0", "0.9.0"]
    assert max_satisfying(versions, "~1.2 || ^1.9") == "1.9.9"
    assert min_satisfying(versions, "^1.0.0") == "1.2.0"


def test_max_satisfying_none():
    assert max_satisfying(["1.0.0"], ">=2") is None


def test_unique_versions():
    assert unique_versions(["1.0.0", "1.1.0", "1.0.0"]) == ["1.0.0", "1.1.0"]
