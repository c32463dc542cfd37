"""Guided recovery on hand-made groups: selection, pairs and metrics."""

from __future__ import annotations

import pytest

from agent.guidance_sources import Guidance
from agent.recovery import select_failed
from swe_rlvr.artifacts import outcomes
from tasks.metrics import recovery_metrics
from trainer.pairs import build_pairs


def roll(eid: str, iid: str, guided: bool = False, patch: str = "diff", termination: str = "submitted"):
    return {"episode_id": eid, "instance_id": iid, "guided": guided, "patch": patch,
            "termination": termination, "format_errors": 0}


def grade(eid: str, resolved: bool, infra: bool = False, applied: bool = True):
    return {"episode_id": eid, "resolved": resolved, "infra_failure": infra, "patch_applied": applied,
            "f2p_failed": [] if resolved else ["t::f2p"], "p2p_failed": [], "log_excerpt": "E  boom"}


# Instance A: 3 unguided failures (a1 empty patch), then 2 guided successes and 1 guided failure.
# Instance B: one unguided success, one unguided failure.
# Instance C: only infrastructure failures.
ROLLOUTS = [roll("a1", "A", patch=""), roll("a2", "A"), roll("a3", "A"),
            roll("b1", "B"), roll("b2", "B"), roll("c1", "C"),
            roll("ga1", "A", guided=True), roll("ga2", "A", guided=True), roll("ga3", "A", guided=True)]
GRADES = [grade("a1", False), grade("a2", False), grade("a3", False),
          grade("b1", True), grade("b2", False), grade("c1", False, infra=True),
          grade("ga1", True), grade("ga2", False), grade("ga3", True)]
EPISODES = outcomes(ROLLOUTS, GRADES)


def test_unresolved_trigger_picks_groups_with_no_success():
    failed = select_failed(EPISODES, "unresolved")
    # B has a success; C has only infrastructure failures: neither gets guidance.
    assert list(failed) == ["A"]
    # The representative is the first failure whose (non-empty) patch applied: a2, not a1.
    assert failed["A"].episode_id == "a2" and failed["A"].f2p_failed == ("t::f2p",)


def test_any_failure_trigger_includes_partially_solved_groups():
    assert list(select_failed(EPISODES, "any_failure")) == ["A", "B"]
    with pytest.raises(ValueError, match="guidance.trigger"):
        select_failed(EPISODES, "sometimes")


def test_pairs_match_each_guided_success_with_a_distinct_unguided_failure():
    # A's guided successes ga1, ga3 pair with A's unguided failures a1, a2 in id order; a3 is left
    # over; ga2 failed so it is never chosen; B has no guided episodes; C's infra failure never counts.
    assert build_pairs(EPISODES) == [("ga1", "a1"), ("ga3", "a2")]


def test_recovery_metrics_by_hand():
    guidance = [Guidance("A", "a2", "p", "f", "l", "rules", leakage=0.5).to_row()]
    m = recovery_metrics(EPISODES, failed_ids=["A"], guidance=guidance)
    assert m["guided_recovery_rate"] == 1.0          # A recovered (ga1)
    assert m["guided_resolve_rate"] == pytest.approx(2 / 3)   # ga1, ga3 of ga1..ga3
    # Unguided, non-infra: a1 a2 a3 b1 b2 -> one success of five (c1 is infra, excluded).
    assert m["unguided_resolve_rate"] == pytest.approx(1 / 5)
    assert m["pairs_built"] == 2.0 and m["guidance_leakage"] == 0.5
