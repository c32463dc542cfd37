import pytest

from iniconf import values


@pytest.mark.parametrize("raw,expected", [("yes", True), ("True", True), ("0", False), ("no", False)])
def test_to_bool(raw, expected):
    assert values.to_bool(raw) is expected


def test_to_bool_rejects_other_words():
    with pytest.raises(ValueError):
        values.to_bool("maybe")


def test_to_int_accepts_underscores_and_hex():
    assert values.to_int("1_000") == 1000
    assert values.to_int("0x1f") == 31


def test_to_list():
    assert values.to_list("a, b,, c") == ["a", "b", "c"]


@pytest.mark.parametrize("raw,expected", [("512", 512), ("10KB", 10240), ("2M", 2 * 1024 ** 2)])
def test_to_size(raw, expected):
    assert values.to_size(raw) == expected


def test_to_seconds_compound():
    assert values.to_seconds("1h30m") == 5400.0
    assert values.to_seconds("2d") == 172800.0


def test_to_seconds_rejects_garbage():
    with pytest.raises(ValueError):
        values.to_seconds("soon")
