"""The micro-batch: one packed row of an optimiser step with everything its loss reads.

An optimiser step is a list of micro-batches, each one packed row (`trainer.packing`). Its loss
is the sum of their losses, each already divided by the *whole step's* `Normaliser` (counts over
every micro-batch and every rank), so accumulating gradients over the micro-batches, and summing
them over the ranks, gives the gradient of the step's loss in one pass.

The three step losses below take a `MicroBatch` and the trainer's log-probs on its row:
- `sft_step_loss`: masked cross-entropy (RFT, DPO's SFT warm-up);
- `policy_step_loss`: the clipped policy gradient against the recomputed old log-probs (DAPO,
  GRPO, Dr.GRPO by the normaliser's aggregation), optional k3 KL to the reference's log-probs;
- `dpo_step_loss`: DPO on the row's (chosen, rejected) pairs, named by role, never by position.
Each returns `(loss, metrics)`; the metrics are means over the row's action tokens.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import torch

from trainer.losses import Metrics, Normaliser, dpo_loss, mismatch_metrics, policy_loss, sft_loss
from trainer.packing import PackedBatch


@dataclass(frozen=True)
class MicroBatch:
    """One packed row and what its loss reads; per-token tensors are (T,), aligned with the row."""

    row: PackedBatch
    """Token ids, position ids and segment bounds: what the forward reads."""
    norm: Normaliser
    """The whole step's aggregation and counts."""
    mask: torch.Tensor
    """(T,) 1.0 on action tokens, the only ones with a loss."""
    seq_ids: torch.Tensor
    """(T,) each token's episode (its index in the step)."""
    sampler_logprobs: torch.Tensor
    """(T,) the sampler's log-probs (only measured: the mismatch metrics)."""
    advantages: torch.Tensor
    """(T,) each token's episode advantage."""
    old_logprobs: torch.Tensor | None = None
    """(T,) policy k's log-probs, recomputed before the first update (policy gradient)."""
    ref_logprobs: torch.Tensor | None = None
    """(T,) the reference model's log-probs (the KL term)."""
    chosen: tuple[int, ...] = ()
    """DPO: the episodes (seq ids) preferred, one per pair in this row."""
    rejected: tuple[int, ...] = ()
    """DPO: the episode each chosen one is preferred to, aligned with `chosen`."""
    ref_chosen: torch.Tensor | None = None
    """(P,) the reference's sequence log-probs of `chosen`."""
    ref_rejected: torch.Tensor | None = None
    """(P,) the reference's sequence log-probs of `rejected`."""
    num_pairs: int = 0
    """DPO: the pairs of the whole step (the mean's denominator)."""
    filler: bool = False
    """Run only to keep the ranks' collectives in step: its loss counts 0 and it has no metrics."""

    @classmethod
    def of(cls, row: PackedBatch, norm: Normaliser, **fields) -> MicroBatch:
        """The micro-batch of `row`, its per-token arrays taken from the packing."""
        return cls(row=row, norm=norm, mask=row.loss_mask, seq_ids=row.seq_ids,
                   sampler_logprobs=row.sampler_logprobs, advantages=row.advantages, **fields)

    def to(self, device: torch.device) -> MicroBatch:
        """The loss's tensors on `device` (the row stays where it is: the forward moves it)."""
        moved = {f.name: getattr(self, f.name).to(device) for f in dataclasses.fields(self)
                 if isinstance(getattr(self, f.name), torch.Tensor)}
        return dataclasses.replace(self, **moved)


LossFn = Callable[[MicroBatch, torch.Tensor], tuple[torch.Tensor, Metrics]]
"""(micro-batch, (T,) trainer log-probs) -> (its share of the step loss, metrics)."""


def sft_step_loss(mb: MicroBatch, logprobs: torch.Tensor) -> tuple[torch.Tensor, Metrics]:
    """Cross-entropy on the action tokens; the mismatch is the trainer's vs the sampler's."""
    loss, metrics = sft_loss(logprobs, mb.mask, norm=mb.norm, seq_ids=mb.seq_ids)
    return loss, {**metrics, **mismatch_metrics(logprobs, mb.sampler_logprobs, mb.mask)}


def policy_step_loss(mb: MicroBatch, logprobs: torch.Tensor, *, clip_low: float,
                     clip_high: float, kl_coef: float = 0.0) -> tuple[torch.Tensor, Metrics]:
    """Clipped policy gradient against `old_logprobs`; the mismatch is old vs the sampler's."""
    old = _required(mb.old_logprobs, "old_logprobs")
    loss, metrics = policy_loss(logprobs, old, mb.advantages, mb.mask, norm=mb.norm,
                                seq_ids=mb.seq_ids, clip_low=clip_low, clip_high=clip_high,
                                ref_logprobs=mb.ref_logprobs, kl_coef=kl_coef)
    return loss, {**metrics, **mismatch_metrics(old, mb.sampler_logprobs, mb.mask)}


def sequence_sums(logprobs: torch.Tensor, mb: MicroBatch) -> torch.Tensor:
    """(S,) per episode of the row (by seq id): the sum of its action-token log-probs."""
    ids = mb.seq_ids                                               # (T,)
    sums = torch.zeros(int(ids.max()) + 1, device=logprobs.device, dtype=logprobs.dtype)
    return sums.index_add(0, ids, logprobs * mb.mask)              # (S,)


def pair_logprobs(logprobs: torch.Tensor, mb: MicroBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """(P,) chosen and (P,) rejected sequence log-probs of the row's pairs."""
    sums = sequence_sums(logprobs, mb)                             # (S,)
    chosen = torch.tensor(mb.chosen, device=sums.device)           # (P,)
    rejected = torch.tensor(mb.rejected, device=sums.device)       # (P,)
    return sums[chosen], sums[rejected]                            # (P,), (P,)


def dpo_step_loss(mb: MicroBatch, logprobs: torch.Tensor, *,
                  beta: float) -> tuple[torch.Tensor, Metrics]:
    """DPO on the row's pairs against the reference's sequence log-probs."""
    chosen, rejected = pair_logprobs(logprobs, mb)                 # (P,), (P,)
    return dpo_loss(chosen, rejected, _required(mb.ref_chosen, "ref_chosen"),
                    _required(mb.ref_rejected, "ref_rejected"), beta=beta, num_pairs=mb.num_pairs)


def _required(value: torch.Tensor | None, name: str) -> torch.Tensor:
    """A field that this loss reads and that the training loop attaches before it runs."""
    if value is None:
        raise ValueError(f"This loss needs MicroBatch.{name}; attach it to every micro-batch of the "
                         f"step first (trainer.loops.attach).")
    return value
