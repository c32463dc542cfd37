"""Per-token log-probs of packed rows, with attention that never crosses segments.

A packed row holds several episodes. Each decoder layer's attention runs causal SDPA separately on
each segment (`segment_attention`, registered with transformers' `AttentionInterface` under
`SEGMENT_ATTENTION`), so its cost is sum(L_i^2), not T^2, and nothing leaks between episodes.
Position ids restart per segment, so RoPE matches an unpacked forward. We do not rely on HF's
position-id packing detection: with `use_cache` left at its default it silently attends across
packed sequences, and with `use_cache=False` it builds a dense T x T mask (7.6x slower here).

The LM head runs only on the positions that predict action tokens, in chunks that are recomputed
in backward, so the (T, vocab) logits are never materialised. Log-probs are at temperature 1.0
(Nebius samples at 1.0 with every filter off); a sampler at another temperature would need the
logits divided by it here.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from trainer.packing import PackedBatch

SEGMENT_ATTENTION = "swe_rlvr_segments"
LM_HEAD_CHUNK = 2048


def segment_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                      segment_bounds=None, **kwargs):
    """Causal SDPA per segment. query (1, H, T, D), key/value (1, Hkv, T, D) -> (1, T, H, D).

    Segments are cut with `split` (its backward is one concatenation; indexing slices would
    materialise a zero-filled T-long gradient per segment and sum them).
    """
    if segment_bounds is None:
        segment_bounds = ((0, query.shape[2]),)
    lengths = [e - s for s, e in segment_bounds]
    gqa = getattr(module, "num_key_value_groups", 1) > 1
    outs = [F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scaling, enable_gqa=gqa)
            .transpose(1, 2)                                       # (1, L_i, H, D)
            for q, k, v in zip(query.split(lengths, 2), key.split(lengths, 2),
                               value.split(lengths, 2))]
    return (torch.cat(outs, dim=1) if len(outs) > 1 else outs[0].contiguous()), None  # (1, T, H, D)


def use_segment_attention(model) -> None:
    """Register `segment_attention` and switch `model` to it (idempotent)."""
    from transformers import AttentionInterface
    AttentionInterface.register(SEGMENT_ATTENTION, segment_attention)
    model.config._attn_implementation = SEGMENT_ATTENTION
    for sub in model.modules():
        if hasattr(sub, "config") and sub.config is not model.config:
            sub.config._attn_implementation = SEGMENT_ATTENTION


def _head_chunk(hidden: torch.Tensor, head: torch.nn.Module, targets: torch.Tensor):
    """(C, D) hidden, LM head D -> V, (C,) targets -> (C,) log-probs, (C,) entropy (no grad)."""
    logits = head(hidden).float()                                  # (C, V)
    logz = torch.logsumexp(logits, dim=-1)                         # (C,)
    logp = logits.gather(-1, targets[:, None]).squeeze(-1) - logz  # (C,)
    with torch.no_grad():
        probs = torch.softmax(logits, dim=-1)                      # (C, V)
        entropy = logz - (probs * logits).sum(-1)                  # (C,)
    return logp, entropy


def head_logprobs(hidden: torch.Tensor, head: torch.nn.Module, targets: torch.Tensor,
                  chunk: int = LM_HEAD_CHUNK) -> tuple[torch.Tensor, torch.Tensor]:
    """(A, D) hidden states, (A,) next tokens -> (A,) log-probs and (A,) entropies, chunked.

    The head is called as a module (not through its weight) so ZeRO-3 can gather it.
    """
    if hidden.shape[0] <= chunk:
        return _head_chunk(hidden, head, targets)
    parts = [checkpoint(_head_chunk, hidden[i:i + chunk], head, targets[i:i + chunk],
                        use_reentrant=False) for i in range(0, hidden.shape[0], chunk)]
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])  # (A,), (A,)


def hidden_states(model, batch: PackedBatch) -> torch.Tensor:
    """Last hidden states (T, D) of one packed row, segments isolated."""
    device = next(model.parameters()).device
    bounds = tuple(zip(batch.cu_seqlens[:-1].tolist(), batch.cu_seqlens[1:].tolist()))
    out = model.base_model(input_ids=batch.input_ids[None].to(device),
                           position_ids=batch.position_ids[None].to(device),
                           use_cache=False, segment_bounds=bounds)
    return out.last_hidden_state[0]                                # (T, D)


def packed_logprobs(model, batch: PackedBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """(T,) log pi(token_t | segment prefix) on action tokens (0 elsewhere), and (T,) entropy."""
    hidden = hidden_states(model, batch)                           # (T, D)
    device = hidden.device
    idx = batch.loss_mask.nonzero().squeeze(-1).to(device)         # (A,) action positions, all >= 1
    targets = batch.input_ids.to(device)[idx]                      # (A,)
    head = model.get_output_embeddings()                           # D -> V
    logp_a, ent_a = head_logprobs(hidden[idx - 1], head, targets)  # (A,), (A,)
    logp = torch.zeros(batch.num_tokens, device=device, dtype=logp_a.dtype).index_put((idx,), logp_a)
    ent = torch.zeros(batch.num_tokens, device=device, dtype=ent_a.dtype).index_put((idx,), ent_a)
    return logp, ent                                               # (T,), (T,)
