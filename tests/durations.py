"""Longest scopes first: the order in which pytest-xdist hands test scopes to its workers.

Every tier runs under `--dist loadscope`: the tests of one scope (a module, or a class within
one) go to one worker, which takes the next scope from the queue when it is done. With two
workers, the stage ends when the slower worker does, so the order of the queue decides how long
the workers end apart: a 7-minute module that starts last runs alone for 7 minutes. Handing
out the longest scopes first (longest-processing-time-first, within 4/3 of the best order) keeps
that tail short. xdist's own reordering (by the number of tests in a scope) knows nothing of
their length, so the suite turns it off (`--no-loadscope-reorder`) and sorts the collection
itself, by the seconds each scope took in that stage when they were last recorded here:

    SWE_RLVR_TEST_DURATIONS=tests/durations.json make test     # refresh the record

A scope missing from the record (a new test file) goes first, where a long one costs least; a
stage with no record keeps xdist's order (most tests first). A stale record costs minutes, never
a result: only the order changes.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

RECORD = Path(__file__).with_name("durations.json")
ENV = "SWE_RLVR_TEST_DURATIONS"


def scope_of(nodeid: str) -> str:
    """The loadscope scope of a test id: everything before its last `::` (as pytest-xdist)."""
    return nodeid.rsplit("::", 1)[0]


def ordered(nodeids: Sequence[str], seconds: Mapping[str, float]) -> list[int]:
    """Indices of the tests in the order to run them: scope by scope (a scope's tests stay
    together and in their order, so a module's fixtures are built once even without xdist), the
    longest recorded scope first and an unrecorded one before all. A stage with no record keeps
    xdist's own order: the scopes with the most tests first."""
    scopes = [scope_of(n) for n in nodeids]
    first: dict[str, int] = {}
    for i, scope in enumerate(scopes):
        first.setdefault(scope, i)
    tests = Counter(scopes)

    def key(i: int) -> tuple[float, int, int]:
        scope = scopes[i]
        primary = -seconds.get(scope, math.inf) if seconds else -tests[scope]
        return primary, first[scope], i

    return sorted(range(len(nodeids)), key=key)


def load(path: Path = RECORD) -> dict[str, dict[str, float]]:
    """The recorded seconds per scope, one table per stage (its `-m` expression: a module with
    unit and e2e tests is one scope in each stage, of different lengths); empty without a record."""
    return json.loads(path.read_text()) if path.exists() else {}


def merged(old: Mapping[str, Mapping[str, float]], stage: str,
           new: Mapping[str, float]) -> dict[str, dict[str, float]]:
    """The record after a run of `stage`: its scopes at their new seconds, every other kept (the
    run may have been a part of the stage, or one stage of several), sorted and rounded to a
    tenth of a second."""
    tables = {name: dict(table) for name, table in old.items()}
    tables[stage] = {**tables.get(stage, {}), **new}
    return {name: {scope: round(s, 1) for scope, s in sorted(table.items())}
            for name, table in sorted(tables.items())}
