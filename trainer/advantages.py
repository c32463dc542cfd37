"""Group advantages, dynamic sampling and the success-rate curriculum.

Implemented:
- GRPO/DAPO group advantage `(r - mean_G) / (std_G + eps)` (Nebius uses it with G = 10). The std is
  the *sample* std (Bessel's correction, divide by G - 1), which is what TRL's GRPOTrainer computes
  (`trl.trainer.utils.nanstd`); the agreement test checks this within 1e-6. Note TRL's eps is 1e-4,
  ours is `algorithm.adv_eps` (1e-6); with equal eps the numbers agree.
- Dr.GRPO: `r - mean_G` (no std division, removes the difficulty bias).
- RLOO: `r_i - mean_{j != i} r_j`.
- DAPO dynamic sampling: a group whose rewards are all equal carries no signal and is dropped.
  Unlike DAPO we do not re-sample to refill the batch (the iteration simply trains on fewer groups;
  the dropped count is reported).
- Nebius stage-2 curriculum: instances whose past success rate reaches a threshold, or that were
  never solved, are removed from the next iteration's pool.

Left out: batch-level std scaling (TRL's `scale_rewards="batch"`), and per-token advantages.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def grpo_advantages(rewards: torch.Tensor, eps: float) -> torch.Tensor:
    """(G,) rewards of one group -> (G,) advantages (r - mean) / (sample std + eps)."""
    mean = rewards.mean()                                          # ()
    std = rewards.std(correction=1) if rewards.numel() > 1 else torch.zeros(())  # ()
    return (rewards - mean) / (std + eps)                          # (G,)


def drgrpo_advantages(rewards: torch.Tensor, eps: float = 0.0) -> torch.Tensor:
    """(G,) -> (G,) r - mean (Dr.GRPO; eps unused, kept for a uniform signature)."""
    return rewards - rewards.mean()                                # (G,)


def rloo_advantages(rewards: torch.Tensor, eps: float = 0.0) -> torch.Tensor:
    """(G,) -> (G,) leave-one-out baseline r_i - (sum - r_i) / (G - 1)."""
    g = rewards.numel()
    if g < 2:
        return torch.zeros_like(rewards)                           # (G,)
    baseline = (rewards.sum() - rewards) / (g - 1)                 # (G,)
    return rewards - baseline                                      # (G,)


ADVANTAGES = {"grpo": grpo_advantages, "drgrpo": drgrpo_advantages, "rloo": rloo_advantages}


def group_advantages(rewards: Sequence[float], kind: str, eps: float) -> list[float]:
    """Advantages of one group's rewards with the named estimator."""
    if kind not in ADVANTAGES:
        raise ValueError(f"Unknown advantage {kind!r}; choose one of: {', '.join(ADVANTAGES)}.")
    values = torch.tensor(list(rewards), dtype=torch.float64)     # (G,)
    return ADVANTAGES[kind](values, eps).tolist()


def has_signal(rewards: Sequence[float]) -> bool:
    """DAPO dynamic sampling: keep a group only if its rewards are not all equal."""
    return len(rewards) > 1 and max(rewards) != min(rewards)


def curriculum_filter(history: dict[str, list[float]], max_rate: float) -> list[str]:
    """Nebius stage 2: ids whose past success rate is in (0, max_rate).

    `history[id]` holds past resolve outcomes (1.0/0.0, or rewards where > 0 counts as solved).
    Removed: success rate >= max_rate (too easy) and never solved (rate 0; no signal).
    """
    kept = []
    for instance_id, outcomes in history.items():
        if not outcomes:
            kept.append(instance_id)        # no history yet: keep so it gets tried
            continue
        rate = sum(1.0 for o in outcomes if o > 0) / len(outcomes)
        if 0.0 < rate < max_rate:
            kept.append(instance_id)
    return kept
