import pytest

from semverkit import bump, parse


@pytest.mark.parametrize("start,part,expected", [
    ("1.2.3", "major", "2.0.0"),
    ("1.2.3", "minor", "1.3.0"),
    ("1.2.3", "patch", "1.2.4"),
    ("1.2.3", "prerelease", "1.2.4-rc.0"),
    ("1.2.4-rc.0", "prerelease", "1.2.4-rc.1"),
    ("1.2.4-beta", "prerelease", "1.2.4-beta.0"),
    ("2.0.0-rc.1", "major", "2.0.0"),
])
def test_bump(start, part, expected):
    assert str(bump(start, part)) == expected


def test_bump_drops_build_metadata():
    assert str(bump("1.2.3+abc", "patch")) == "1.2.4"


def test_unknown_part():
    with pytest.raises(ValueError):
        bump(parse("1.0.0"), "micro")
