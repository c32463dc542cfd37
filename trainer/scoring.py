"""The reward stage: rollout and validation rows -> REWARDS rows (reward parts, advantage, kept).

Groups are the episodes of one instance in one iteration. Guided re-attempts join their
instance's unguided group when the trainer sees them without their guidance (`guidance.mode`
strip or pairs: "as if unguided", so a guided success scores against the unguided failures that
triggered it, Agent-RLVR); under `keep` their context differs, and they form a group of their
own. Non-samples (`swe_rlvr.artifacts.EpisodeOutcome`: ungraded, infrastructure failures,
crashes) leave the group before its statistics are taken: never reward 0, with `drop_reason` saying
why. Groups with no signal are dropped when `algorithm.dynamic_sampling` is on (DAPO),
with `drop_reason` saying so.
"""

from __future__ import annotations

from collections import defaultdict

from swe_rlvr.artifacts import EpisodeOutcome, outcomes
from swe_rlvr.config import AlgorithmConfig, RewardConfig
from trainer.advantages import group_advantages, has_signal
from trainer.rewards import reward


def group_key(row: dict, guidance_mode: str) -> tuple[str, bool]:
    """(instance, whether the episode is scored as guided): the advantage group of a row."""
    return row["instance_id"], bool(row["guided"]) and guidance_mode == "keep"


def reward_rows(rollout_rows: list[dict], validation_rows: list[dict], reward_cfg: RewardConfig,
                algo_cfg: AlgorithmConfig, max_gen_tokens: int, guidance_mode: str) -> list[dict]:
    """One REWARDS row per rollout row, in the same order."""
    rows = [_score(o, reward_cfg, max_gen_tokens) for o in outcomes(rollout_rows, validation_rows)]
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for row in rows:
        if row["drop_reason"] == "":
            groups[group_key(row, guidance_mode)].append(row)
    for members in groups.values():
        _assign_group(members, algo_cfg)
    return rows


def _score(outcome: EpisodeOutcome, cfg: RewardConfig, max_gen_tokens: int) -> dict:
    rollout = outcome.rollout
    row = {"episode_id": outcome.episode_id, "instance_id": outcome.instance_id,
           "guided": outcome.guided, "advantage": None, "kept": False,
           "drop_reason": outcome.drop_reason}
    if outcome.is_sample:
        row.update(reward(outcome.resolved, int(rollout["turns"]), int(rollout["gen_tokens"]),
                          int(rollout["format_errors"]), cfg, max_gen_tokens,
                          tampered=outcome.tampered).as_row())
    else:
        row.update(reward_resolved=None, reward_turns=None, reward_overlong=None,
                   reward_format=None, reward=None)
    return row


def _assign_group(members: list[dict], cfg: AlgorithmConfig) -> None:
    rewards = [m["reward"] for m in members]
    if cfg.dynamic_sampling and not has_signal(rewards):
        for m in members:
            m.update(advantage=0.0, kept=False, drop_reason="no_signal")
        return
    for m, adv in zip(members, group_advantages(rewards, cfg.advantage, cfg.adv_eps)):
        m.update(advantage=adv, kept=True)


def drop_counts(rows: list[dict]) -> dict[str, int]:
    """How many episodes each drop reason removed (e.g. {'no_signal': 20, 'infra_failure': 1})."""
    counts: dict[str, int] = defaultdict(int)
    for row in rows:
        if row["drop_reason"]:
            counts[row["drop_reason"]] += 1
    return dict(counts)


def expert_reward_rows(rollout_rows: list[dict]) -> list[dict]:
    """REWARDS rows for the expert warm-up's episodes: every one resolved (the expert keeps only
    those), reward 1, advantage 0 (RFT/SFT ignores it) and kept."""
    return [{"episode_id": r["episode_id"], "instance_id": r["instance_id"], "guided": r["guided"],
             "reward_resolved": 1.0, "reward_turns": 0.0, "reward_overlong": 0.0,
             "reward_format": 0.0, "reward": 1.0, "advantage": 0.0, "kept": True,
             "drop_reason": ""} for r in rollout_rows]
