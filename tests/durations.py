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

A scope missing from the record (a new test file) goes first, where a long one costs least. A
stale record costs minutes, never a result: only the order changes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path

RECORD = Path(__file__).with_name("durations.json")
ENV = "SWE_RLVR_TEST_DURATIONS"


def scope_of(nodeid: str) -> str:
    """The loadscope scope of a test id: everything before its last `::` (as pytest-xdist)."""
    return nodeid.rsplit("::", 1)[0]


def order_key(nodeid: str, seconds: Mapping[str, float]) -> float:
    """Sort key of a test: minus its scope's recorded seconds; an unrecorded scope sorts first."""
    return -seconds.get(scope_of(nodeid), math.inf)


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
