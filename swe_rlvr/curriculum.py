"""Nebius's curriculum: the training pool keeps the instances the policy can still learn from.

Before each RL iteration, every instance's history of unguided attempts (samples only, see
`swe_rlvr.artifacts.EpisodeOutcome`) decides whether it stays in the pool:
- `solved_often`: its success rate reached `algorithm.curriculum_max_rate`: the policy has it;
- `never_solved`: `algorithm.curriculum_min_tries` attempts or more and not one success: too hard
  for now, and a group of zeros has no DAPO signal anyway.
Every other instance, including the ones never attempted yet, stays. Guided re-attempts do not
count: a hint's success is not the policy's. The history accumulates over the run's iterations.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from swe_rlvr.artifacts import EpisodeOutcome


@dataclass(frozen=True)
class Record:
    """One instance's unguided attempts and successes so far."""

    instance_id: str
    attempts: int = 0
    solved: int = 0

    @property
    def rate(self) -> float:
        return self.solved / self.attempts if self.attempts else 0.0


def accumulate(history: dict[str, Record], episodes: Iterable[EpisodeOutcome]
               ) -> dict[str, Record]:
    """`history` plus one iteration's episodes (unguided samples), as a new dict."""
    out = dict(history)
    for o in episodes:
        if o.is_sample and not o.guided:
            rec = out.get(o.instance_id, Record(o.instance_id))
            out[o.instance_id] = Record(o.instance_id, rec.attempts + 1, rec.solved + int(o.resolved))
    return out


def retire_reason(rec: Record, max_rate: float, min_tries: int) -> str:
    """Why `rec`'s instance leaves the pool ("" when it stays)."""
    if rec.attempts and rec.rate >= max_rate:
        return "solved_often"
    if rec.attempts >= min_tries and rec.solved == 0:
        return "never_solved"
    return ""


def to_rows(history: dict[str, Record], max_rate: float, min_tries: int) -> list[dict]:
    """CURRICULUM rows, in instance-id order."""
    return [{"instance_id": r.instance_id, "attempts": r.attempts, "solved": r.solved,
             "rate": r.rate, "retired": retire_reason(r, max_rate, min_tries)}
            for r in sorted(history.values(), key=lambda r: r.instance_id)]


def from_rows(rows: Iterable[dict]) -> dict[str, Record]:
    return {r["instance_id"]: Record(r["instance_id"], int(r["attempts"]), int(r["solved"]))
            for r in rows}


def mixed(history: dict[str, Record], limit: int) -> list[str]:
    """The first `limit` instances (in `history`'s order) whose attempts were split between
    resolved and unresolved: the groups that carry a DAPO signal at this policy (0: all)."""
    split = [r.instance_id for r in history.values() if 0 < r.solved < r.attempts]
    return split[:limit] if limit else split
