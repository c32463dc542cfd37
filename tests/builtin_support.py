"""The built-in instances that end-to-end tests iterate over.

The suite holds the hand-written instances (every tier) and many generated one-line mutants.
Rolling out or grading all of them would take far too long on CI's two cores, so these tests take
every hand-written instance plus an evenly spaced, deterministic sample of the easy tier's generated
ones (instances.jsonl orders them by project, then number, so the sample spans the first four
projects). The `generated` tier is left out here, so the sample stays what it was before that tier
existed; tests/test_builtin_mutations.py grades one instance of each project, tier and split.
"""

from __future__ import annotations

GENERATED_SAMPLE = 6


def builtin_sample(split: str | None = None, generated: int = GENERATED_SAMPLE) -> list:
    """Every hand-written instance of `split`, then `generated` of the easy tier's generated ones
    spread evenly."""
    from swe_rlvr.builtin import load_builtin
    easy = [i for i in load_builtin(split, kind="mutation") if i.difficulty == "easy"]
    return load_builtin(split, kind="handwritten") + spaced(easy, generated)


def spaced(items: list, k: int) -> list:
    """`k` items at evenly spaced positions, first and last included (all of them if fewer)."""
    if len(items) <= k:
        return list(items)
    if k <= 1:
        return list(items[:k])
    return [items[round(i * (len(items) - 1) / (k - 1))] for i in range(k)]
