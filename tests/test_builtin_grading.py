"""Built-in instances: the gold patch resolves each and the empty patch does not (local backend).

Graded in parallel with `grade_many` through the real sandbox and real pytest runs; this is the
check that the shipped suite and the grader agree. It covers every hand-written instance and a
deterministic sample of the generated ones (`builtin_sample`; all of them would take far too
long), and takes about a minute on two cores.
"""

from __future__ import annotations

import pytest

from builtin_support import builtin_sample
from sandbox.grading import grade_many
from test_sandbox_support import sandbox_config

builtin = pytest.importorskip("swe_rlvr.builtin", reason="the built-in suite is not installed")


@pytest.mark.e2e
def test_gold_resolves_and_empty_does_not_for_every_builtin_instance(tmp_path):
    instances = builtin_sample()
    cfg = sandbox_config(tmp_path)
    items = [(i, i.patch, "gold") for i in instances] + [(i, "", "empty") for i in instances]
    reports = grade_many(items, cfg, tmp_path / "repos", workers=4, progress=False)
    infra = [(r.instance_id, r.infra_reason[:200]) for r in reports if r.infra_failure]
    assert infra == []
    unresolved_gold = [r.instance_id for r in reports if r.episode_id == "gold" and not r.resolved]
    resolved_empty = [r.instance_id for r in reports if r.episode_id == "empty" and r.resolved]
    assert unresolved_gold == [] and resolved_empty == []
    assert all(r.f2p_failed == () for r in reports if r.episode_id == "gold")
