import pytest

from textkit import from_roman, ordinal, to_roman
from textkit.numbers import human_bytes, plural


def test_ordinal():
    assert [ordinal(n) for n in (1, 2, 3, 4)] == ["1st", "2nd", "3rd", "4th"]


def test_ordinal_teens():
    assert [ordinal(n) for n in (11, 12, 13, 20)] == ["11th", "12th", "13th", "20th"]
    assert ordinal(112) == "112th"


def test_ordinal_after_teens():
    assert [ordinal(n) for n in (21, 22, 101, 123)] == ["21st", "22nd", "101st", "123rd"]


def test_to_roman():
    assert to_roman(1994) == "MCMXCIV"
    assert to_roman(3999) == "MMMCMXCIX"
    assert to_roman(4) == "IV"


def test_to_roman_range():
    with pytest.raises(ValueError):
        to_roman(0)
    with pytest.raises(ValueError):
        to_roman(4000)


def test_from_roman():
    assert from_roman("MCMXCIV") == 1994
    assert from_roman("xiv") == 14
    assert from_roman("III") == 3


def test_from_roman_rejects_letters():
    with pytest.raises(ValueError):
        from_roman("XIZ")


def test_plural():
    assert plural(1, "box") == "1 box"
    assert plural(2, "box") == "2 boxes"
    assert plural(3, "city") == "3 cities"
    assert plural(2, "day") == "2 days"
    assert plural(0, "cat") == "0 cats"
    assert plural(2, "child", "children") == "2 children"


def test_human_bytes():
    assert human_bytes(512) == "512 B"
    assert human_bytes(1024) == "1.0 KB"
    assert human_bytes(1536 * 1024) == "1.5 MB"
