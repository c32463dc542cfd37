"""The one rule for what is a training sample (`swe_rlvr.artifacts.EpisodeOutcome`), and every
consumer of it: reward groups, DPO pairs, guidance selection, the verifier's data and the metrics.

The case that motivated it: an episode whose runner crashed (termination `error`) still has a
grade, of its empty patch, and was scored as reward 0 inside its group (advantage -0.577 beside
one success and one honest failure) and could be the rejected side of a DPO pair.
"""

from __future__ import annotations

import pytest

from agent.recovery import select_failed
from swe_rlvr.artifacts import dropped, outcomes
from swe_rlvr.config import AlgorithmConfig, RewardConfig
from tasks.metrics import recovery_metrics, rollout_summary
from trainer.pairs import build_pairs
from trainer.scoring import drop_counts, reward_rows
from trainer.verifier import verifier_examples


def roll(eid: str, iid: str = "X", guided: bool = False, termination: str = "submitted",
         patch: str = "diff") -> dict:
    return {"episode_id": eid, "instance_id": iid, "guided": guided, "termination": termination,
            "patch": patch, "turns": 3, "gen_tokens": 10, "gen_s": 1.0, "format_errors": 0}


def grade(eid: str, resolved: bool, infra: bool = False) -> dict:
    return {"episode_id": eid, "resolved": resolved, "infra_failure": infra, "tampered": False,
            "patch_applied": bool(resolved), "f2p_failed": [] if resolved else ["t::f2p"],
            "p2p_failed": [], "log_excerpt": ""}


# X: one success, one honest failure, one crash (graded: its empty patch resolved nothing), and a
# guided success. Y: only a crash. Z: an infrastructure failure and an ungraded episode.
ROLLOUTS = [roll("x/0"), roll("x/1"), roll("x/2", termination="error", patch=""),
            roll("x/g", guided=True), roll("y/0", "Y", termination="error", patch=""),
            roll("z/0", "Z"), roll("z/1", "Z")]
GRADES = [grade("x/0", True), grade("x/1", False), grade("x/2", False), grade("x/g", True),
          grade("y/0", False), grade("z/0", False, infra=True)]
CFG = RewardConfig(turn_penalty=False, overlong_penalty=False)


def test_the_sample_rule():
    reasons = {o.episode_id: o.drop_reason for o in outcomes(ROLLOUTS, GRADES)}
    assert reasons == {"x/0": "", "x/1": "", "x/2": "crash", "x/g": "", "y/0": "crash",
                       "z/0": "infra_failure", "z/1": "no_validation"}
    assert dropped(outcomes(ROLLOUTS, GRADES)) == {"dropped_ungraded": 1, "dropped_infra": 1,
                                                   "dropped_crash": 2}


def test_a_crash_joins_no_advantage_group():
    rows = {r["episode_id"]: r for r in reward_rows(ROLLOUTS, GRADES, CFG,
                                                     AlgorithmConfig(adv_eps=0.0), 100, "keep")}
    crash = rows["x/2"]
    assert (crash["drop_reason"], crash["kept"], crash["advantage"], crash["reward"]) == \
        ("crash", False, None, None)
    # X's unguided group is {x/0: 1, x/1: 0}: mean 0.5, sample std sqrt(0.5) -> +-0.7071 (with the
    # crash it was {1, 0, 0}: the crash got (0 - 1/3) / 0.577 = -0.577).
    assert rows["x/0"]["advantage"] == pytest.approx(0.5 / 0.5 ** 0.5)
    assert rows["x/1"]["advantage"] == pytest.approx(-0.5 / 0.5 ** 0.5)
    # x/g is a group of its own under `keep`: one reward, no signal (DAPO's dynamic sampling).
    assert drop_counts(list(rows.values())) == {"crash": 2, "infra_failure": 1, "no_validation": 1,
                                                "no_signal": 1}


def test_a_crash_is_never_a_dpo_pair_side():
    # The honest failure x/1 is the rejected side; without it, the crash x/2 is the only unguided
    # non-success of X, and there is no pair at all.
    assert build_pairs(outcomes(ROLLOUTS, GRADES)) == [("x/g", "x/1")]
    without_failure = [r for r in ROLLOUTS if r["episode_id"] != "x/1"]
    assert build_pairs(outcomes(without_failure, GRADES)) == []


def test_a_crash_gets_no_guidance_and_no_verifier_example():
    # Y's only episode crashed: nothing the policy did failed, so nothing to guide.
    assert list(select_failed(outcomes(ROLLOUTS, GRADES), "any_failure")) == ["X"]
    examples = verifier_examples(ROLLOUTS, GRADES, {"X": "issue", "Y": "issue", "Z": "issue"})
    assert [e.episode_id for e in examples] == ["x/0", "x/1", "x/g"]


def test_metrics_count_non_samples_and_rate_only_samples():
    m = rollout_summary(ROLLOUTS, GRADES)
    assert (m["dropped_crash"], m["dropped_infra"], m["dropped_ungraded"]) == (2.0, 1.0, 1.0)
    assert m["train_resolve_rate"] == pytest.approx(2 / 3)      # x/0, x/g of x/0, x/1, x/g
    r = recovery_metrics(outcomes(ROLLOUTS, GRADES), failed_ids=["X"])
    assert r["unguided_resolve_rate"] == pytest.approx(1 / 2) and r["pairs_built"] == 1.0
