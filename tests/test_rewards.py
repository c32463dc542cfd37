"""Rewards: Nebius turn penalty, DAPO soft overlong penalty, format penalty, infra = no sample."""

from __future__ import annotations

import pytest

from swe_rlvr.artifacts import REWARDS
from swe_rlvr.config import AlgorithmConfig, RewardConfig
from tasks.metrics import reward_summary
from trainer.rewards import overlong_penalty, reward, turn_penalty
from trainer.scoring import drop_counts, reward_rows

CFG = RewardConfig(turn_penalty=True, l_thr=20, t_max=40)


def test_turn_penalty_hand_values():
    assert turn_penalty(10, 20, 40) == 0.0
    assert turn_penalty(20, 20, 40) == 0.0             # at L_thr: (20-20)/20 = 0
    assert turn_penalty(30, 20, 40) == -0.5            # (20-30)/(40-20) = -10/20
    assert turn_penalty(40, 20, 40) == -1.0            # (20-40)/20 = -1
    assert turn_penalty(55, 20, 40) == -1.0            # (20-55)/20 = -1.75, clamped at -1


def test_turn_penalty_rejects_bad_thresholds():
    with pytest.raises(ValueError, match="t_max"):
        turn_penalty(5, 20, 20)


def test_overlong_penalty_hand_values():
    # L_max 100, buffer 20: free up to 80 tokens, then (80 - L)/20, -1 from 100 on
    assert overlong_penalty(80, 100, 20) == 0.0
    assert overlong_penalty(90, 100, 20) == -0.5       # (80-90)/20
    assert overlong_penalty(100, 100, 20) == -1.0
    assert overlong_penalty(130, 100, 20) == -1.0      # (80-130)/20 = -2.5 -> clamp


def test_reward_parts_and_total():
    parts = reward(True, turns=30, gen_tokens=0, format_errors=0, cfg=CFG, max_gen_tokens=100)
    assert (parts.resolved, parts.turns, parts.total) == (1.0, -0.5, 0.5)   # 1 + (-0.5)
    fail = reward(False, turns=10, gen_tokens=0, format_errors=0, cfg=CFG, max_gen_tokens=100)
    assert fail.total == 0.0


def test_a_tampered_grade_costs_the_tamper_penalty():
    """A patch whose canary tests had the wrong outcome changed how the tests run: its resolved
    part is `reward.tamper_penalty` (-1), below an honest failure's 0, so tampering never pays."""
    parts = reward(True, turns=30, gen_tokens=0, format_errors=0, cfg=CFG, max_gen_tokens=100,
                   tampered=True)
    assert (parts.resolved, parts.total) == (-1.0, -1.5)                    # -1 + (-0.5) turns
    mild = RewardConfig(turn_penalty=False, tamper_penalty=-0.25)
    assert reward(False, 5, 0, 0, mild, 100, tampered=True).total == -0.25
    grades = [{"episode_id": "a", "resolved": True, "infra_failure": False, "tampered": True},
              {"episode_id": "b", "resolved": False, "infra_failure": False, "tampered": False}]
    rows = reward_rows([_rollout("a", "x"), _rollout("b", "x")], grades, CFG,
                       AlgorithmConfig(adv_eps=0.0), max_gen_tokens=100, guidance_mode="strip")
    assert [r["reward"] for r in rows] == [-1.0, 0.0]                         # 5 turns: no penalty
    # mean -0.5, sample std sqrt((0.25 + 0.25) / 1) = 0.7071: (r - mean) / std = -/+ 0.7071
    assert [r["advantage"] for r in rows] == pytest.approx([-0.7071068, 0.7071068])


def test_overlong_and_format_penalties_add_up():
    cfg = RewardConfig(turn_penalty=False, overlong_penalty=True, overlong_buffer=20, format_penalty=0.1)
    parts = reward(True, turns=5, gen_tokens=90, format_errors=3, cfg=cfg, max_gen_tokens=100)
    # 1 (resolved) + 0 (turns off) - 0.5 (overlong: (80-90)/20) - 0.3 (3 x 0.1)
    assert parts.overlong == -0.5 and parts.format == pytest.approx(-0.3)
    assert parts.total == pytest.approx(0.2)


def test_overlong_episode_stays_as_failure():
    """A turn-limited, unresolved episode keeps its negative reward; it is not dropped."""
    parts = reward(False, turns=40, gen_tokens=0, format_errors=0, cfg=CFG, max_gen_tokens=100)
    assert parts.total == -1.0


def _rollout(eid, iid, turns=5, guided=False):
    return {"episode_id": eid, "instance_id": iid, "guided": guided, "turns": turns,
            "gen_tokens": 10, "format_errors": 0, "termination": "submitted"}


def test_reward_rows_group_advantages_and_drops():
    rollouts = [_rollout("a0", "a"), _rollout("a1", "a"), _rollout("a2", "a"),
                _rollout("b0", "b"), _rollout("b1", "b")]
    grades = [{"episode_id": "a0", "resolved": True, "infra_failure": False},
              {"episode_id": "a1", "resolved": False, "infra_failure": False},
              {"episode_id": "a2", "resolved": False, "infra_failure": True},
              {"episode_id": "b0", "resolved": False, "infra_failure": False},
              {"episode_id": "b1", "resolved": False, "infra_failure": False}]
    rows = reward_rows(rollouts, grades, CFG, AlgorithmConfig(adv_eps=0.0), max_gen_tokens=100,
                       guidance_mode="strip")
    assert set(rows[0]) == set(REWARDS.names)
    # group a = rewards [1, 0] (a2 is an infra failure, out of the group): mean 0.5,
    # sample std sqrt(((0.5)^2 + (0.5)^2)/1) = 0.7071 -> advantages +-0.7071
    assert rows[0]["advantage"] == pytest.approx(0.70710678)
    assert rows[1]["advantage"] == pytest.approx(-0.70710678)
    assert rows[2]["reward"] is None and rows[2]["drop_reason"] == "infra_failure"
    assert [r["drop_reason"] for r in rows[3:]] == ["no_signal", "no_signal"]
    assert drop_counts(rows) == {"infra_failure": 1, "no_signal": 2}
    assert reward_summary(rows, "strip")["zero_advantage_group_fraction"] == 0.5  # b of a, b


def test_a_stripped_guided_success_scores_in_its_instance_group():
    """Instance c: two unguided failures trigger guidance; its one guided re-attempt succeeds.
    Trained as if unguided (strip, pairs), the success joins c's group: rewards [0, 0, 1],
    mean 1/3, sample std sqrt(((1/3)^2 + (1/3)^2 + (2/3)^2) / 2) = sqrt(1/3) = 0.57735, so
    advantages -0.57735, -0.57735, +1.1547. Under keep it is a group of one beside an all-fail
    group: both carry no signal and DAPO drops all three."""
    rollouts = [_rollout("c0", "c"), _rollout("c1", "c"), _rollout("g0", "c", guided=True)]
    grades = [{"episode_id": e, "resolved": e == "g0", "infra_failure": False}
              for e in ("c0", "c1", "g0")]
    algo = AlgorithmConfig(adv_eps=0.0)
    for mode in ("strip", "pairs"):
        rows = reward_rows(rollouts, grades, CFG, algo, max_gen_tokens=100, guidance_mode=mode)
        assert [r["advantage"] for r in rows] == pytest.approx([-0.57735027, -0.57735027, 1.1547005])
        assert all(r["kept"] for r in rows)
        assert reward_summary(rows, mode)["zero_advantage_group_fraction"] == 0.0
    rows = reward_rows(rollouts, grades, CFG, algo, max_gen_tokens=100, guidance_mode="keep")
    assert [r["drop_reason"] for r in rows] == ["no_signal"] * 3
    assert reward_summary(rows, "keep")["zero_advantage_group_fraction"] == 1.0
