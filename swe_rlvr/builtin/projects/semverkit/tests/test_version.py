import pytest

from semverkit import InvalidVersion, Version, parse


def test_parse_full():
    v = parse("1.2.3-rc.1+build.5")
    assert v == Version(1, 2, 3, ("rc", "1"), ("build", "5"))
    assert str(v) == "1.2.3-rc.1+build.5"


@pytest.mark.parametrize("text", ["1.2", "01.2.3", "1.2.3-", "a.b.c", "1.2.3-rc.01"])
def test_parse_rejects(text):
    with pytest.raises(InvalidVersion):
        parse(text)


def test_release_sorts_after_prerelease():
    assert parse("1.0.0-rc.2") < parse("1.0.0")


def test_numeric_parts_compare_numerically():
    assert parse("1.10.0") > parse("1.9.0")


def test_semver_spec_example_order():
    chain = ["1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta",
             "1.0.0-beta.2", "1.0.0-rc.1", "1.0.0"]
    versions = [parse(t) for t in chain]
    assert versions == sorted(versions)


def test_build_metadata_does_not_change_order():
    assert not parse("1.0.0+b") < parse("1.0.0+a")
    assert not parse("1.0.0+a") < parse("1.0.0+b")
