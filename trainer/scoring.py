"""The reward stage: rollout and validation rows -> REWARDS rows (reward parts, advantage, kept).

Groups are the episodes of one instance in one iteration. Guided re-attempts join their
instance's unguided group when the trainer sees them without their guidance (`guidance.mode`
strip or pairs: "as if unguided", so a guided success scores against the unguided failures that
triggered it, Agent-RLVR); under `keep` their context differs, and they form a group of their
own. Infrastructure failures leave the group before its statistics are taken: they are no sample,
never reward 0. Groups with no signal are dropped when `algorithm.dynamic_sampling` is on (DAPO),
with `drop_reason` saying so.
"""

from __future__ import annotations

from collections import defaultdict

from swe_rlvr.config import AlgorithmConfig, RewardConfig
from trainer.advantages import group_advantages, has_signal
from trainer.rewards import reward


def group_key(row: dict, guidance_mode: str) -> tuple[str, bool]:
    """(instance, whether the episode is scored as guided): the advantage group of a row."""
    return row["instance_id"], bool(row["guided"]) and guidance_mode == "keep"


def reward_rows(rollout_rows: list[dict], validation_rows: list[dict], reward_cfg: RewardConfig,
                algo_cfg: AlgorithmConfig, max_gen_tokens: int, guidance_mode: str) -> list[dict]:
    """One REWARDS row per rollout row, in the same order."""
    grades = {v["episode_id"]: v for v in validation_rows}
    rows = [_score(r, grades.get(r["episode_id"]), reward_cfg, max_gen_tokens) for r in rollout_rows]
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for row in rows:
        if row["drop_reason"] == "":
            groups[group_key(row, guidance_mode)].append(row)
    for members in groups.values():
        _assign_group(members, algo_cfg)
    return rows


def _score(rollout: dict, grade: dict | None, cfg: RewardConfig, max_gen_tokens: int) -> dict:
    row = {"episode_id": rollout["episode_id"], "instance_id": rollout["instance_id"],
           "guided": bool(rollout["guided"]), "advantage": None, "kept": False,
           "drop_reason": ""}
    infra = grade is None or bool(grade["infra_failure"])
    parts = reward(bool(grade and grade["resolved"]), infra, int(rollout["turns"]),
                   int(rollout["gen_tokens"]), int(rollout["format_errors"]), cfg, max_gen_tokens,
                   tampered=bool(grade and grade.get("tampered")))
    if parts is None:
        row.update(reward_resolved=None, reward_turns=None, reward_overlong=None,
                   reward_format=None, reward=None,
                   drop_reason="no_validation" if grade is None else "infra_failure")
    else:
        row.update(parts.as_row())
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
