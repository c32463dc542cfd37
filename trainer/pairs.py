"""Agent-RLVR's preference pairs for DPO: (guided success, unguided failure) of one instance.

Only samples (`swe_rlvr.artifacts.EpisodeOutcome.is_sample`) are paired: an infrastructure failure
or a crash says nothing about the policy, so it is never the rejected side, and a guided episode
that crashed is never the chosen one.
"""

from __future__ import annotations

from collections import defaultdict

from swe_rlvr.artifacts import EpisodeOutcome


def build_pairs(episodes: list[EpisodeOutcome]) -> list[tuple[str, str]]:
    """(chosen, rejected) episode ids. Each guided success is paired with a distinct unguided
    failure while both last, in episode-id order, so a pair never repeats an episode and the
    result is deterministic."""
    wins: dict[str, list[str]] = defaultdict(list)
    losses: dict[str, list[str]] = defaultdict(list)
    for o in episodes:
        if o.is_sample and o.guided and o.resolved:
            wins[o.instance_id].append(o.episode_id)
        elif o.is_sample and not o.guided and not o.resolved:
            losses[o.instance_id].append(o.episode_id)
    pairs: list[tuple[str, str]] = []
    for instance_id in sorted(wins):
        pairs.extend(zip(sorted(wins[instance_id]), sorted(losses.get(instance_id, []))))
    return pairs
