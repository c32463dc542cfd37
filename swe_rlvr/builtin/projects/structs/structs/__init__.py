"""structs: small classic data structures."""

from structs.heap import MinHeap
from structs.intervals import IntervalSet
from structs.lru import LRUCache
from structs.ringbuffer import RingBuffer
from structs.search import bisect_left, bisect_right, find
from structs.trie import Trie

__all__ = ["MinHeap", "IntervalSet", "LRUCache", "RingBuffer", "bisect_left", "bisect_right",
           "find", "Trie"]
