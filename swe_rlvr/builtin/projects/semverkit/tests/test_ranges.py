import pytest

from semverkit import satisfies


CASES = [
    ("1.4.0", "^1.2.0", True),
    ("2.0.0", "^1.2.0", False),
    ("0.2.5", "^0.2.3", True),
    ("0.3.0", "^0.2.3", False),
    ("1.2.9", "~1.2.3", True),
    ("1.3.0", "~1.2.3", False),
    ("1.2.7", "1.2.x", True),
    ("1.3.0", "1.2", False),
    ("5.0.0", "*", True),
    ("1.5.0", ">=1.2.0 <2.0.0", True),
    ("2.0.0", ">=1.2.0 <2.0.0", False),
    ("3.1.0", "^1.0.0 || ^3.0.0", True),
    ("1.2.3", "1.2.3", True),
    ("1.2.4", "=1.2.3", False),
    ("1.2.5", "1.2.3 - 1.3", True),
]


@pytest.mark.parametrize("version,range_text,expected", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_satisfies(version, range_text, expected):
    assert satisfies(version, range_text) is expected


def test_prerelease_only_matches_same_release():
    assert satisfies("1.2.3-beta.4", "^1.2.3-beta.2")
    assert satisfies("1.2.3", "^1.2.3-beta.2")


def test_whitespace_after_operator():
    assert satisfies("1.5.0", ">= 1.2.0 < 2.0.0")
