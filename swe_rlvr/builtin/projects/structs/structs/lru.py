"""A least-recently-used cache on an insertion-ordered dict."""


class LRUCache:
    def __init__(self, capacity):
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self.entries = {}
        self.hits = 0
        self.misses = 0

    def get(self, key, default=None):
        if key not in self.entries:
            self.misses += 1
            return default
        self.hits += 1
        value = self.entries.pop(key)
        self.entries[key] = value
        return value

    def put(self, key, value):
        if key in self.entries:
            self.entries.pop(key)
        elif len(self.entries) >= self.capacity:
            oldest = next(iter(self.entries))
            del self.entries[oldest]
        self.entries[key] = value

    def __contains__(self, key):
        return key in self.entries

    def __len__(self):
        return len(self.entries)

    def hit_rate(self):
        lookups = self.hits + self.misses
        if lookups == 0:
            return 0.0
        return self.hits / lookups

    def keys_by_recency(self):
        return list(reversed(self.entries))
