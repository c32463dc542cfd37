import pytest

from textkit import common_prefix, hamming, levenshtein
from textkit.distance import closest, similarity, word_frequencies


def test_levenshtein():
    assert levenshtein("kitten", "sitting") == 3
    assert levenshtein("", "abc") == 3
    assert levenshtein("same", "same") == 0


def test_levenshtein_is_symmetric():
    assert levenshtein("ab", "abcd") == levenshtein("abcd", "ab") == 2


def test_hamming():
    assert hamming("karolin", "kathrin") == 3
    with pytest.raises(ValueError):
        hamming("a", "ab")


def test_common_prefix():
    assert common_prefix(["interview", "internet", "interval"]) == "inter"
    assert common_prefix(["abc", "ab"]) == "ab"
    assert common_prefix([]) == ""


def test_similarity():
    assert similarity("", "") == 1.0
    assert similarity("abcd", "abce") == 0.75


def test_closest():
    assert closest("pyton", ["python", "java", "pytorch"]) == "python"
    assert closest("zzz", ["python"]) is None
    assert closest("ab", ["abc", "abd"]) == "abc"


def test_closest_at_the_limit():
    assert closest("abcd", ["ab"]) == "ab"
    assert closest("abcd", ["a"]) is None


def test_word_frequencies():
    text = "The cat, the hat. A cat!"
    assert word_frequencies(text) == [("cat", 2), ("the", 2), ("a", 1), ("hat", 1)]
