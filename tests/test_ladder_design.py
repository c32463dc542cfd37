"""The ladder's sequential design: group-sequential bounds (`tasks.sequential`), the results
folder's `design.json` (`tasks.ladder_design`), and how the report judges its comparison."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from swe_rlvr.config import ConfigError
from tasks import ladder_design, sequential
from tasks.ladder_report import comparison_table
from tasks.ladder_stats import bootstrap_mean, comparison_rows, statements

Z_975 = 1.959963984540054


def test_one_look_is_the_fixed_sample_test():
    assert sequential.bounds([1.0]) == pytest.approx([Z_975], abs=1e-9)
    assert sequential.level(Z_975) == pytest.approx(0.95, abs=1e-12)
    assert sequential.obrien_fleming_spent(1.0) == pytest.approx(0.05, abs=1e-12)


def test_the_first_bound_is_closed_form_and_later_ones_fall():
    # alpha(t) = 2 - 2 Phi(z / sqrt t): the first look spends exactly that, so its bound is
    # z / sqrt(t_1); each later look has more information and a lower bound.
    two = sequential.bounds([0.6, 1.0])
    assert two[0] == pytest.approx(Z_975 / math.sqrt(0.6), abs=1e-7)
    three = sequential.bounds([1 / 3, 2 / 3, 1.0])
    assert three[0] == pytest.approx(Z_975 * math.sqrt(3), abs=1e-7)
    assert three[0] > three[1] > three[2] > Z_975 and two[1] > Z_975


@pytest.mark.parametrize("fractions", [[0.6, 1.0], [0.5, 1.0], [1 / 3, 2 / 3, 1.0], [0.6, 0.8]])
def test_the_looks_spend_the_alpha_the_function_allows(fractions):
    """Differential against scipy's multivariate normal: with Z_k sqrt(t_k) a Brownian motion,
    the chance that some |Z_j| >= c_j by look k is alpha(t_k), at every k."""
    from scipy import stats  # installed with mlflow
    cs = sequential.bounds(fractions)
    t = np.array(fractions)
    cov = np.sqrt(np.minimum.outer(t, t) / np.maximum.outer(t, t))    # corr(Z_i, Z_j)
    for k in range(1, len(t) + 1):
        c = np.array(cs[:k])
        law = stats.multivariate_normal(np.zeros(k), cov[:k, :k], abseps=1e-8, releps=1e-8)
        inside = law.cdf(c, lower_limit=-c)
        assert 1 - inside == pytest.approx(sequential.obrien_fleming_spent(t[k - 1]), abs=2e-5)


@pytest.mark.parametrize("fractions", [[1.0], [0.6, 1.0], [1 / 3, 2 / 3, 1.0], [0.5, 0.8]])
def test_the_designs_own_bounds_err_at_its_alpha(fractions):
    for alpha in (0.05, 0.01):
        bounds = sequential.bounds(fractions, alpha)
        spent = sequential.obrien_fleming_spent(fractions[-1], alpha)   # alpha when t ends at 1
        assert sequential.error_rate(fractions, bounds) == pytest.approx(spent, abs=2e-6)


def test_a_look_judged_at_95_percent_before_the_design_raises_its_error_rate():
    """Looks at 3 and 5 of 5 seeds, the first judged at the fixed-sample 1.96 and the second at
    the design's 1.999: the chance that |Z_1| >= 1.96 or |Z_2| >= 1.999 under the null, with
    corr(Z_1, Z_2) = sqrt(3/5), is 1 - P(inside both), from scipy's bivariate normal (0.0763),
    against 0.05 for the design's own first bound. A second look can only add to the 0.05 the
    first one spent: with an unreachable last bound, the rate falls back to it."""
    from scipy import stats  # installed with mlflow
    rho = math.sqrt(0.6)
    law = stats.multivariate_normal([0, 0], [[1, rho], [rho, 1]], abseps=1e-8, releps=1e-8)
    c = np.array([Z_975, 1.999])
    followed = sequential.error_rate([0.6, 1.0], c)
    assert followed == pytest.approx(1 - law.cdf(c, lower_limit=-c), abs=2e-5)
    assert followed == pytest.approx(0.0763, abs=1e-4)
    assert sequential.error_rate([0.6, 1.0], [Z_975, 40.0]) == pytest.approx(0.05, abs=1e-9)
    assert sequential.error_rate([0.6, 1.0], [Z_975, 2.6]) < followed
    for fractions, zs in (([0.6, 1.0], [1.96]), ([0.6, 1.0], [1.96, 0.0]), ([1.0, 0.6], [2, 2])):
        with pytest.raises(ValueError):
            sequential.error_rate(fractions, zs)


def test_bad_looks_are_refused():
    for bad in ([], [0.6, 0.6], [0.8, 0.6], [0.0, 1.0], [0.5, 1.2]):
        with pytest.raises(ValueError, match="increasing information fractions"):
            sequential.bounds(bad)


def _write(folder, **fields):
    body = {"comparison": ["dapo", "warmup"], "looks": [3, 5], "declared": "2026-11-30", **fields}
    (folder / "design.json").write_text(json.dumps(body))
    return folder


def test_a_design_is_loaded_and_judges_each_look(tmp_path):
    assert ladder_design.load(tmp_path) is None
    design = ladder_design.load(_write(tmp_path))
    assert design.comparison == ("dapo", "warmup") and design.looks == (3, 5)
    first, last = design.judge(3), design.judge(5)
    assert (first["look"], first["looks"], first["planned"]) == (1, 2, True)
    assert first["bound"] == pytest.approx(Z_975 / math.sqrt(0.6), abs=1e-7)
    assert last["bound"] == pytest.approx(sequential.bounds([0.6, 1.0])[1])
    assert last["level"] == pytest.approx(sequential.level(last["bound"]))
    between = design.judge(4)                  # not a look: no bound, the next look named
    assert (between["planned"], between["next"], "bound" in between) == (False, 5, False)
    assert design.judge(1) == {"looks": 2, "seeds": 1, "fraction": 0.2, "planned": False,
                               "next": 3}
    with pytest.raises(ConfigError, match="last look is at 5"):
        design.judge(6)


@pytest.mark.parametrize("fields, field", [
    ({"comparison": ["dapo"]}, "comparison"), ({"looks": [5, 3]}, "looks"),
    ({"looks": [0, 5]}, "looks"), ({"alpha": 1.5}, "alpha"), ({"spending": "pocock"}, "spending"),
    ({"look": [3, 5]}, "unknown field"),
])
def test_a_malformed_design_names_its_field(tmp_path, fields, field):
    with pytest.raises(ConfigError, match=field):
        ladder_design.load(_write(tmp_path, **fields))


JUDGED = [{"seeds": 3, "bound": Z_975, "why": "judged at 95% before this design"}]


def test_a_look_judged_at_another_bound_is_stated_at_the_next_look(tmp_path):
    """design.json records that look 1 was judged at 1.96: look 2 is still judged at the design's
    bound, and it carries the error rate of the procedure as followed, which the report's section
    and the claim both state. Look 1 itself is judged as designed (nothing earlier to count)."""
    design = ladder_design.load(_write(tmp_path, judged=JUDGED))
    assert design.judged == (ladder_design.Judged(3, Z_975, JUDGED[0]["why"]),)
    assert "error_rate" not in design.judge(3)
    last = design.judge(5)
    assert last["bound"] == pytest.approx(sequential.bounds([0.6, 1.0])[1])
    assert last["error_rate"] == pytest.approx(
        sequential.error_rate([0.6, 1.0], [Z_975, last["bound"]]))
    assert last["designed"] == pytest.approx(sequential.bounds([0.6, 1.0])[:1])
    ids = [f"i{k}" for k in range(40)]
    warm = {i: (int(k < 2), 1) for k, i in enumerate(ids)}
    dapo = {i: (int(k < 12), 1) for k, i in enumerate(ids)}
    pairs = comparison_rows(_seeds({"warmup": [warm] * 5, "dapo": [dapo] * 5}), design)
    section = "\n".join(ladder_design.sequential_lines(pairs, design))
    assert ("look 1 (3 seeds) at |z| ≥ 1.960, not the design's 2.530 (judged at 95% before this "
            "design)") in section
    assert f"two-sided probability {last['error_rate']:.3f}, not the design's 0.05" in section
    pooled = [r for r in pairs if r["seed"] == "pooled"][0]
    assert "| yes at 95%; yes at the look's 95.4% |" in "\n".join(comparison_table(pairs))
    assert f"a false claim has two-sided probability {last['error_rate']:.3f})" in \
        statements([pooled])[0]
    plain = ladder_design.load(_write(tmp_path))
    assert "error_rate" not in plain.judge(5)
    assert "As judged" not in "\n".join(ladder_design.sequential_lines(
        comparison_rows(_seeds({"warmup": [warm] * 5, "dapo": [dapo] * 5}), plain), plain))


@pytest.mark.parametrize("judged", [
    {"3": 1.96}, [{"seeds": 5, "bound": 1.96}], [{"seeds": 4, "bound": 1.96}],
    [{"seeds": 3, "bound": -1.0}], [{"seeds": 3, "bound": 1.96, "when": "then"}],
    [{"seeds": 3, "bound": 1.96}, {"seeds": 3, "bound": 2.0}], ["3"],
])
def test_a_malformed_judged_look_names_the_field(tmp_path, judged):
    with pytest.raises(ConfigError, match="`judged`"):
        ladder_design.load(_write(tmp_path, judged=judged))


def _seeds(tallies: dict[str, list[dict]]) -> dict[str, list[dict]]:
    return {arm: [{"seed": s, "instances": t} for s, t in enumerate(rows)]
            for arm, rows in tallies.items()}


def test_the_pooled_row_carries_its_look_at_that_looks_level(tmp_path):
    """Three seeds of 40 instances; dapo resolves 4 more of them than warmup on every seed.
    The row's sequential interval is the paired bootstrap of the same instance differences at
    the look's level (same resamples), so it contains the 95% one."""
    ids = [f"i{k}" for k in range(40)]
    warm = {i: (int(k < 2), 1) for k, i in enumerate(ids)}
    dapo = {i: (int(k < 6), 1) for k, i in enumerate(ids)}
    results = _seeds({"warmup": [warm] * 3, "dapo": [dapo] * 3})
    design = ladder_design.load(_write(tmp_path))
    row = [r for r in comparison_rows(results, design) if r["seed"] == "pooled"][0]
    look = row["sequential"]
    d = np.array([int(k < 6) - int(k < 2) for k in range(40)], dtype=float)
    assert (look["low"], look["high"]) == bootstrap_mean(d, level=look["level"])[1:]
    assert look["low"] <= row["low"] and row["high"] <= look["high"]
    assert "sequential" not in [r for r in comparison_rows(results) if r["seed"] == "pooled"][0]


def test_the_statement_claims_only_what_the_sequential_interval_shows():
    row = {"a": "dapo", "b": "warmup", "seed": "pooled", "instances": 287.0, "seeds": 3.0,
           "diff": 0.03, "low": 0.004, "high": 0.056, "episodes_a": 3.0, "episodes_b": 3.0,
           "rate_a": 0.11, "rate_b": 0.08, "intervals_a": (0.08, 0.14),
           "intervals_b": (0.05, 0.11)}
    inside = {**row, "sequential": {"look": 1, "looks": 2, "planned": True, "level": 0.9886,
                                    "low": -0.004, "high": 0.064}}
    text = statements([inside])[0]
    assert "does not show it yet" in text and "98.9% interval is [-0.004, +0.064]" in text
    last = {**inside, "sequential": {**inside["sequential"], "look": 2, "level": 0.954}}
    assert "does not show it at the design's last look." in statements([last])[0]
    outside = {**row, "sequential": {**inside["sequential"], "low": 0.001}}
    text = statements([outside])[0]
    assert "**" in text and "above warmup's" in text and "98.9% interval at look 1 of 2" in text


def test_between_looks_the_row_is_shown_and_not_judged(tmp_path):
    """Four seeds of a [3, 5] design, dapo ahead on every seed so that the 95% interval excludes
    0: the statement still claims nothing, and the report's section names the next look. Judging
    here would be a look the design did not plan, which raises the bounds of the looks after it
    (`sequential.bounds([0.6, 0.8, 1])[-1]` above `sequential.bounds([0.6, 1])[-1]`)."""
    assert sequential.bounds([0.6, 0.8, 1.0])[-1] > sequential.bounds([0.6, 1.0])[-1]
    ids = [f"i{k}" for k in range(40)]
    warm = {i: (int(k < 2), 1) for k, i in enumerate(ids)}
    dapo = {i: (int(k < 12), 1) for k, i in enumerate(ids)}
    design = ladder_design.load(_write(tmp_path))
    pairs = comparison_rows(_seeds({"warmup": [warm] * 4, "dapo": [dapo] * 4}), design)
    pooled = [r for r in pairs if r["seed"] == "pooled"][0]
    assert pooled["low"] > 0 and "low" not in pooled["sequential"]
    text = statements([pooled])[0]
    assert "**" not in text and "does not claim it yet; the next look is at 5 seeds" in text
    section = "\n".join(ladder_design.sequential_lines(pairs, design))
    assert "| yes at 95%; not judged between looks |" in "\n".join(comparison_table(pairs))
    assert "4 seeds are pooled, between the design's looks" in section
    assert "the next look is at 5 seeds" in section and "| look |" not in section
