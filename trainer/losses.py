"""Policy losses as free functions over per-token tensors; each returns `(loss, metrics)`.

Tensors are per token and aligned: `logprobs[t] = log pi(token_t | tokens_<t)` and `mask[t] = 1`
only on action tokens (the model's own, well-formed turns). Any shape works, e.g. (T,) for a
packed sequence or (B, T) for a padded batch; sums run over every element.

Implemented:
- SFT/RFT: masked token cross-entropy, normalised by `num_tokens` (the action-token count of the
  whole optimiser step, so gradient accumulation over micro-batches gives the batch mean).
- DAPO (2503.14476): PPO ratio against old log-probs, asymmetric clip `[1 - clip_low,
  1 + clip_high]`, token-level mean over all action tokens in the batch (`num_tokens`), no KL by
  default, optional k3 KL to a reference policy (`kl_coef`).
- GRPO: the same clipped objective averaged per sequence, then over sequences (`seq_ids`).
- DPO (Rafailov et al.) on (chosen, rejected) trajectory pairs, sequence log-prob = sum of masked
  token log-probs, with reference log-probs.
Metrics: clip fractions (low: ratio < 1 - clip_low with A < 0; high: ratio > 1 + clip_high with
A > 0, as in TRL), entropy, approx KL (k3 of old vs new), and the sampler-vs-trainer log-prob
mismatch (mean |delta| and k3) on action tokens.

Left out: DAPO's dual-clip (c=3) variant, value functions, and token-level importance correction
of the sampler mismatch (TIS): the mismatch is only measured, not corrected.
"""

from __future__ import annotations

import torch

Metrics = dict[str, float]


def _total(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Sum of x over masked elements."""
    return (x * mask).sum()                                        # ()


def _mean(x: torch.Tensor, mask: torch.Tensor) -> float:
    """Masked mean as a float (for metrics; 0.0 on an empty mask)."""
    count = mask.sum()
    return float(_total(x.detach(), mask) / count) if count > 0 else 0.0


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


def sft_loss(logprobs: torch.Tensor, mask: torch.Tensor, *, num_tokens: int) -> tuple[torch.Tensor, Metrics]:
    """Masked token cross-entropy, summed here and divided by the step's `num_tokens`."""
    mask = mask.to(logprobs.dtype)                                 # (...)
    loss = -_total(logprobs, mask) / max(num_tokens, 1)            # ()
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


def dapo_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
              mask: torch.Tensor, *, num_tokens: int, clip_low: float = 0.2,
              clip_high: float = 0.28, ref_logprobs: torch.Tensor | None = None,
              kl_coef: float = 0.0) -> tuple[torch.Tensor, Metrics]:
    """DAPO token-mean clipped loss; `advantages` broadcasts per token (e.g. (B, 1) or (T,))."""
    mask = mask.to(logprobs.dtype)                                 # (...)
    per_token, ratio = _clipped_surrogate(logprobs, old_logprobs, advantages, clip_low, clip_high)
    if kl_coef:
        if ref_logprobs is None:
            raise ValueError("algorithm.kl_coef > 0 needs ref_logprobs; pass the reference "
                             "model's log-probs or set kl_coef to 0 (DAPO, Nebius).")
        per_token = per_token + kl_coef * k3(logprobs, ref_logprobs)  # (...)
    loss = _total(per_token, mask) / max(num_tokens, 1)            # ()
    metrics = _policy_metrics(ratio, advantages, logprobs, old_logprobs, mask, clip_low, clip_high)
    return loss, metrics


def grpo_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
              mask: torch.Tensor, *, seq_ids: torch.Tensor, num_seqs: int,
              clip_low: float = 0.2, clip_high: float = 0.2) -> tuple[torch.Tensor, Metrics]:
    """GRPO: per-sequence mean of the clipped loss, then a mean over `num_seqs` sequences.

    `seq_ids[t]` is the global index of token t's sequence; a micro-batch holding only some of the
    sequences still divides by the whole step's `num_seqs`.
    """
    mask = mask.to(logprobs.dtype)                                 # (...)
    per_token, ratio = _clipped_surrogate(logprobs, old_logprobs, advantages, clip_low, clip_high)
    ids = seq_ids.reshape(-1)                                      # (N,)
    flat_mask = mask.reshape(-1)                                   # (N,)
    counts = torch.zeros(int(ids.max()) + 1, dtype=mask.dtype).index_add_(0, ids, flat_mask)  # (S,)
    weight = flat_mask / counts[ids].clamp(min=1.0)                # (N,) 1/len(seq) on actions
    loss = (per_token.reshape(-1) * weight).sum() / max(num_seqs, 1)  # ()
    metrics = _policy_metrics(ratio, advantages, logprobs, old_logprobs, mask, clip_low, clip_high)
    return loss, metrics


def sequence_logprob(logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B, T) token log-probs -> (B,) sum over action tokens."""
    return (logprobs * mask.to(logprobs.dtype)).sum(-1)            # (B,)


def dpo_loss(chosen: torch.Tensor, rejected: torch.Tensor, ref_chosen: torch.Tensor,
             ref_rejected: torch.Tensor, *, beta: float, num_pairs: int) -> tuple[torch.Tensor, Metrics]:
    """DPO: -log sigmoid(beta * ((c - c_ref) - (r - r_ref))), summed here, divided by num_pairs.

    All inputs are (P,) sequence log-probs (sums over action tokens).
    """
    chosen_reward = beta * (chosen - ref_chosen)                   # (P,)
    rejected_reward = beta * (rejected - ref_rejected)             # (P,)
    margin = chosen_reward - rejected_reward                       # (P,)
    loss = -torch.nn.functional.logsigmoid(margin).sum() / max(num_pairs, 1)  # ()
    return loss, {"dpo_margin": float(margin.detach().mean()),
                  "dpo_accuracy": float((margin.detach() > 0).float().mean())}
