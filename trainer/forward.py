"""Per-token log-probs of packed rows, with attention that never crosses segments.

A packed row holds several episodes. Each decoder layer's attention is causal within each segment
only (`segment_attention`, registered with transformers' `AttentionInterface` under
`SEGMENT_ATTENTION`), so its cost is sum(L_i^2), not T^2, and nothing leaks between episodes. On
CUDA with bf16/fp16 activations one varlen flash-attention call covers the whole row
(`torch.nn.attention.varlen`, torch >= 2.10); elsewhere each segment runs on its own, through
causal SDPA or, where `trainer.attention` picks it (auto: on the CPU), `trainer.blockwise`
(registered as `BLOCKWISE_ATTENTION`).
Position ids restart per segment, so RoPE matches an unpacked forward. We do not rely on HF's
position-id packing detection: with `use_cache` left at its default it silently attends across
packed sequences, and with `use_cache=False` it builds a dense T x T mask (7.6x slower here).

The LM head runs only on the positions that predict action tokens. When their logits exceed
`LOGITS_BUDGET` elements, it runs in chunks that are recomputed in backward, so the (T, vocab)
logits are never materialised; below it (a small vocabulary, or few actions) nothing is recomputed.

`compile_layers` compiles each decoder layer (`trainer.compile`); segment attention is a compile
boundary (`torch.compiler.disable`), because its per-segment loop would specialise on every set of
segment lengths. Log-probs are at temperature 1.0 (Nebius samples at 1.0 with every filter off);
a sampler at another temperature would need the logits divided by it here.
"""

from __future__ import annotations

import functools
import inspect
from typing import get_args

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from swe_rlvr.config_choices import TrainAttention
from trainer.blockwise import blockwise_causal
from trainer.packing import PackedBatch

SEGMENT_ATTENTION = "swe_rlvr_segments"
BLOCKWISE_ATTENTION = "swe_rlvr_segments_blockwise"
LOGITS_BUDGET = 1 << 23
"""fp32 logits one LM-head chunk may hold (32 MiB): 170 rows at SmolLM2's 49,152 vocabulary, 55 at
Qwen2's 151,936. A chunk holds several such buffers at once (bf16 and fp32 logits, softmax, their
gradients), and they were the peak of an update on CPU: a 19,286-token DAPO update of the
quickstart peaked at 3,794 MiB with 128 MiB chunks and at 3,300 MiB with these. Recomputing
chunks in backward costs one more LM-head forward per action token (about 7% of a 135M model's
update), whatever the chunk's size."""

SEGMENT_ALIGN = 64
"""CPU segment lengths are padded to a multiple of this. torch's CPU flash attention builds (and
keeps, for the life of the process) kernels for each tail block size it meets: every distinct
segment length added ~5 MB that was never freed, ~0.3 GB over the quickstart's warm-up, while
lengths in steps of 64 reuse a handful of kernels. The pad costs ~3% of attention on ~900-token
segments."""

USE_VARLEN = True
"""Use varlen flash attention where it applies (a switch for A/B benchmarks and tests)."""


@functools.cache
def varlen_kernel():
    """(varlen_attn, the names of its parameters), or None where this torch has none."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    return varlen_attn, frozenset(inspect.signature(varlen_attn).parameters)


def _varlen_args(names: frozenset, groups: int, scaling, head_dim: int) -> dict | None:
    """Keyword arguments for causal GQA varlen attention across its API versions, or None when
    this version cannot express the call (then the per-segment loop runs)."""
    args: dict = {}
    if "is_causal" in names:                                       # torch 2.10-2.11
        args["is_causal"] = True
    elif "window_size" in names:                                   # torch >= 2.12: causal window
        args["window_size"] = (-1, 0)
    else:
        return None
    if scaling is not None and abs(scaling - head_dim ** -0.5) > 1e-12:
        if "scale" not in names:
            return None
        args["scale"] = scaling
    if groups > 1 and "enable_gqa" in names:
        args["enable_gqa"] = True
    return args


def _varlen_attention(query, key, value, scaling, segment_cu, max_len):
    """One varlen flash call over the row, or None when it does not apply here."""
    found = varlen_kernel()
    if not (USE_VARLEN and found and query.is_cuda and query.dtype in (torch.bfloat16, torch.float16)
            and segment_cu is not None):
        return None
    kernel, names = found
    groups = query.shape[1] // key.shape[1]
    args = _varlen_args(names, groups, scaling, query.shape[-1])
    if args is None:
        return None
    q, k, v = (x[0].transpose(0, 1) for x in (query, key, value))  # (T, H, D), (T, Hkv, D)
    if groups > 1 and "enable_gqa" not in args:
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)  # (T, H, D)
    out = kernel(q, k, v, segment_cu, segment_cu, max_len, max_len, **args)  # (T, H, D)
    return out[None]                                               # (1, T, H, D)


def segment_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                      segment_cu=None, segment_cu_device=None, attn_index=None, out_index=None,
                      blockwise=False, **kwargs):
    """Causal attention per segment. query (1, H, T, D), key/value (1, Hkv, T, D) -> (1, T, H, D).

    `segment_cu` (S + 1,) holds the segment bounds on the CPU (None: one segment). They arrive
    as tensors, not Python ints, so a compiled layer does not specialise (and recompile) on each
    row's lengths. `segment_cu_device`, the same on CUDA, enables the varlen kernel; otherwise
    SDPA runs per segment, cut with `split` (its backward is one concatenation; indexing slices
    would materialise a zero-filled T-long gradient per segment and sum them).

    With shared prefixes (`trainer.packing`), `attn_index` (T_v,) gathers the virtual row, whose
    bounds `segment_cu` then gives, and `out_index` (T,) takes each stored token's output from it.
    The gathers' backward sums a shared prefix's key and value gradients over its continuations.
    `blockwise`: segments run through `trainer.blockwise` instead of SDPA (not the varlen call).
    """
    if attn_index is not None:                                     # gather whole (H, D) rows
        query, key, value = (x.transpose(1, 2).index_select(1, attn_index).transpose(1, 2)
                             for x in (query, key, value))
        out, _ = segment_attention(module, query, key, value, attention_mask, dropout, scaling,
                                   segment_cu, segment_cu_device, blockwise=blockwise)
        return out.index_select(1, out_index), None                # (1, T, H, D)
    cu = [0, query.shape[2]] if segment_cu is None else segment_cu.tolist()
    lengths = [e - s for s, e in zip(cu[:-1], cu[1:])]
    out = _varlen_attention(query, key, value, scaling, segment_cu_device, max(lengths))
    if out is not None:
        return out, None
    gqa = getattr(module, "num_key_value_groups", 1) > 1
    outs = [_causal_segment(q, k, v, scaling, gqa, blockwise).transpose(1, 2)  # (1, L_i, H, D)
            for q, k, v in zip(query.split(lengths, 2), key.split(lengths, 2),
                               value.split(lengths, 2))]
    return (torch.cat(outs, dim=1) if len(outs) > 1 else outs[0].contiguous()), None  # (1, T, H, D)


def _causal_segment(q, k, v, scaling, gqa: bool, blockwise: bool) -> torch.Tensor:
    """Causal attention of one segment, (1, H, L, D) -> (1, H, L, D), by SDPA or `blockwise`, its
    length padded on the CPU to a multiple of `SEGMENT_ALIGN` (the pad comes last, so causal
    attention never reads it)."""
    n = q.shape[2]
    pad = (-n) % SEGMENT_ALIGN if q.device.type == "cpu" else 0
    if pad:
        q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
    if blockwise:
        out = blockwise_causal(q, k, v, scaling)
    else:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scaling, enable_gqa=gqa)
    return out[:, :, :n] if pad else out


def attention_kernel(setting: str, device: torch.device) -> str:
    """`trainer.attention` -> the registered attention name: auto is blockwise on the CPU (where
    it ran 1.7-3.2x faster than SDPA in bf16, `bench/segment_attention.py`) and SDPA (varlen) on
    a GPU."""
    if setting not in get_args(TrainAttention):
        raise ValueError(f"trainer.attention must be one of {get_args(TrainAttention)}, got {setting!r}.")
    blockwise = setting == "blockwise" or (setting == "auto" and device.type == "cpu")
    return BLOCKWISE_ATTENTION if blockwise else SEGMENT_ATTENTION


def use_segment_attention(model, kernel: str = SEGMENT_ATTENTION) -> None:
    """Register segment attention (per segment by SDPA, or blockwise) and switch `model` to
    `kernel`, one of the two names (idempotent)."""
    from transformers import AttentionInterface
    AttentionInterface.register(SEGMENT_ATTENTION, torch.compiler.disable(segment_attention))
    AttentionInterface.register(BLOCKWISE_ATTENTION, torch.compiler.disable(
        functools.partial(segment_attention, blockwise=True)))
    model.config._attn_implementation = kernel
    for sub in model.modules():
        if hasattr(sub, "config") and sub.config is not model.config:
            sub.config._attn_implementation = kernel


def _head_chunk(hidden: torch.Tensor, head: torch.nn.Module, targets: torch.Tensor):
    """(C, D) hidden, LM head D -> V, (C,) targets -> (C,) log-probs, (C,) entropy (no grad)."""
    logits = head(hidden).float()                                  # (C, V)
    logz = torch.logsumexp(logits, dim=-1)                         # (C,)
    logp = logits.gather(-1, targets[:, None]).squeeze(-1) - logz  # (C,)
    with torch.no_grad():
        probs = torch.softmax(logits, dim=-1)                      # (C, V)
        entropy = logz - (probs * logits).sum(-1)                  # (C,)
    return logp, entropy


def compile_layers(model) -> None:
    """torch.compile every decoder layer in place (dynamic shapes: packed rows vary in length)."""
    for layer in model.base_model.layers:
        layer.compile(dynamic=True)


def head_chunk_rows(vocab: int, budget: int | None = None) -> int:
    """Rows of one LM-head chunk: as many as keep its (rows, vocab) fp32 logits within `budget`
    (default: LOGITS_BUDGET, read at the call, so a test or benchmark may set it)."""
    return max(1, (LOGITS_BUDGET if budget is None else budget) // max(1, vocab))


def head_logprobs(hidden: torch.Tensor, head: torch.nn.Linear, targets: torch.Tensor,
                  chunk: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(A, D) hidden states, (A,) next tokens -> (A,) log-probs and (A,) entropies, chunked.

    `chunk` rows per chunk (default: `head_chunk_rows` of the head's vocabulary); one chunk runs
    plainly, several are each recomputed in backward. The head is called as a module (not through
    its weight) so ZeRO-3 can gather it.
    """
    chunk = chunk or head_chunk_rows(head.out_features)
    if hidden.shape[0] <= chunk:
        return _head_chunk(hidden, head, targets)
    parts = [checkpoint(_head_chunk, hidden[i:i + chunk], head, targets[i:i + chunk],
                        use_reentrant=False) for i in range(0, hidden.shape[0], chunk)]
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])  # (A,), (A,)


def hidden_states(model, batch: PackedBatch) -> torch.Tensor:
    """Last hidden states (T, D) of one packed row, segments isolated."""
    device = next(model.parameters()).device
    cu = batch.attention_bounds                                    # (S + 1,) int32
    shared: dict[str, torch.Tensor] = {}
    if batch.attn_index is not None:
        assert batch.out_index is not None  # packing sets the two together
        shared = {"attn_index": batch.attn_index.to(device), "out_index": batch.out_index.to(device)}
    out = model.base_model(input_ids=batch.input_ids[None].to(device),
                           position_ids=batch.position_ids[None].to(device), use_cache=False,
                           segment_cu=cu, segment_cu_device=cu.to(device) if device.type == "cuda"
                           else None, **shared)
    return out.last_hidden_state[0]                                # (T, D)


def packed_logprobs(model, batch: PackedBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """(T,) log pi(token_t | segment prefix) on action tokens (0 elsewhere), and (T,) entropy."""
    hidden = hidden_states(model, batch)                           # (T, D)
    device = hidden.device
    idx = batch.loss_mask.nonzero().squeeze(-1).to(device)         # (A,) action positions, all >= 1
    targets = batch.input_ids.to(device)[idx]                      # (A,)
    pred = idx - 1 if batch.prev_index is None else batch.prev_index.to(device)[idx]  # (A,)
    head = model.get_output_embeddings()                           # D -> V
    logp_a, ent_a = head_logprobs(hidden[pred], head, targets)     # (A,), (A,)
    logp = torch.zeros(batch.num_tokens, device=device, dtype=logp_a.dtype).index_put((idx,), logp_a)
    ent = torch.zeros(batch.num_tokens, device=device, dtype=ent_a.dtype).index_put((idx,), ent_a)
    return logp, ent                                               # (T,), (T,)
