import pytest

from structs import LRUCache


def test_evicts_least_recently_used():
    cache = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.get("a")
    cache.put("c", 3)
    assert "b" not in cache and "a" in cache and "c" in cache


def test_put_existing_key_updates_without_eviction():
    cache = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.put("a", 10)
    assert len(cache) == 2 and cache.get("a") == 10 and cache.get("b") == 2


def test_get_default_and_counts():
    cache = LRUCache(1)
    assert cache.get("x", 0) == 0
    cache.put("x", 5)
    assert cache.get("x") == 5
    assert (cache.hits, cache.misses) == (1, 1)


def test_hit_rate():
    cache = LRUCache(2)
    assert cache.hit_rate() == 0.0
    cache.put("k", 1)
    cache.get("k")
    cache.get("k")
    cache.get("z")
    assert cache.hit_rate() == pytest.approx(2 / 3)


def test_keys_by_recency():
    cache = LRUCache(3)
    for key in "abc":
        cache.put(key, key)
    cache.get("a")
    assert cache.keys_by_recency() == ["a", "c", "b"]


def test_capacity_must_be_positive():
    with pytest.raises(ValueError):
        LRUCache(0)
