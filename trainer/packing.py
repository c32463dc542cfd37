"""Sequence packing: episodes -> packed rows of at most `budget` tokens, no padding.

First-fit-decreasing bin packing places the longest units first, each into the first row with
room. A packed row is the concatenation of its episodes; position ids restart at 0 for each
segment (so RoPE sees every episode from position 0) and `cu_seqlens` marks the segment bounds
for attention that never crosses segments (see `trainer.forward`). Per-token arrays are aligned
with the tokens: `loss_mask`, sampler `logprobs`, the episode's `advantage`, and `seq_ids` (the
episode's index in the input list, for per-sequence losses).

Shared prefixes (`trainer.share_prefix`). The episodes of one group (same `instance_id`) start
with the same prompt: system message, issue, tool descriptions. On the bash-scaffold ladder's
rollouts that prompt is ~26% of all tokens at G = 4, more at larger G. A row stores it once: the
first member of a unit keeps all its tokens, every later member only the tokens after the shared
prefix, with position ids that continue from it. The prefix is the longest common token prefix of
the unit's members that ends before any member's first action token, so no loss token is shared.
Attention then runs on a *virtual* row, `attn_index` gathering each member's full token sequence
back together (prefix + its own continuation, bounds `attn_cu`): that virtual row is exactly the
unshared packing, so attention is unchanged, while embeddings, projections, MLPs and norms run
on the stored tokens only. `out_index` picks, for each stored token, the virtual position whose
output it takes, and `prev_index` the stored position whose hidden state predicts it (a later
member's first token is predicted by the prefix's last token). Rows without a shared unit carry
None in all four, and the forward takes the plain path. Episodes alone in their unit (one per
instance: the warm-up's expert episodes, guided re-attempts) share what they have in common
within a row, the system prompt (~200 tokens of the bash scaffold's ~850 per expert episode).

Left out: splitting an episode longer than the budget across rows; such an episode gets a row of
its own, longer than the budget (size `trainer.pack_tokens` to at least the context budget).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from swe_rlvr.compute import causal_keys
from trainer.episodes import Episode

Unit = tuple[int, list[int]]
"""(shared prefix length, episode indices): episodes that share one row and their prefix."""


@dataclass
class PackedBatch:
    """One packed row; every tensor is (T,) except cu_seqlens (S + 1,) and the sharing indices."""

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    cu_seqlens: torch.Tensor
    loss_mask: torch.Tensor
    sampler_logprobs: torch.Tensor
    advantages: torch.Tensor
    seq_ids: torch.Tensor
    episodes: list[int]
    prev_index: torch.Tensor | None = None
    """(T,) stored position whose hidden state predicts token t (None: t - 1)."""
    attn_index: torch.Tensor | None = None
    """(T_v,) stored position of each virtual-row token (None: the row is its own virtual row)."""
    attn_cu: torch.Tensor | None = None
    """(S_v + 1,) int32 segment bounds of the virtual row: one segment per episode."""
    out_index: torch.Tensor | None = None
    """(T,) virtual position whose attention output stored token t takes."""

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.numel())

    @property
    def num_actions(self) -> int:
        return int(self.loss_mask.sum())

    @property
    def episode_tokens(self) -> int:
        """Tokens of the row's episodes counted in full (more than num_tokens where prefixes are
        shared)."""
        return self.num_tokens if self.attn_index is None else int(self.attn_index.numel())

    @property
    def attention_bounds(self) -> torch.Tensor:
        """Segment bounds attention runs over: the virtual row's where prefixes are shared."""
        return self.cu_seqlens if self.attn_cu is None else self.attn_cu

    @property
    def attended_keys(self) -> int:
        """Keys the row's causal attention reads, summed over its tokens (what its cost scales with)."""
        lengths = (self.attention_bounds[1:] - self.attention_bounds[:-1]).tolist()
        return sum(causal_keys(n) for n in lengths)


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


def first_action(ep: Episode) -> int:
    """Index of the episode's first action token (its length when it has none)."""
    return next((i for i, m in enumerate(ep.loss_mask) if m), len(ep.loss_mask))


def shared_prefix(episodes: Sequence[Episode]) -> int:
    """Length of the longest token prefix all episodes share before any of them acts.

    It stops before the first action token of every member and leaves every member at least one
    token of its own; fewer than two episodes share nothing.
    """
    if len(episodes) < 2:
        return 0
    limit = min(min(first_action(e), len(e.token_ids) - 1) for e in episodes)
    first = episodes[0].token_ids
    n = 0
    while n < limit and all(e.token_ids[n] == first[n] for e in episodes[1:]):
        n += 1
    return n


def unit_size(episodes: Sequence[Episode], unit: Unit) -> int:
    """Stored tokens of a unit: its prefix once, then every member's own tokens."""
    p, members = unit
    return p + sum(len(episodes[i].token_ids) - p for i in members)


def instance_units(episodes: Sequence[Episode], budget: int) -> list[Unit]:
    """Episodes of one instance -> units of <= budget stored tokens that share their prefix.

    Episodes without an instance id, and instances of one episode, are units of their own. An
    instance whose episodes exceed the budget together is cut into several units, longest
    episodes first, each storing the prefix once.
    """
    by_instance: dict[str, list[int]] = {}
    units: list[Unit] = []
    for i, e in enumerate(episodes):
        if e.instance_id:
            by_instance.setdefault(e.instance_id, []).append(i)
        else:
            units.append((0, [i]))
    for members in by_instance.values():
        p = shared_prefix([episodes[i] for i in members])
        chunks: list[list[int]] = []
        size = 0
        for i in sorted(members, key=lambda i: (-len(episodes[i].token_ids), i)):
            own = len(episodes[i].token_ids) - p
            if chunks and size + own <= budget:
                chunks[-1].append(i)
                size += own
            else:
                chunks.append([i])
                size = p + own
        units += [(p if len(c) > 1 else 0, sorted(c)) for c in chunks]
    return units


def pack_row(episodes: Sequence[Episode], units: Sequence[Unit]) -> PackedBatch:
    """Concatenate the units' episodes into one PackedBatch, each shared prefix stored once."""
    ids: list[int] = []
    pos: list[int] = []
    mask: list[float] = []
    lps: list[float] = []
    adv: list[float] = []
    seq: list[int] = []
    bounds = [0]
    prev: list[int] = []
    attn: list[int] = []
    attn_bounds = [0]
    out: list[int] = []
    for p, members in units:
        prefix_at = len(ids)                        # stored position of the unit's first token
        for k, i in enumerate(members):
            e = episodes[i]
            skip = p if k else 0                    # later members store only their own tokens
            start, n = len(ids), len(e.token_ids)
            ids += e.token_ids[skip:]
            pos += range(skip, n)
            mask += e.loss_mask[skip:]
            lps += e.logprobs[skip:]
            adv += [e.advantage] * (n - skip)
            seq += [i] * (n - skip)
            bounds.append(len(ids))
            prev += [prefix_at + p - 1 if k and t == start else t - 1 for t in range(start, len(ids))]
            virtual_at = len(attn)
            attn += [*range(prefix_at, prefix_at + skip), *range(start, len(ids))]
            attn_bounds.append(len(attn))
            out += range(virtual_at + skip, virtual_at + n)
    shared = any(p for p, _ in units)                # units of one episode have p = 0
    as_long = lambda xs: torch.tensor(xs, dtype=torch.long) if shared else None  # noqa: E731
    return PackedBatch(
        input_ids=torch.tensor(ids, dtype=torch.long),                           # (T,)
        position_ids=torch.tensor(pos, dtype=torch.long),                        # (T,)
        cu_seqlens=torch.tensor(bounds, dtype=torch.int32),                      # (S + 1,)
        loss_mask=torch.tensor(mask, dtype=torch.float32),                       # (T,)
        sampler_logprobs=torch.tensor(lps, dtype=torch.float32),                 # (T,)
        advantages=torch.tensor(adv, dtype=torch.float32),                       # (T,)
        seq_ids=torch.tensor(seq, dtype=torch.long),                             # (T,)
        episodes=sorted(i for _, members in units for i in members),
        prev_index=as_long(prev),                                                # (T,)
        attn_index=as_long(attn),                                                # (T_v,)
        attn_cu=torch.tensor(attn_bounds, dtype=torch.int32) if shared else None,  # (S_v + 1,)
        out_index=as_long(out))                                                  # (T,)


def pack(episodes: Sequence[Episode], budget: int,
         groups: Sequence[Sequence[int]] | None = None, *,
         share_prefix: bool = True) -> list[PackedBatch]:
    """Pack episodes into rows of <= budget tokens (first-fit-decreasing).

    `groups` (default: each episode alone, or with `share_prefix` the episodes of one instance)
    are index sets that must share a row, e.g. a DPO (chosen, rejected) pair, whose loss needs
    both sequence log-probs in one graph. With `share_prefix`, each unit's shared prompt prefix
    is stored once, and without `groups` a row's lone episodes share theirs too (`merge_lone`; see
    the module docstring); the loss and gradients are those of the plain packing.
    """
    if budget <= 0:
        raise ValueError(f"trainer.pack_tokens must be positive, got {budget}.")
    by_instance = groups is None and share_prefix
    if by_instance:
        units = instance_units(episodes, budget)
    else:
        sets = [[i] for i in range(len(episodes))] if groups is None else [sorted(g) for g in groups]
        units = [(shared_prefix([episodes[i] for i in g]) if share_prefix else 0, g) for g in sets]
    bins = first_fit_decreasing([unit_size(episodes, u) for u in units], budget)
    rows = [[units[u] for u in b] for b in bins]
    if by_instance:
        rows = [merge_lone(episodes, row) for row in rows]
    return [pack_row(episodes, sorted(row, key=lambda u: u[1][0])) for row in rows]


def merge_lone(episodes: Sequence[Episode], units: list[Unit]) -> list[Unit]:
    """A row's units of one episode (each the only one of its instance here: an expert
    episode, a guided re-attempt) as one unit sharing the prefix all of them have in common, the
    system prompt, where there is one; the rest as they are. Merging only shrinks the row."""
    lone = [u for u in units if len(u[1]) == 1]
    members = sorted(i for _, (i,) in lone)
    p = shared_prefix([episodes[i] for i in members])
    if not p:
        return units
    return [u for u in units if len(u[1]) > 1] + [(p, members)]
