"""KV caches of the `hf` engine: one that grows in place, and a prefix cache across turns.

`growing_cache` is transformers' DynamicCache with layers that append into preallocated buffers
(capacity doubling) instead of concatenating: a DynamicLayer copies its whole cache at every
decoding step, which for a batch of long multi-turn contexts moves gigabytes per token on a CPU.
A buffer's spare columns (beyond the cache's length) are zero, never uninitialised memory: the
decode attention multiplies over whole buffers and masks them (`agent.engines.attention`), and
garbage could hold NaN.

The prefix cache carries each episode's KV cache from one turn to the next.

An episode's prompt at turn t+1 is, token for token, its prompt at turn t, the reply sampled there
and the new observation (the agent's token-in/token-out property). Running the model over the
whole context at every turn costs a prefill of all of it; with this cache only the new tokens run.
After a generation, each row's keys and values (prompt and sampled tokens fed back) are stored
under their token ids; a later prompt that starts with those ids continues from them. An entry
serves once (its continuation stores a longer one), a finished episode's last one is discarded
when the episode ends (`discard`), and the oldest are dropped once the entries hold more than
`budget_bytes` (`engine.prefix_cache_gb`).

Simplifications: entries are whole per-row tensors (no paging, no sharing of common prefixes
between episodes); a continuation's logits can differ from a full prefill's by float rounding
(another reduction order), so a sampled token can differ at a near-tie.
"""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer

RowKV = list[tuple[torch.Tensor, torch.Tensor]]
"""Per decoder layer, (keys, values) of one sequence, each (1, H_kv, L, D)."""


class PrefixCache:
    """Stored per-row KV caches keyed by the token ids they cover; thread-safe."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = budget_bytes
        self._entries: OrderedDict[int, tuple[tuple[int, ...], RowKV]] = OrderedDict()
        self._keys = itertools.count()
        self._lock = threading.Lock()
        self.bytes = 0
        self.hits = self.misses = self.reused_tokens = 0

    def __len__(self) -> int:
        return len(self._entries)

    def take(self, prompt: list[int]) -> tuple[int, RowKV | None]:
        """Remove and return (n, kv) of the longest entry whose ids are a proper prefix of
        `prompt` (at least one token must be left to run); (0, None) when none is."""
        with self._lock:
            best_key, best_n = None, 0
            for key, (ids, _) in self._entries.items():
                n = len(ids)
                if best_n < n < len(prompt) and tuple(prompt[:n]) == ids:
                    best_key, best_n = key, n
            if best_key is None:
                self.misses += 1
                return 0, None
            _, kv = self._entries.pop(best_key)
            self.bytes -= nbytes(kv)
            self.hits += 1
            self.reused_tokens += best_n
            return best_n, kv

    def discard(self, ids: list[int]) -> int:
        """Drop every entry whose ids are a prefix of `ids` (a finished episode's: nothing will
        continue them); returns the bytes freed."""
        with self._lock:
            dead = [key for key, (prefix, _) in self._entries.items()
                    if len(prefix) <= len(ids) and tuple(ids[:len(prefix)]) == prefix]
            freed = sum(nbytes(self._entries.pop(key)[1]) for key in dead)
            self.bytes -= freed
            return freed

    def put(self, ids: list[int], kv: RowKV) -> None:
        """Store `kv` (covering exactly `ids`), dropping the oldest entries beyond the budget."""
        with self._lock:
            self._entries[next(self._keys)] = (tuple(ids), kv)
            self.bytes += nbytes(kv)
            while self.bytes > self.budget_bytes and self._entries:
                _, (_, old) = self._entries.popitem(last=False)
                self.bytes -= nbytes(old)


def nbytes(kv: RowKV) -> int:
    return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in kv)


def batch_cache(config, rows: list[RowKV], reserve: int = 64) -> tuple[DynamicCache, list[int]]:
    """Per-row caches of lengths L_i -> one growing batch cache (B, H_kv, max L, D) per layer, each
    row left-padded with zeros, with room for `reserve` more columns, and each row's pad width.
    The rows are copied once, straight into the new buffers, so they may be views of another
    batch's cache."""
    lengths = [row[0][0].shape[2] for row in rows]
    width = max(lengths)
    pads = [width - n for n in lengths]
    cache = growing_cache(config)
    if not compactable(cache):
        raise ValueError(f"The hf engine batches continuously over plain KV caches, and "
                         f"{type(config).__name__} uses sliding-window layers; serve this model "
                         f"with engine.name=vllm-server.")
    for index, layer in enumerate(cache.layers):
        first = rows[0][index][0]
        shape = (len(rows), first.shape[1], width + reserve, first.shape[3])
        kbuf = first.new_zeros(shape)
        vbuf = first.new_zeros(shape)
        for b, (row, pad) in enumerate(zip(rows, pads)):
            kbuf[b, :, pad:width] = row[index][0][0]
            vbuf[b, :, pad:width] = row[index][1][0]
        layer.adopt(kbuf, vbuf, width)
    return cache, pads


def row_view(batch: RowKV, row: int, start: int, stop: int) -> RowKV:
    """Row `row`'s positions [start, stop) of a batch cache, as views."""
    return [(k[row:row + 1, :, start:stop], v[row:row + 1, :, start:stop]) for k, v in batch]


def row_slice(batch: RowKV, row: int, start: int, stop: int) -> RowKV:
    """`row_view`, copied (a view would keep the whole batch's memory alive while the entry
    waits in the prefix cache)."""
    return [(k.clone(), v.clone()) for k, v in row_view(batch, row, start, stop)]


class GrowingLayer(DynamicLayer):
    """A DynamicLayer whose `update` writes into buffers with spare room (amortised O(new))."""

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
            self._used, self._kbuf, self._vbuf = 0, None, None
        n = key_states.shape[-2]
        self._grow(self._used + n, key_states, value_states)
        self._kbuf[:, :, self._used:self._used + n] = key_states          # (B, H_kv, n, D)
        self._vbuf[:, :, self._used:self._used + n] = value_states
        self.advance(n)
        return self.keys, self.values

    def reserve(self, n: int) -> None:
        """Room in the buffers for `n` more columns, which the caller writes itself
        (`agent.engines.lean`), then `advance`s over."""
        self._grow(self._used + n, self._kbuf, self._vbuf)

    def advance(self, n: int) -> None:
        """The buffers' next `n` columns are written: the cache now covers them."""
        self._used += n
        self.keys, self.values = self._kbuf[:, :, :self._used], self._vbuf[:, :, :self._used]

    def _grow(self, end: int, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Buffers of at least `end` columns (capacity doubling), shaped and typed as `keys` and
        `values`."""
        if self._kbuf is None or end > self._kbuf.shape[-2]:
            capacity = end + 64 if self._kbuf is None else max(2 * end, end + 64)
            self._kbuf = _regrow(self._kbuf, keys, self._used, capacity)
            self._vbuf = _regrow(self._vbuf, values, self._used, capacity)

    def adopt(self, kbuf: torch.Tensor, vbuf: torch.Tensor, used: int) -> None:
        """Take `kbuf`/`vbuf` (B, H_kv, capacity, D), whose first `used` columns hold the cache."""
        self.lazy_initialization(kbuf, vbuf)
        self._used, self._kbuf, self._vbuf = used, kbuf, vbuf
        self.keys, self.values = kbuf[:, :, :used], vbuf[:, :, :used]


def compactable(cache: DynamicCache) -> bool:
    """Can `keep_rows` drop rows of `cache` (every layer a GrowingLayer)?"""
    return all(isinstance(layer, GrowingLayer) for layer in cache.layers)


def keep_rows(cache: DynamicCache, index: torch.Tensor) -> None:
    """Keep only the batch rows `index` (r,) of every layer of `cache`, in place (a copy of
    their used columns)."""
    def rows_of(buf: torch.Tensor, used: int) -> torch.Tensor:
        out = buf.new_empty((len(index), *buf.shape[1:]))                      # (r, H_kv, cap, D)
        out[:, :, :used] = buf[index, :, :used]
        out[:, :, used:] = 0                                   # spare columns stay finite
        return out

    for layer in cache.layers:
        used = layer._used
        layer._kbuf, layer._vbuf = rows_of(layer._kbuf, used), rows_of(layer._vbuf, used)
        layer.keys, layer.values = layer._kbuf[:, :, :used], layer._vbuf[:, :, :used]


def _regrow(buf: torch.Tensor | None, like: torch.Tensor, used: int, capacity: int) -> torch.Tensor:
    """A (B, H_kv, capacity, D) buffer holding the first `used` positions of `buf`."""
    shape = (*like.shape[:-2], capacity, like.shape[-1])
    out = torch.empty(shape, dtype=like.dtype, device=like.device)
    if buf is not None and used:
        out[:, :, :used] = buf[:, :, :used]
    out[:, :, used:] = 0                                       # spare columns stay finite
    return out


def growing_cache(config, layers: RowKV = ()) -> DynamicCache:
    """A DynamicCache for `config` with growing layers, holding `layers` ((keys, values) each)."""
    cache = DynamicCache(config=config)
    if all(type(layer) is DynamicLayer for layer in cache.layers):   # not sliding-window layers
        cache.layers = [GrowingLayer() for _ in cache.layers]
    for index, (keys, values) in enumerate(layers):
        cache.update(keys, values, index)
    return cache
