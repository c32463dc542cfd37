"""Policy losses as free functions over per-token tensors; each returns `(loss, metrics)`.

Tensors are per token and aligned: `logprobs[t] = log pi(token_t | tokens_<t)` and `mask[t] = 1`
only on action tokens (the model's own, well-formed turns). Any shape works, e.g. (T,) for a
packed sequence or (B, T) for a padded batch; sums run over every element.

Aggregation (`algorithm.loss_agg`, one function: `aggregate`). Every token-level loss (the policy
gradient and SFT/RFT) sums its masked per-token losses and divides by a `Normaliser` that holds
the *whole optimiser step's* counts, over every micro-batch and every rank, so accumulating the
micro-batch losses gives the batch loss exactly:
- `token_mean` (DAPO 2503.14476, the default): sum over all action tokens / `num_tokens`;
- `seq_mean` (GRPO, DeepSeekMath 2402.03300): each sequence's token mean, then a mean over the
  step's `num_seqs` sequences (a sequence never spans two packed rows, so its length is local);
- `seq_mean_token_sum_norm` (Dr.GRPO 2503.20783): sum / (`num_seqs` x `max_len`), a constant
  length (the episode's token budget, `agent.context_tokens`) in place of each sequence's own.
These are TRL GRPOTrainer's loss_type "dapo"/"bnpo", "grpo" and "dr_grpo" (tests/test_losses.py).
DPO does not take it: its pair loss needs sequence log-probs that are *sums* over action tokens
(a length-normalised one is another objective), and it is averaged over the step's pairs.

Implemented:
- SFT/RFT: masked token cross-entropy, aggregated as above.
- DAPO: PPO ratio against old log-probs, asymmetric clip `[1 - clip_low, 1 + clip_high]`, no KL
  by default, optional k3 KL to a reference policy (`kl_coef`); GRPO and Dr.GRPO are the same
  clipped objective under their aggregations.
- DPO (Rafailov et al.) on (chosen, rejected) trajectory pairs, sequence log-prob = sum of masked
  token log-probs, with reference log-probs.
Metrics: clip fractions (low: ratio < 1 - clip_low with A < 0; high: ratio > 1 + clip_high with
A > 0, as in TRL), entropy, approx KL (k3 of old vs new), and the sampler-vs-trainer log-prob
mismatch (mean |delta| and k3) on action tokens.

Left out: DAPO's dual-clip (c=3) variant, value functions, and token-level importance correction
of the sampler mismatch (TIS): the mismatch is only measured, not corrected.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import get_args

import torch

from swe_rlvr.config import LossAgg

Metrics = dict[str, float]
LOSS_AGGREGATIONS = get_args(LossAgg)


@dataclass(frozen=True)
class Normaliser:
    """What a micro-batch's summed loss is divided by: the aggregation and the step's counts."""

    mode: str = "token_mean"
    """One of LOSS_AGGREGATIONS (`algorithm.loss_agg`)."""
    num_tokens: int = 1
    """Action tokens of the whole step (token_mean)."""
    num_seqs: int = 1
    """Sequences of the whole step (seq_mean, seq_mean_token_sum_norm)."""
    max_len: int = 1
    """Dr.GRPO's constant length (seq_mean_token_sum_norm)."""

    def __post_init__(self) -> None:
        if self.mode not in LOSS_AGGREGATIONS:
            raise ValueError(f"Unknown algorithm.loss_agg {self.mode!r}; choose one of: "
                             f"{', '.join(LOSS_AGGREGATIONS)}.")


def aggregate(per_token: torch.Tensor, mask: torch.Tensor, norm: Normaliser,
              seq_ids: torch.Tensor | None = None) -> torch.Tensor:
    """This micro-batch's share of the step loss: masked per-token losses summed, normalised.

    `seq_ids[t]` (any integer ids, same shape as `mask`) names token t's sequence; only
    `seq_mean` needs it.
    """
    if norm.mode == "token_mean":
        return (per_token * mask).sum() / max(norm.num_tokens, 1)  # ()
    if norm.mode == "seq_mean_token_sum_norm":
        return (per_token * mask).sum() / (max(norm.num_seqs, 1) * norm.max_len)  # ()
    if seq_ids is None:
        raise ValueError("loss_agg seq_mean needs seq_ids (each token's sequence index).")
    ids = torch.broadcast_to(seq_ids, mask.shape).reshape(-1)      # (N,)
    flat_mask = mask.reshape(-1)                                   # (N,)
    counts = torch.zeros(int(ids.max()) + 1, dtype=mask.dtype, device=mask.device)
    counts = counts.index_add_(0, ids, flat_mask)                  # (S,) action tokens per sequence
    weight = flat_mask / counts[ids].clamp(min=1.0)                # (N,) 1/len(seq) on actions
    per_token = torch.broadcast_to(per_token, mask.shape)          # (...)
    return (per_token.reshape(-1) * weight).sum() / max(norm.num_seqs, 1)  # ()


def _mean(x: torch.Tensor, mask: torch.Tensor) -> float:
    """Masked mean as a float (for metrics; 0.0 on an empty mask)."""
    count = mask.sum()
    return float((x.detach() * mask).sum() / count) if count > 0 else 0.0


def k3(logp: torch.Tensor, logq: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(p || q) from samples of p: exp(q - p) - (q - p) - 1."""
    d = logq - logp                                                # (...)
    return torch.exp(d) - d - 1.0                                  # (...)


def mismatch_metrics(trainer_logprobs: torch.Tensor, sampler_logprobs: torch.Tensor,
                     mask: torch.Tensor) -> Metrics:
    """Sampler-vs-trainer mismatch on action tokens: mean |delta| and k3 KL(sampler || trainer)."""
    t = trainer_logprobs.detach()                                  # (...)
    delta = (t - sampler_logprobs).abs()                           # (...)
    return {"sampler_mismatch": _mean(delta, mask),
            "sampler_k3": _mean(k3(sampler_logprobs, t), mask)}


def sft_loss(logprobs: torch.Tensor, mask: torch.Tensor, *, norm: Normaliser,
             seq_ids: torch.Tensor | None = None) -> tuple[torch.Tensor, Metrics]:
    """Masked token cross-entropy, aggregated by `norm` over the whole step."""
    mask = mask.to(logprobs.dtype)                                 # (...)
    loss = aggregate(-logprobs, mask, norm, seq_ids)               # ()
    return loss, {"nll": -_mean(logprobs, mask)}


def _clipped_surrogate(logprobs, old_logprobs, advantages, clip_low, clip_high):
    """Per-token PPO surrogate -min(r A, clip(r) A), and the ratio."""
    ratio = torch.exp(logprobs - old_logprobs)                     # (...)
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)  # (...)
    per_token = -torch.min(ratio * advantages, clipped * advantages)  # (...)
    return per_token, ratio


def _policy_metrics(ratio, advantages, logprobs, old_logprobs, mask, clip_low, clip_high) -> Metrics:
    low = ((ratio < 1.0 - clip_low) & (advantages < 0)).to(mask.dtype)    # (...)
    high = ((ratio > 1.0 + clip_high) & (advantages > 0)).to(mask.dtype)  # (...)
    return {"clip_frac_low": _mean(low, mask), "clip_frac_high": _mean(high, mask),
            "approx_kl": _mean(k3(old_logprobs, logprobs.detach()), mask)}


def policy_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
                mask: torch.Tensor, *, norm: Normaliser, seq_ids: torch.Tensor | None = None,
                clip_low: float = 0.2, clip_high: float = 0.28,
                ref_logprobs: torch.Tensor | None = None,
                kl_coef: float = 0.0) -> tuple[torch.Tensor, Metrics]:
    """Clipped policy-gradient loss (DAPO, GRPO or Dr.GRPO by `norm.mode`).

    `advantages` broadcasts per token (e.g. (B, 1) or (T,)).
    """
    mask = mask.to(logprobs.dtype)                                 # (...)
    per_token, ratio = _clipped_surrogate(logprobs, old_logprobs, advantages, clip_low, clip_high)
    if kl_coef:
        if ref_logprobs is None:
            raise ValueError("algorithm.kl_coef > 0 needs ref_logprobs; pass the reference "
                             "model's log-probs or set kl_coef to 0 (DAPO, Nebius).")
        per_token = per_token + kl_coef * k3(logprobs, ref_logprobs)  # (...)
    loss = aggregate(per_token, mask, norm, seq_ids)               # ()
    metrics = _policy_metrics(ratio, advantages, logprobs, old_logprobs, mask, clip_low, clip_high)
    return loss, metrics


def dapo_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
              mask: torch.Tensor, *, num_tokens: int, clip_low: float = 0.2,
              clip_high: float = 0.28, ref_logprobs: torch.Tensor | None = None,
              kl_coef: float = 0.0) -> tuple[torch.Tensor, Metrics]:
    """DAPO: `policy_loss` with the token mean over the step's `num_tokens` action tokens."""
    return policy_loss(logprobs, old_logprobs, advantages, mask,
                       norm=Normaliser("token_mean", num_tokens=num_tokens), clip_low=clip_low,
                       clip_high=clip_high, ref_logprobs=ref_logprobs, kl_coef=kl_coef)


def sequence_logprob(logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B, T) token log-probs -> (B,) sum over action tokens."""
    return (logprobs * mask.to(logprobs.dtype)).sum(-1)            # (B,)


def dpo_loss(chosen: torch.Tensor, rejected: torch.Tensor, ref_chosen: torch.Tensor,
             ref_rejected: torch.Tensor, *, beta: float, num_pairs: int) -> tuple[torch.Tensor, Metrics]:
    """DPO: -log sigmoid(beta * ((c - c_ref) - (r - r_ref))), summed here, divided by num_pairs.

    All inputs are (P,) sequence log-probs (sums over action tokens); `num_pairs` counts the
    whole step's pairs (every micro-batch, every rank).
    """
    chosen_reward = beta * (chosen - ref_chosen)                   # (P,)
    rejected_reward = beta * (rejected - ref_rejected)             # (P,)
    margin = chosen_reward - rejected_reward                       # (P,)
    loss = -torch.nn.functional.logsigmoid(margin).sum() / max(num_pairs, 1)  # ()
    return loss, {"dpo_margin": float(margin.detach().mean()),
                  "dpo_accuracy": float((margin.detach() > 0).float().mean())}
