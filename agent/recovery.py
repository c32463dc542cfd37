"""Guided recovery (Agent-RLVR): which instances get guidance, how well guidance recovers them,
and the (guided success, unguided failure) pairs that train the policy with DPO.

All functions take plain artifact rows (dicts with the `rollouts` / `validations` columns), so
they are pure and can be tested on hand-made rows.

Simplifications: an instance whose episodes were all infrastructure failures gets no guidance (it
has no failure to learn from, only a broken environment). When an instance failed several times,
the guidance is written from one representative failure: the first whose patch applied and ran
the tests, else the first failure; the paper does not say which failure the teacher sees.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable

from agent.guidance_sources import Failure, Guidance, GuidanceSource
from swe_rlvr.instances import Instance

TRIGGERS = ("unresolved", "any_failure")


def _by_episode(validations: Iterable[dict]) -> dict[str, dict]:
    return {v["episode_id"]: v for v in validations}


def _groups(rollouts: Iterable[dict], guided: bool) -> dict[str, list[dict]]:
    groups: dict[str, list[dict]] = defaultdict(list)
    for row in rollouts:
        if bool(row["guided"]) == guided:
            groups[row["instance_id"]].append(row)
    return groups


def select_failed(rollouts: list[dict], validations: list[dict], trigger: str = "unresolved"
                  ) -> dict[str, Failure]:
    """Instances that get guidance, each with its representative failure.

    `unresolved`: no episode of the group resolved the instance (Agent-RLVR's setting).
    `any_failure`: at least one episode failed.
    """
    if trigger not in TRIGGERS:
        raise ValueError(f"Unknown guidance.trigger {trigger!r}; choose one of: {', '.join(TRIGGERS)}.")
    grades = _by_episode(validations)
    chosen: dict[str, Failure] = {}
    for instance_id, rows in sorted(_groups(rollouts, guided=False).items()):
        graded = [(r, grades[r["episode_id"]]) for r in rows if r["episode_id"] in grades]
        failed = [(r, v) for r, v in graded if not v["infra_failure"] and not v["resolved"]]
        solved = any(v["resolved"] for _, v in graded)
        if failed and (trigger == "any_failure" or not solved):
            chosen[instance_id] = _representative(failed)
    return chosen


def _representative(failed: list[tuple[dict, dict]]) -> Failure:
    ran = [(r, v) for r, v in failed if v["patch_applied"] and r["patch"].strip()]
    rollout, grade = (ran or failed)[0]
    return Failure(episode_id=rollout["episode_id"], patch=rollout["patch"],
                   termination=rollout["termination"], format_errors=int(rollout["format_errors"]),
                   patch_applied=bool(grade["patch_applied"]),
                   f2p_failed=tuple(grade["f2p_failed"]), p2p_failed=tuple(grade["p2p_failed"]),
                   log_excerpt=grade["log_excerpt"])


def write_guidance(instances: dict[str, Instance], failures: dict[str, Failure],
                   source: GuidanceSource) -> list[Guidance]:
    """One guidance per failed instance, in instance-id order."""
    return [source.make(instances[iid], failures[iid]) for iid in sorted(failures)]


def build_pairs(rollouts: list[dict], validations: list[dict]) -> list[tuple[str, str]]:
    """Agent-RLVR's preference pairs: (guided success, unguided failure) of the same instance.

    Each guided success is paired with a distinct unguided failure while both last, in episode-id
    order, so a pair never repeats an episode and the result is deterministic. Infrastructure
    failures are never used as the rejected side: they say nothing about the policy.
    """
    grades = _by_episode(validations)

    def ok(row: dict, resolved: bool) -> bool:
        v = grades.get(row["episode_id"])
        return v is not None and not v["infra_failure"] and bool(v["resolved"]) == resolved

    unguided, guided = _groups(rollouts, guided=False), _groups(rollouts, guided=True)
    pairs = []
    for instance_id in sorted(guided):
        wins = sorted(r["episode_id"] for r in guided[instance_id] if ok(r, True))
        losses = sorted(r["episode_id"] for r in unguided.get(instance_id, []) if ok(r, False))
        pairs.extend(zip(wins, losses))
    return pairs


def recovery_metrics(rollouts: list[dict], validations: list[dict], failed_ids: Iterable[str],
                     guidance: list[Guidance] = ()) -> dict[str, float]:
    """Guided recovery rate, guided vs unguided resolve rate, pairs built and mean leakage."""
    grades = _by_episode(validations)
    failed_ids = set(failed_ids)

    def rate(rows: list[dict]) -> float:
        graded = [grades[r["episode_id"]] for r in rows if r["episode_id"] in grades]
        graded = [v for v in graded if not v["infra_failure"]]
        return sum(bool(v["resolved"]) for v in graded) / len(graded) if graded else 0.0

    guided_rows = [r for r in rollouts if r["guided"]]
    recovered = {r["instance_id"] for r in guided_rows
                 if grades.get(r["episode_id"], {}).get("resolved")}
    return {
        "guided_instances": float(len(failed_ids)),
        "guided_recovery_rate": len(recovered & failed_ids) / len(failed_ids) if failed_ids else 0.0,
        "guided_resolve_rate": rate(guided_rows),
        "unguided_resolve_rate": rate([r for r in rollouts if not r["guided"]]),
        "pairs_built": float(len(build_pairs(rollouts, validations))),
        "guidance_leakage": (sum(g.leakage for g in guidance) / len(guidance)) if guidance else 0.0,
    }
