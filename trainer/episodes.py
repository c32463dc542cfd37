"""Episodes as the trainer sees them, built from ROLLOUTS and REWARDS rows.

An episode is one token sequence with aligned per-token arrays: `loss_mask` (1 on action tokens of
well-formed turns; the agent already zeroes prompt, observation, guidance and format-error tokens)
and the sampler's `logprobs` (0.0 where the sampler did not generate).

Guidance `strip` mode trains a guided episode as if it were unguided: the guidance span
`[guidance_start, guidance_end)` is cut out of the context. The sampler's log-probs after the
span were computed *with* the guidance in context, so the trainer's log-probs on the stripped
sequence differ from them; that off-policy gap is what `sampler_mismatch` reports.

`trim_tail` cuts the tokens after an episode's last action (the final observation and the
closing turn's template). A causal model's log-probs of earlier tokens do not depend on them, and
they carry no loss, so they only cost forward and backward FLOPs: ~6% of the tokens of a
SmolLM2 bash-scaffold rollout, more where the last observation is a long test log.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Episode:
    """One trajectory: tokens, masks, sampler log-probs and its scalar advantage."""

    token_ids: tuple[int, ...]
    loss_mask: tuple[int, ...]
    logprobs: tuple[float, ...]
    advantage: float = 0.0
    guidance_span: tuple[int, int] | None = None
    episode_id: str = ""
    instance_id: str = ""
    reward: float = 0.0
    resolved: bool = False

    def __post_init__(self) -> None:
        n = len(self.token_ids)
        if len(self.loss_mask) != n or len(self.logprobs) != n:
            raise ValueError(f"Episode {self.episode_id!r}: token_ids ({n}), loss_mask "
                             f"({len(self.loss_mask)}) and logprobs ({len(self.logprobs)}) must "
                             f"have one entry per token; re-run the rollout stage.")
        if n and self.loss_mask[0]:
            raise ValueError(f"Episode {self.episode_id!r}: the first token has loss_mask 1 but "
                             f"nothing precedes it to predict it from; mask the prompt.")

    @property
    def num_actions(self) -> int:
        return int(sum(self.loss_mask))


def episode_from_row(rollout: dict, reward_row: dict | None = None) -> Episode:
    """One ROLLOUTS row (+ its REWARDS row) -> Episode."""
    start, end = rollout.get("guidance_start", -1), rollout.get("guidance_end", -1)
    span = (int(start), int(end)) if start is not None and start >= 0 else None
    reward_row = reward_row or {}
    return Episode(token_ids=tuple(int(t) for t in rollout["token_ids"]),
                   loss_mask=tuple(int(m) for m in rollout["loss_mask"]),
                   logprobs=tuple(float(x) for x in rollout["logprobs"]),
                   advantage=float(reward_row.get("advantage") or 0.0), guidance_span=span,
                   episode_id=rollout.get("episode_id", ""), instance_id=rollout.get("instance_id", ""),
                   reward=float(reward_row.get("reward") or 0.0),
                   resolved=bool(reward_row.get("reward_resolved") or 0.0))


def episodes_from_rows(rollout_rows: list[dict], reward_rows: list[dict], *,
                       kept_only: bool = True) -> list[Episode]:
    """Join ROLLOUTS and REWARDS rows on episode_id; by default only rows with `kept`."""
    rewards = {r["episode_id"]: r for r in reward_rows}
    out = []
    for row in rollout_rows:
        rw = rewards.get(row["episode_id"])
        if rw is None or (kept_only and not rw.get("kept")):
            continue
        out.append(episode_from_row(row, rw))
    return out


def expert_episodes(rollout_rows: list[dict]) -> list[Episode]:
    """Trainer episodes (resolved, reward 1) of the expert warm-up's ROLLOUTS rows."""
    from trainer.scoring import expert_reward_rows
    return episodes_from_rows(rollout_rows, expert_reward_rows(rollout_rows))


def strip_guidance(ep: Episode) -> Episode:
    """Remove tokens [guidance_start, guidance_end) with their mask and log-prob entries."""
    if ep.guidance_span is None:
        return ep
    s, e = ep.guidance_span
    if not 0 <= s <= e <= len(ep.token_ids):
        raise ValueError(f"Episode {ep.episode_id!r}: guidance span {ep.guidance_span} lies outside "
                         f"its {len(ep.token_ids)} tokens; the rollout row is corrupt, re-run it.")
    if any(ep.loss_mask[s:e]):
        raise ValueError(f"Episode {ep.episode_id!r}: guidance tokens carry loss_mask 1; the "
                         f"agent must mask guidance (STYLE 9). Fix the rollout stage.")
    return replace(ep, token_ids=ep.token_ids[:s] + ep.token_ids[e:],
                   loss_mask=ep.loss_mask[:s] + ep.loss_mask[e:],
                   logprobs=ep.logprobs[:s] + ep.logprobs[e:], guidance_span=None)


def trim_tail(ep: Episode) -> Episode:
    """Drop the tokens after the last action token: no loss, and (causal attention) no effect on
    any earlier token's log-prob. An episode without actions is returned as it is."""
    last = max((i for i, m in enumerate(ep.loss_mask) if m), default=-1)
    if last < 0 or last == len(ep.token_ids) - 1:
        return ep
    end = last + 1
    span = ep.guidance_span
    if span is not None and span[0] >= end:
        span = None                                    # a span wholly in the cut tail goes with it
    elif span is not None:
        span = (span[0], min(span[1], end))
    return replace(ep, token_ids=ep.token_ids[:end], loss_mask=ep.loss_mask[:end],
                   logprobs=ep.logprobs[:end], guidance_span=span)
