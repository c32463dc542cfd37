"""Episode reward: a small function of the grade and the episode's counters.

Implemented:
- Nebius (2508.03501) reward: 1 if the patch resolves the instance, else 0, plus the linear turn
  penalty, 0 up to `L_thr` turns and falling to -1 at `T_max` turns:
  `(L_thr - turns) / (T_max - L_thr)`, clamped at -1.
- DAPO (2503.14476) soft overlong punishment on generated tokens (off by default, as in Nebius):
  0 while `gen_tokens <= L_max - L_cache`, then linear to -1 at `L_max`, -1 beyond.
- A per-format-error penalty (our addition; 0 = off).

Left out: partial credit for PARTIAL resolutions (both papers use the binary resolve bit), and any
reward from a learned verifier (Agent-RLVR uses its reward model only to rerank at test time).
An infrastructure failure is no sample at all (`None`), never reward 0. Overlong and turn-limited
episodes are ordinary failures: they keep their (0 + penalties) reward and stay in the group.
"""

from __future__ import annotations

from dataclasses import dataclass

from swe_rlvr.config import RewardConfig


@dataclass(frozen=True)
class RewardParts:
    """The reward's components; `total` is their sum. Field names map onto REWARDS columns."""

    resolved: float
    turns: float
    overlong: float
    format: float
    total: float

    def as_row(self) -> dict[str, float]:
        """The REWARDS columns these parts fill."""
        return {"reward_resolved": self.resolved, "reward_turns": self.turns,
                "reward_overlong": self.overlong, "reward_format": self.format,
                "reward": self.total}


def turn_penalty(turns: int, l_thr: int, t_max: int) -> float:
    """Nebius: 0 for turns <= l_thr, (l_thr - turns) / (t_max - l_thr) after, never below -1."""
    if t_max <= l_thr:
        raise ValueError(f"reward.t_max ({t_max}) must exceed reward.l_thr ({l_thr}); "
                         f"set t_max to the agent's turn limit, e.g. 40 with l_thr 20.")
    if turns <= l_thr:
        return 0.0
    return max(-1.0, (l_thr - turns) / (t_max - l_thr))


def overlong_penalty(gen_tokens: int, max_gen_tokens: int, buffer: int) -> float:
    """DAPO soft overlong punishment: 0, then linear over the last `buffer` tokens to -1."""
    if buffer <= 0 or buffer > max_gen_tokens:
        raise ValueError(f"reward.overlong_buffer ({buffer}) must be in 1..max_gen_tokens "
                         f"({max_gen_tokens}); DAPO used 4096 of 20480.")
    start = max_gen_tokens - buffer
    if gen_tokens <= start:
        return 0.0
    return max(-1.0, (start - gen_tokens) / buffer)


def reward(resolved: bool, turns: int, gen_tokens: int, format_errors: int, cfg: RewardConfig,
           max_gen_tokens: int, tampered: bool = False) -> RewardParts:
    """Reward of one sample (`swe_rlvr.artifacts.EpisodeOutcome.is_sample`). A tampered grade (the
    patch changed how the tests run) gets `reward.tamper_penalty` as its resolved part."""
    base = cfg.tamper_penalty if tampered else 1.0 if resolved else 0.0
    turn = turn_penalty(turns, cfg.l_thr, cfg.t_max) if cfg.turn_penalty else 0.0
    over = (overlong_penalty(gen_tokens, max_gen_tokens, cfg.overlong_buffer)
            if cfg.overlong_penalty else 0.0)
    fmt = -cfg.format_penalty * format_errors
    return RewardParts(resolved=base, turns=turn, overlong=over, format=fmt,
                       total=base + turn + over + fmt)
