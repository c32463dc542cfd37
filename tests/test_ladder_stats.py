"""The ladder's intervals over instances and what its report reads from a run directory.

The bootstrap cases are small enough that every resample can be enumerated by hand: with n
instances there are n^n equally likely resamples, and the 2.5th / 97.5th percentiles of their
means are found from the distribution of how many times each instance is drawn. The run
directories are tiny but real: Parquet artifacts written by `tasks.store` in the schemas the flows
write, read back by the report's own readers.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from swe_rlvr.artifacts import SCHEMAS
from tasks import store
from tasks.ladder_report import complete, recorded, signal_groups, training_curve, write_curves, write_report
from tasks.ladder_stats import (
    arm_interval,
    bootstrap_mean,
    comparison_rows,
    excludes_zero,
    instances_needed,
    mdd,
    paired_difference,
    percentile_bounds,
    pool,
    proportion_interval,
    statements,
    tally,
    trend,
)

# --------------------------------------------------------------------------- the bootstrap


def test_bootstrap_of_three_instances_matches_the_enumerated_resamples():
    # d = [1, 0, 0]: a resample's mean is k/3 with k ~ Binomial(3, 1/3) draws of the first one:
    # P(k=0) = 8/27 = 0.296, P(1) = 12/27, P(2) = 6/27, P(3) = 1/27 = 0.037.
    # 2.5th percentile: P(k=0) > 0.025, so 0. 97.5th: P(k <= 2) = 26/27 = 0.963 < 0.975, so 1.
    mean, low, high = bootstrap_mean(np.array([1.0, 0.0, 0.0]))
    assert mean == pytest.approx(1 / 3)
    assert (low, high) == (0.0, 1.0)


def test_bootstrap_is_seeded_and_one_instance_has_no_interval():
    values = np.array([0.0, 0.25, 0.5, 1.0, 1.0])
    assert bootstrap_mean(values, seed=3) == bootstrap_mean(values, seed=3)
    mean, low, high = bootstrap_mean(np.array([0.5]))
    assert mean == 0.5 and math.isnan(low) and math.isnan(high)
    with pytest.raises(ValueError, match="at least one instance"):
        bootstrap_mean(np.array([]))


def test_identical_arms_give_a_zero_width_interval_at_zero():
    # every d_i = 0, so every resample's mean is 0; unpaired, these arms' rates (1, 1, 0, 0)
    # would spread a resampled difference over [-1, 1]
    arm = {"a": (1, 1), "b": (1, 1), "c": (0, 1), "d": (0, 1)}
    row = paired_difference(arm, dict(arm))
    assert (row["diff"], row["low"], row["high"]) == (0.0, 0.0, 0.0)
    assert not excludes_zero(row)


def test_a_bound_at_zero_up_to_float_rounding_does_not_exclude_zero():
    # 0.1 + 0.2 - 0.3 is 5.55e-17 in floats: a resampled mean of fractions that is exactly 0
    # can read as a hair above (or below) it. Half the samples there, half at 0.5: the 2.5th
    # percentile is that 0, the 97.5th is 0.5.
    hair = 0.1 + 0.2 - 0.3
    assert hair != 0
    low, high = percentile_bounds(np.array([hair] * 50 + [0.5] * 50))
    assert (low, high) == (0.0, 0.5) and not excludes_zero({"low": low, "high": high})
    low, _ = percentile_bounds(np.array([-hair] * 50 + [0.5] * 50))
    assert math.copysign(1, low) == 1.0                    # 0.0, never printed as -0.000
    assert percentile_bounds(np.array([1 / 861] * 10)) == (round(1 / 861, 12),) * 2


def test_pairing_cancels_instance_difficulty():
    # A beats B by one episode in two on each instance: d = [0.5, 0.5] whatever the instance,
    # so every resample's mean is 0.5 and the interval [0.5, 0.5] excludes 0.
    a = {"easy": (2, 2), "hard": (1, 2)}
    b = {"easy": (1, 2), "hard": (0, 2), "only_b": (1, 2)}           # unshared: left out
    row = paired_difference(a, b)
    assert (row["diff"], row["low"], row["high"]) == (0.5, 0.5, 0.5)
    assert row["instances"] == 2 and row["rate_a"] == 0.75 and row["rate_b"] == 0.25
    assert excludes_zero(row)
    with pytest.raises(ValueError, match="share no evaluation instance"):
        paired_difference({"x": (1, 1)}, {"y": (1, 1)})


def test_tally_and_pool_count_each_instances_episodes():
    rows = [{"instance_id": "b", "resolved": True}, {"instance_id": "a", "resolved": False},
            {"instance_id": "b", "resolved": False}]
    assert tally(rows) == {"a": (0, 1), "b": (1, 2)}
    # seed 0 {a: 0/1, b: 1/2} + seed 1 {b: 2/2} -> a 0/1, b 3/4
    assert pool([tally(rows), {"b": (2, 2)}]) == {"a": (0, 1), "b": (3, 4)}
    # rates 0 and 0.75: mean 0.375; resamples of 2: (0,0) (0,.75) (.75,0) (.75,.75), each 1/4,
    # means 0, .375, .375, .75: the 2.5th percentile 0 and the 97.5th 0.75
    assert arm_interval(pool([tally(rows), {"b": (2, 2)}])) == (0.375, 0.0, 0.75)


# --------------------------------------------------------------------------- the design


def test_mdd_of_the_full_design_and_its_inverse():
    # n=30 instances, r=4 runs, S=3 seeds, p=0.1: 2 p (1-p) / (n r S) = 0.18 / 360 = 0.0005,
    # sqrt = 0.0223607; z_0.975 + z_0.8 = 1.959964 + 0.841621 = 2.801585 -> MDD = 0.062645
    assert mdd(30, 4, 3, 0.1) == pytest.approx(0.062645, abs=1e-6)
    # to detect 0.05 at r=4, S=3, p=0.1: 2.801585^2 * 0.18 / (12 * 0.0025) = 7.848879 * 6
    # = 47.09 -> 48 instances
    assert instances_needed(0.05, 4, 3, 0.1) == 48
    assert instances_needed(-0.05, 4, 3, 0.1) == 48                  # the size, not the sign
    assert instances_needed(mdd(30, 4, 3, 0.1) * 1.001, 4, 3, 0.1) == 30
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        mdd(30, 4, 3, 0.0)
    with pytest.raises(ValueError, match="zero difference"):
        instances_needed(0.0, 4, 3, 0.1)


def test_wilson_interval_of_small_counts():
    # z = 1.959964, z^2 = 3.841459. 1 of 3: centre (1/3 + z^2/6) / (1 + z^2/3) = 0.973576 /
    # 2.280486 = 0.426916; half z / 2.280486 * sqrt(2/27 + z^2/36) = 0.859450 * 0.425184
    # = 0.365424 -> [0.061492, 0.792340]
    assert proportion_interval(1, 3) == pytest.approx((1 / 3, 0.061492, 0.792340), abs=2e-6)
    # 2 of 6: centre 0.653455 / 1.640243 = 0.398390; half 1.194923 * sqrt(1/27 + z^2/144)
    # = 1.194923 * 0.252416 = 0.301617 -> [0.096772, 0.700006]
    assert proportion_interval(2, 6) == pytest.approx((1 / 3, 0.096772, 0.700006), abs=2e-6)
    # 0 of 2: centre (z^2/4) / (1 + z^2/2) = 0.328810 and half the same: [0, 0.657620], where
    # the normal approximation would give [0, 0]
    assert proportion_interval(0, 2) == pytest.approx((0.0, 0.0, 0.657620), abs=2e-6)
    # 1 of 1: centre 2.920729 / 4.841459 = 0.603274, half 0.404829 * 0.979982 = 0.396725; the
    # upper bound is 1 (up to rounding, clipped)
    rate, low, high = proportion_interval(1, 1)
    assert (rate, high) == (1.0, pytest.approx(1.0)) and low == pytest.approx(0.206549, abs=2e-6)
    assert all(math.isnan(v) for v in proportion_interval(0, 0))
    with pytest.raises(ValueError, match="0 <= successes <= trials"):
        proportion_interval(3, 2)


# --------------------------------------------------------------------------- the statements


def _results() -> dict[str, list[dict]]:
    """Two seeds, four test instances, one run each: base and warmup solve nothing, rft solves
    w on both seeds, dapo solves everything."""
    ids = ["w", "x", "y", "z"]

    def arm(solved: set[str]) -> list[dict]:
        return [_seed_row(seed, {i: [int(i in solved), 1] for i in ids}) for seed in (0, 1)]
    return {"base": arm(set()), "warmup": arm(set()), "rft": arm({"w"}), "dapo": arm(set(ids))}


def _seed_row(seed: int, instances: dict, training: dict | None = None) -> dict:
    pass1 = sum(r for r, _ in instances.values()) / len(instances)
    return {"seed": seed, "pass1": pass1, "pass1_by_step": {"0": pass1}, "instances": instances,
            "training": training or {}, "format_error_rate": 0.0, "submit_rate": 1.0,
            "mean_turns": 3.0, "wall_s": 60.0, "times": {"eval": 60.0}, "run_dir": f"r{seed}",
            "mlflow_run_id": f"m{seed}"}


def test_trend_of_a_rising_curve_and_its_enumerated_resamples():
    # a: 0/2, 1/2, 2/2; b: 0/2, 0/2, 1/2 -> curve 0, 1/4, 3/4 over iterations 0, 1, 2: slope
    # (y2 - y0) / 2 = 0.375. Resamples of 2 instances: {a, a} (1/4) 0, .5, 1 -> 0.5; {b, b} (1/4)
    # 0, 0, .5 -> 0.25; {a, b} (1/2) -> 0.375. 2.5th percentile 0.25, 97.5th 0.5.
    # c is sampled in iteration 0 only: left out.
    by_iteration = {"0": {"a": (0, 2), "b": (0, 2), "c": (2, 2)},
                    "1": {"a": (1, 2), "b": (0, 2)},
                    "2": {"a": (2, 2), "b": (1, 2)}}
    found = trend(by_iteration)
    assert found == pytest.approx({"slope": 0.375, "low": 0.25, "high": 0.5, "first": 0.0,
                                   "last": 0.75, "instances": 2, "iterations": 3})
    assert excludes_zero(found)


def test_trend_of_a_falling_curve_a_single_instance_and_too_little():
    # one instance: 3/4, 2/4, 1/4 at iterations 1, 2, 3 -> slope -0.25, no interval
    one = trend({"1": {"a": (3, 4)}, "2": {"a": (2, 4)}, "3": {"a": (1, 4)}})
    assert one["slope"] == pytest.approx(-0.25) and math.isnan(one["low"])
    assert trend({"0": {"a": (1, 2)}}) is None                       # one iteration
    assert trend({"0": {"a": (1, 2)}, "1": {"b": (1, 2)}}) is None   # no common instance


def test_statements_claim_an_ordering_only_where_the_interval_excludes_zero():
    pairs = comparison_rows(_results())
    pooled = {(r["a"], r["b"]): r for r in pairs if r["seed"] == "pooled"}
    assert set(pooled) == {("warmup", "base"), ("rft", "warmup"), ("dapo", "rft"),
                           ("dapo", "warmup")}                   # no dapo_guided result
    assert len(pairs) == 4 * 3                                    # pooled + 2 seeds each
    lines = statements(pairs)
    by_pair = dict(zip(pooled, lines))
    # dapo - warmup: d = 1 on every instance -> [1, 1]
    assert "**dapo − warmup = +1.000" in by_pair["dapo", "warmup"]
    assert "dapo's pass@1 on these test instances is above warmup's" in by_pair["dapo", "warmup"]
    assert "exclude 0 in 2 of 2 seed(s)" in by_pair["dapo", "warmup"]
    assert "do not overlap" in by_pair["dapo", "warmup"]
    # rft - warmup: d = [1, 0, 0, 0] pooled; P(mean >= .75) = 4 (1/4)^3 (3/4) + (1/4)^4 = 0.051
    # > 0.025 and P(mean = 1) = 0.004 < 0.025, so [0, 0.75]: no claim. Needed at the measured
    # 0.25 and p = (0.25 + 0) / 2 = 0.125, 1 run, 2 seeds: 7.848879 * 2 * 0.125 * 0.875 /
    # (1 * 2 * 0.0625) = 13.74 -> 14 instances
    assert "[+0.000, +0.750]" in by_pair["rft", "warmup"]
    assert "does not show a difference" in by_pair["rft", "warmup"]
    assert "needs about 14 instances; this evaluation has 4" in by_pair["rft", "warmup"]
    assert "above" not in by_pair["rft", "warmup"]
    assert "no measured difference" in by_pair["warmup", "base"]


def test_report_has_every_section_and_the_curves_plot(tmp_path):
    results = _results()
    training = {"0": {"train_resolve_rate": 0.25, "train_samples": 8, "groups": 2,
                      "signal_groups": 1, "guided_instances": 1, "guided_recovered": 1,
                      "train_tally": {"a": [2, 4], "b": [0, 4]}},
                "1": {"train_resolve_rate": 0.5, "train_samples": 8, "groups": 2,
                      "signal_groups": 2, "guided_instances": 2, "guided_recovered": 0,
                      "train_tally": {"a": [2, 4], "b": [2, 4]}}}
    results["dapo_guided"] = [dict(s, training=training) for s in results["dapo"]]
    text = write_report(tmp_path / "report.md", results, ["# ladder"])
    for section in ("## Arms", "## Paired comparisons", "## What the intervals support",
                    "## Training curves", "## Guided recovery (dapo_guided)", "## Cost per arm",
                    "## Per seed"):
        assert section in text, section
    assert "| dapo | 2 | 1.000 | [1.000, 1.000] | [1.000, 1.000] | 4 | 4 |" in text
    assert "| dapo_guided − dapo | pooled | 4 | 2/2 | 1.000 | 1.000 | +0.000 |" in text
    # seed 0 of dapo_guided: iteration 0 recovers 1 of 1, iteration 1 0 of 2 -> 1 of 3 in total
    # with Wilson intervals (test_wilson_interval_of_small_counts): 1 of 3 each seed, 2 of 6 pooled
    assert "| 0 | total | 3 | 1 | 0.333 | [0.061, 0.792] |" in text
    assert "| 0 | 0 | 1 | 1 | 1.000 | [0.207, 1.000] |" in text
    assert "| pooled | total | 6 | 2 | 0.333 | [0.097, 0.700] |" in text
    assert "| dapo_guided | 1 | 1 | 8 | 0.500 | 2 | 2 | 1.000 |" in text
    # the curve 0.25 -> 0.5: slope 0.25; resamples {a, a} 0.5, 0.5 -> 0, {b, b} 0, 0.5 -> 0.5
    assert ("| dapo_guided | 0 | 2 | 2 | 0.250 → 0.500 | +0.250 | [0.000, 0.500] | "
            "no trend shown |") in text
    write_curves(tmp_path / "curves.png", results)
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# --------------------------------------------------------------------------- run directories


def _row(schema: str, **given) -> dict:
    return {**{f.name: None for f in SCHEMAS[schema][0]}, **given}


def _episode(eid: str, iid: str, resolved: bool, guided: bool = False, crash: bool = False
             ) -> tuple[dict, dict]:
    rollout = _row("rollouts", episode_id=eid, instance_id=iid, guided=guided, turns=2,
                   format_errors=0, termination="error" if crash else "submitted",
                   gen_tokens=10, gen_s=1.0)
    grade = _row("validations", episode_id=eid, instance_id=iid, resolved=resolved,
                 infra_failure=False, tampered=False)
    return rollout, grade


def _write(url: str, schema: str, rows: list[dict]) -> None:
    store.write_table(url, schema, rows)


def _guided_run(run: Path) -> None:
    """One RL iteration with guidance, then the evaluation of policy 1.

    Unguided samples: a resolves 1 of 2, b and c 0 of 2, and c's third episode crashed (no
    sample). Guidance goes to b and c; b's guided re-attempt resolves, c's does not."""
    it = str(run / "iter_0")
    unguided = [_episode("a/0", "a", True), _episode("a/1", "a", False),
                _episode("b/0", "b", False), _episode("b/1", "b", False),
                _episode("c/0", "c", False), _episode("c/1", "c", False),
                _episode("c/2", "c", False, crash=True)]
    guided = [_episode("b/g", "b", True, guided=True), _episode("c/g", "c", False, guided=True)]
    _write(f"{it}/rollouts.parquet", "rollouts", [r for r, _ in unguided])
    _write(f"{it}/validations.parquet", "validations", [g for _, g in unguided])
    _write(f"{it}/rollouts_guided.parquet", "rollouts", [r for r, _ in guided])
    _write(f"{it}/validations_guided.parquet", "validations", [g for _, g in guided])
    _write(f"{it}/guidance.parquet", "guidance", [_row("guidance", instance_id=i) for i in "bc"])
    rewards = [("a", False, 1.0), ("a", False, 0.0), ("b", False, 0.0), ("b", False, 0.0),
               ("c", False, 0.0), ("c", False, 0.0), ("c", False, None), ("b", True, 1.0)]
    _write(f"{it}/rewards.parquet", "rewards",
           [_row("rewards", instance_id=i, guided=g, reward=r) for i, g, r in rewards])
    _write(str(run / "iter_1" / "eval.parquet"), "eval",
           [_row("eval", instance_id=i, run=k, resolved=(i, k) == ("a", 1))
            for i in "ab" for k in (0, 1)])


def test_a_guided_iteration_is_read_as_the_flow_logs_it(tmp_path):
    _guided_run(tmp_path)
    # train resolve rate 1 of 6 samples (the crash is no sample); groups a, b, c of unguided
    # rewards, only a's (1, 0) not all equal (b's guided 1.0 is left out); guidance for b and c,
    # b recovered
    assert training_curve(str(tmp_path)) == {"0": {
        "train_resolve_rate": pytest.approx(1 / 6), "train_samples": 6, "groups": 3,
        "signal_groups": 1, "guided_instances": 2, "guided_recovered": 1,
        "train_tally": {"a": [1, 2], "b": [0, 2], "c": [0, 2]}}}
    # the evaluation of policy 1: a resolved in run 1 only, b in neither
    assert recorded(str(tmp_path), 1)["instances"] == {"a": [1, 2], "b": [0, 2]}


def test_rft_is_iteration_0_and_the_warm_up_has_no_training_curve(tmp_path):
    rft = tmp_path / "rft-seed0"
    _write(str(rft / "rft" / "iter_0" / "rollouts.parquet"), "rollouts",
           [_episode("a/0", "a", False)[0], _episode("a/1", "a", False)[0]])
    _write(str(rft / "rft" / "iter_0" / "validations.parquet"), "validations",
           [_episode("a/0", "a", False)[1], _episode("a/1", "a", True)[1]])
    curve = training_curve(str(rft))
    assert list(curve) == ["0"] and curve["0"]["train_resolve_rate"] == 0.5
    assert curve["0"]["groups"] == 0                           # no rewards file: no groups
    warm = tmp_path / "warmup-seed0" / "warmup" / "iter_0"      # expert episodes, never graded
    _write(str(warm / "rollouts.parquet"), "rollouts", [_episode("e/0", "e", True)[0]])
    assert training_curve(str(tmp_path / "warmup-seed0")) == {}


def test_signal_groups_count_unguided_samples_per_instance():
    rows = [{"instance_id": "a", "guided": False, "reward": 0.0},
            {"instance_id": "a", "guided": True, "reward": 1.0},      # guided: left out
            {"instance_id": "b", "guided": False, "reward": 0.5},
            {"instance_id": "b", "guided": False, "reward": 0.0},
            {"instance_id": "c", "guided": False, "reward": None}]    # no sample: no group
    assert signal_groups(rows) == (2, 1)


def test_an_old_result_is_completed_from_its_run_or_refused_with_the_fix(tmp_path):
    """A result file from before the tallies were recorded: completed from its run directory
    when it still holds the evaluation, else an error naming the field, the file and the fix."""
    _guided_run(tmp_path / "run")
    old = {"arm": "dapo_guided", "seed": 0, "run_dir": str(tmp_path / "run"),
           "pass1_by_step": {"0": 0.0, "1": 0.25}, "pass1": 0.25}
    path = tmp_path / "seed0.json"
    path.write_text(json.dumps(old))
    done = complete(old, path)
    assert done["instances"] == {"a": [1, 2], "b": [0, 2]} and "0" in done["training"]
    assert complete(done, path) is done
    untallied = dict(done, training={"0": {k: v for k, v in done["training"]["0"].items()
                                           if k != "train_tally"}})
    assert complete(untallied, path)["training"] == done["training"]   # rebuilt from the run
    gone = dict(old, run_dir=str(tmp_path / "deleted"))
    with pytest.raises(ValueError, match=r"has no 'instances' field .* delete .*seed0\.json and "
                                         r"rerun the ladder to run arm 'dapo_guided' seed 0"):
        complete(gone, path)
