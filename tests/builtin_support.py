"""The built-in instances that end-to-end tests iterate over.

The suite holds the hand-written instances (every tier) and many generated one-line mutants.
Rolling out or grading all of them would take far too long on CI's two cores, so these tests take
every hand-written instance plus an evenly spaced, deterministic sample of the generated ones
(instances.jsonl orders them by project, then number, so the sample spans every project).
"""

from __future__ import annotations

GENERATED_SAMPLE = 6


def builtin_sample(split: str | None = None, generated: int = GENERATED_SAMPLE) -> list:
    """Every hand-written instance of `split`, then `generated` generated ones spread evenly."""
    from swe_rlvr.builtin import load_builtin
    return load_builtin(split, kind="handwritten") + spaced(load_builtin(split, kind="mutation"),
                                                            generated)


def spaced(items: list, k: int) -> list:
    """`k` items at evenly spaced positions, first and last included (all of them if fewer)."""
    if len(items) <= k:
        return list(items)
    if k <= 1:
        return list(items[:k])
    return [items[round(i * (len(items) - 1) / (k - 1))] for i in range(k)]
