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
- the scores are computed as K q^T, (L, g) per (row, KV head): the cache is the left operand, so
  torch's CPU bmm takes it as the strided view of the engine's growing buffer
  (`agent.engines.kvcache.GrowingLayer`) that it is. As the right operand it is copied first
  (1 ms a layer);
- the softmax runs in fp32, and its probabilities are cast to the cache's dtype for the product
  with V (as a flash kernel's bf16 path does per block).

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
    group = heads // kv_heads
    scale = scaling if scaling is not None else dim ** -0.5
    keys = key.reshape(b * kv_heads, length, dim)                       # (N, L, D), a view
    values = value.reshape(b * kv_heads, length, dim)                   # (N, L, D)
    q = query.reshape(b * kv_heads, group, dim).transpose(1, 2)         # (N, D, g)
    scores = torch.bmm(keys, q).float().mul_(scale)                      # (N, L, g)
    scores = scores.view(b, kv_heads, length, group)
    if attention_mask is not None:
        mask = attention_mask[:, :, -1, :, None]                        # (B, 1, L, 1)
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, float("-inf"))
        else:
            scores = scores + mask.float()
    probs = torch.softmax(scores, dim=2).to(values.dtype)               # (B, H_kv, L, g)
    out = torch.bmm(probs.view(b * kv_heads, length, group).transpose(1, 2), values)  # (N, g, D)
    return out.view(b, heads, 1, dim).transpose(1, 2), None              # (B, 1, H, D)


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
