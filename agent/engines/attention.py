"""Decode attention for the `hf` engine on CPU: one query token against a growing KV cache.

transformers' `sdpa` attention sends a decode step (one query token per row) to torch's CPU flash
kernel. In bf16 that kernel reads the cache far below the memory's speed: for 8 rows over 1,200
cached tokens of SmolLM2 (9 query heads over 3 KV heads) it took 1.5 ms a layer with the query
heads packed per KV head (transformers does that when a mask is given) and 7 ms without (no
padding: no mask, so transformers asks sdpa for `enable_gqa`), against 0.4 ms for the two batched
matmuls below (`bench/decode_attention.py`). Half of a decode step's time was attention.

`grouped_attention` computes the same softmax(q k^T * scale + mask) v:
- the query heads that share a KV head form one small matrix per (row, KV head), so the cache is
  read once and never repeated per query head;
- both products run over the whole buffers of the engine's growing cache
  (`agent.engines.kvcache.GrowingLayer`: the view it hands over is their first L of C columns,
  `whole_buffers`), masking the C - L spare ones. torch's CPU bmm copies a bf16 operand whose
  batch stride is not rows x columns, so over the views every layer copied its keys and values
  first; under jemalloc (as the CLI runs) a decode step of 32 rows over 1,200 cached tokens took
  449 ms that way and 150 ms over the whole buffers (`bench/decode_attention.py --rows 32`, a
  2-core Xeon with AMX, 2026-11-30). Such a step reads about 1 GB of cache, so it is bound by
  that read;
- the scores are (g, C) per (row, KV head), so the softmax runs over the last dimension, in fp32,
  and its probabilities are cast to the cache's dtype for the product with V (as a flash
  kernel's bf16 path does per block).

Every other call (prefill: more than one query token; dropout; a soft cap) goes to transformers'
`sdpa_attention_forward` unchanged, so training and prefill are not touched. The function is
registered with transformers' `AttentionInterface` under `ATTENTION`, with sdpa's mask function,
and `engine.decode_attention` picks it (auto: on CPU).
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

ATTENTION = "swe_rlvr_grouped"
"""The name `grouped_attention` is registered under (`attn_implementation=ATTENTION`)."""


def grouped_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                      value: torch.Tensor, attention_mask: torch.Tensor | None,
                      dropout: float = 0.0, scaling: float | None = None, **kwargs):
    """transformers' attention signature: query (B, H, q, D), key/value (B, H_kv, L, D), the
    mask (B, 1, q, L) bool (True: attend) or additive float, or None. Returns the output
    (B, q, H, D) and no weights."""
    if query.shape[2] != 1 or dropout or kwargs.get("softcap") is not None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, **kwargs)
    b, heads, _, dim = query.shape
    kv_heads, length = key.shape[1], key.shape[2]
    scale = scaling if scaling is not None else dim ** -0.5
    keys, values = whole_buffers(key, value) or (key, value)           # (B, H_kv, C, D), C >= L
    width = keys.shape[2]
    keep = None if attention_mask is None else attention_mask[:, 0, -1, :]     # (B, L)
    bias = column_bias(keep, b, length, width, query.device)           # (B, 1, 1, C) or None
    out = grouped_decode(query.reshape(b, kv_heads, heads // kv_heads, dim), keys, values, scale,
                         bias)                                          # (B, H_kv, g, D)
    return out.view(b, heads, 1, dim).transpose(1, 2), None              # (B, 1, H, D)


def column_bias(keep: torch.Tensor | None, rows: int, length: int, width: int,
                device: torch.device) -> torch.Tensor | None:
    """What a decode step adds to its scores over a cache buffer of `width` columns whose first
    `length` hold keys: (rows, 1, 1, width) fp32, from `keep` (rows, length) on those columns
    (bool: 0 where True, -inf elsewhere; float: itself, an additive mask; None: 0) and -inf on the
    spare ones. None when there is nothing to add (no mask, no spare column)."""
    if keep is None and width == length:
        return None
    bias = torch.full((rows, width), float("-inf"), device=device)
    if keep is None:
        bias[:, :length] = 0.0
    elif keep.dtype == torch.bool:
        bias[:, :length].masked_fill_(keep, 0.0)
    else:
        bias[:, :length] = keep.float()
    return bias[:, None, None, :]


def grouped_decode(query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, scale: float,
                   bias: torch.Tensor | None) -> torch.Tensor:
    """softmax(q k^T * scale + bias) v for one query token per row: query (B, H_kv, g, D), the
    g query heads of each KV head; keys and values (B, H_kv, C, D), contiguous; bias (B, 1, 1, C)
    fp32, added to the scores (0 where a column is attended, -inf elsewhere), or None. The
    scores are computed in the cache's dtype, scaled and softmaxed in fp32, and the probabilities
    cast back for the product with V. Returns (B, H_kv, g, D)."""
    b, kv_heads, group, dim = query.shape
    width, n = keys.shape[2], b * kv_heads
    scores = torch.bmm(query.reshape(n, group, dim),
                       keys.reshape(n, width, dim).transpose(1, 2))    # (N, g, C)
    scores = scores.float().mul_(scale).view(b, kv_heads, group, width)
    if bias is not None:
        scores = scores.add_(bias)
    probs = torch.softmax(scores, dim=-1).to(values.dtype)              # (B, H_kv, g, C)
    out = torch.bmm(probs.view(n, group, width), values.reshape(n, width, dim))   # (N, g, D)
    return out.view(b, kv_heads, group, dim)


def whole_buffers(key: torch.Tensor, value: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The contiguous (B, H_kv, C, D) buffers whose first L columns `key` and `value` are (as
    `GrowingLayer` hands them), or None when either is laid out otherwise.

    torch's CPU bmm copies a bf16 operand whose batch stride is not rows x columns before it
    multiplies, so over the views a decode step copied the whole cache twice per layer. Over the
    whole buffers the operands are contiguous; the C - L spare columns cost their reads and are
    masked out. They must be finite (0 x NaN is NaN in the product with V): the engine's caches
    zero them (`agent.engines.kvcache`). Under inference mode a view keeps no `_base`, so the
    buffer is found from the strides: a view of a buffer's first columns starts at its storage's
    start, and the storage holds all C columns."""
    found = []
    for view in (key, value):
        b, heads, length, dim = view.shape
        row = view.stride(1)
        if (view.stride(3) != 1 or view.stride(2) != dim or row % dim or row // dim < length
                or view.stride(0) != heads * row or view.storage_offset()
                or view.untyped_storage().nbytes() < b * heads * row * view.element_size()):
            return None
        found.append(view.as_strided((b, heads, row // dim, dim), view.stride()))
    return (found[0], found[1]) if found[0].shape == found[1].shape else None


def register() -> str:
    """Register `grouped_attention` (idempotent); returns its `attn_implementation` name."""
    AttentionInterface.register(ATTENTION, grouped_attention)
    AttentionMaskInterface.register(ATTENTION, sdpa_mask)
    return ATTENTION


def implementation(choice: str, device: torch.device) -> str:
    """`engine.decode_attention` -> the `attn_implementation` to load the model with: auto is the
    grouped kernel on CPU and sdpa elsewhere (CUDA's sdpa kernels read the cache well)."""
    if choice == "grouped" or (choice == "auto" and device.type == "cpu"):
        return register()
    return "sdpa"
