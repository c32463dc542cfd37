"""Sequence packing: episodes -> packed rows of at most `budget` tokens, no padding.

First-fit-decreasing bin packing places the longest episodes first, each into the first row with
room. A packed row is the concatenation of its episodes; position ids restart at 0 for each
segment (so RoPE sees every episode from position 0) and `cu_seqlens` marks the segment bounds
for attention that never crosses segments (see `trainer.forward`). Per-token arrays are aligned
with the tokens: `loss_mask`, sampler `logprobs`, the episode's `advantage`, and `seq_ids` (the
episode's index in the input list, for per-sequence losses).

Left out: splitting an episode longer than the budget across rows; such an episode gets a row of
its own, longer than the budget (size `trainer.pack_tokens` to at least the context budget).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from trainer.episodes import Episode


@dataclass
class PackedBatch:
    """One packed row; every tensor is (T,) except cu_seqlens (S + 1,)."""

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    cu_seqlens: torch.Tensor
    loss_mask: torch.Tensor
    sampler_logprobs: torch.Tensor
    advantages: torch.Tensor
    seq_ids: torch.Tensor
    episodes: list[int]

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.numel())

    @property
    def num_actions(self) -> int:
        return int(self.loss_mask.sum())


def first_fit_decreasing(lengths: Sequence[int], budget: int) -> list[list[int]]:
    """Indices grouped into bins whose length sums stay <= budget (an oversize item gets its own)."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    bins: list[list[int]] = []
    room: list[int] = []
    for i in order:
        slot = next((b for b, r in enumerate(room) if lengths[i] <= r), None)
        if slot is None:
            bins.append([i])
            room.append(budget - lengths[i])
        else:
            bins[slot].append(i)
            room[slot] -= lengths[i]
    return bins


def pack_row(episodes: Sequence[Episode], indices: Sequence[int]) -> PackedBatch:
    """Concatenate the chosen episodes into one PackedBatch."""
    eps = [episodes[i] for i in indices]
    lens = [len(e.token_ids) for e in eps]
    cat = lambda f, dt: torch.tensor([x for e in eps for x in f(e)], dtype=dt)  # noqa: E731
    return PackedBatch(
        input_ids=cat(lambda e: e.token_ids, torch.long),                        # (T,)
        position_ids=torch.cat([torch.arange(n) for n in lens]),                # (T,)
        cu_seqlens=torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32),
        loss_mask=cat(lambda e: e.loss_mask, torch.float32),                     # (T,)
        sampler_logprobs=cat(lambda e: e.logprobs, torch.float32),               # (T,)
        advantages=cat(lambda e: [e.advantage] * len(e.token_ids), torch.float32),  # (T,)
        seq_ids=torch.cat([torch.full((n,), i) for i, n in zip(indices, lens)]),  # (T,)
        episodes=list(indices))


def pack(episodes: Sequence[Episode], budget: int,
         groups: Sequence[Sequence[int]] | None = None) -> list[PackedBatch]:
    """Pack episodes into rows of <= budget tokens (first-fit-decreasing).

    `groups` (default: each episode alone) are index sets that must share a row, e.g. a DPO
    (chosen, rejected) pair, whose loss needs both sequence log-probs in one graph.
    """
    if budget <= 0:
        raise ValueError(f"trainer.pack_tokens must be positive, got {budget}.")
    groups = [[i] for i in range(len(episodes))] if groups is None else [list(g) for g in groups]
    sizes = [sum(len(episodes[i].token_ids) for i in g) for g in groups]
    bins = first_fit_decreasing(sizes, budget)
    return [pack_row(episodes, sorted(i for g in b for i in groups[g])) for b in bins]
