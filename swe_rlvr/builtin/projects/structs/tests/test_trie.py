from structs import Trie


def test_contains_whole_words_only():
    words = Trie(["car", "card"])
    assert "car" in words and "card" in words
    assert "ca" not in words and "cards" not in words


def test_len_counts_distinct_words():
    assert len(Trie(["a", "ab", "a"])) == 2


def test_with_prefix_sorted():
    assert Trie(["cat", "card", "car", "dog"]).with_prefix("car") == ["car", "card"]
    assert Trie(["cat"]).with_prefix("x") == []


def test_with_empty_prefix_lists_everything():
    assert Trie(["b", "a"]).with_prefix("") == ["a", "b"]


def test_longest_prefix_of():
    words = Trie(["in", "inter", "internet"])
    assert words.longest_prefix_of("internal") == "inter"
    assert words.longest_prefix_of("xyz") == ""
    assert words.longest_prefix_of("internet!") == "internet"
