"""Guided recovery (Agent-RLVR): which instances get guidance, from which failure and which source.

Functions take `swe_rlvr.artifacts.EpisodeOutcome`s (rollout rows joined with their grades), so
they are pure and can be tested on hand-made rows. The pairs that train the policy with DPO are
`trainer.pairs`; the recovery metrics are `tasks.metrics.recovery_metrics`.

Simplifications: only samples count (an instance whose episodes were all infrastructure failures
or crashes gets no guidance: it has no failure to learn from, only a broken environment). When an
instance failed several times, the guidance is written from one representative failure: the first
whose patch applied and ran the tests, else the first failure; the paper does not say which
failure the teacher sees.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import get_args

from agent.guidance_sources import PARTS, Failure, Guidance, GuidanceSource, ReadBase, RulesSource
from swe_rlvr.artifacts import EpisodeOutcome
from swe_rlvr.config import GuidanceConfig, GuidanceTrigger
from swe_rlvr.instances import Instance

TRIGGERS = get_args(GuidanceTrigger)


def select_failed(episodes: list[EpisodeOutcome], trigger: str = "unresolved") -> dict[str, Failure]:
    """Instances that get guidance, each with its representative failure (unguided samples only).

    `unresolved`: no episode of the group resolved the instance (Agent-RLVR's setting).
    `any_failure`: at least one episode failed.
    """
    if trigger not in TRIGGERS:
        raise ValueError(f"Unknown guidance.trigger {trigger!r}; choose one of: {', '.join(TRIGGERS)}.")
    groups: dict[str, list[EpisodeOutcome]] = defaultdict(list)
    for o in episodes:
        if o.is_sample and not o.guided:
            groups[o.instance_id].append(o)
    chosen: dict[str, Failure] = {}
    for instance_id, group in sorted(groups.items()):
        failed = [o for o in group if not o.resolved]
        solved = len(failed) < len(group)
        if failed and (trigger == "any_failure" or not solved):
            chosen[instance_id] = _representative(failed)
    return chosen


def _representative(failed: list[EpisodeOutcome]) -> Failure:
    ran = [o for o in failed if o.grade["patch_applied"] and o.rollout["patch"].strip()]
    o = (ran or failed)[0]
    rollout, grade = o.rollout, o.grade
    return Failure(episode_id=rollout["episode_id"], patch=rollout["patch"],
                   termination=rollout["termination"], format_errors=int(rollout["format_errors"]),
                   patch_applied=bool(grade["patch_applied"]),
                   f2p_failed=tuple(grade["f2p_failed"]), p2p_failed=tuple(grade["p2p_failed"]),
                   log_excerpt=grade["log_excerpt"])


def write_guidance(instances: dict[str, Instance], failures: dict[str, Failure],
                   source: GuidanceSource) -> list[Guidance]:
    """One guidance per failed instance, in instance-id order."""
    return [source.make(instances[iid], failures[iid]) for iid in sorted(failures)]


def make_source(cfg: GuidanceConfig, read_base: ReadBase, cache_dir: Path | None = None) -> GuidanceSource:
    """The guidance source named by `cfg.source` (`agent.guidance_sources`' rules, or
    `agent.teacher`, imported only when asked for)."""
    bad = [p for p in cfg.parts if p not in PARTS]
    if bad:
        raise ValueError(f"Unknown guidance part(s) {bad} in guidance.parts; choose from {PARTS}.")
    if cfg.source == "rules":
        return RulesSource(read_base, cfg)
    if cfg.source == "teacher":
        if not cfg.teacher_base_url or not cfg.teacher_model:
            raise ValueError("guidance.source=teacher needs guidance.teacher_base_url and "
                             "guidance.teacher_model (an OpenAI-compatible server).")
        from agent.teacher import TeacherSource
        return TeacherSource(read_base, cfg, cache_dir)
    raise ValueError(f"Unknown guidance source {cfg.source!r}; choose one of: rules, teacher.")
