"""The ladder's intervals over instances: paired bootstrap, and the design's detectable difference.

Pure functions of per-instance tallies (no Prefect, no MLflow, no scipy), tested on cases whose
bootstrap resamples can be enumerated by hand.

- A tally is `{instance_id: (resolved, episodes)}` of one arm's last evaluation on one seed: the
  instance's graded episodes over `eval.runs` runs (an infrastructure failure counts as
  unresolved, as in pass@1). An instance's rate is resolved / episodes, and an arm's pass@1 is
  the mean of its instances' rates (equal to `tasks.metrics`' mean over runs when every run saw
  every instance).
- Paired bootstrap over instances: the difference of two arms is the mean over their common
  instances of d_i = rate_A(i) - rate_B(i); B resamples draw the instances with replacement and
  the 95% interval is the 2.5th and 97.5th percentiles of the resampled means (percentile
  bootstrap, numpy's linear interpolation between order statistics). Pooled over seeds, an
  instance's rate is its resolved share over every seed's episodes, so one resampled instance
  carries all of its seeds and runs together. Simplification: instances are the resampled unit
  and the seeds are fixed, so the pooled interval measures how much the instances (and the
  episodes' own noise) move the difference, not how much a retrained seed would; the seed-t
  interval of each arm covers that. Fewer than 2 instances give no interval (NaN), and with a
  handful the percentile interval is too narrow: it never reaches past the most extreme d_i, so
  arms that differ equally on every instance get a zero-width interval.
- A comparison judged at several looks as seeds are added (`tasks.ladder_design`) gets, in its
  pooled row, the interval at its look's level from the same resamples (`level`), beside the 95%;
  between looks, no judgement.
- A training curve's rise (`trend`): the least-squares slope of the train resolve rate against
  the iteration, over the instances sampled in every iteration, with a bootstrap interval that
  resamples instances, as above. Its unit is resolve rate per iteration.
- Minimum detectable difference (MDD) of a design: n instances, r runs and S seeds give each
  instance m = r * S episodes per arm. Paired over instances, an instance's difficulty cancels in
  d_i and its Bernoulli noise remains, Var(d_i) = 2 p (1 - p) / m for two arms near base rate p
  whose episodes are independent, so Var(mean d) = 2 p (1 - p) / (n m) and, at two-sided alpha
  0.05 and power 0.8 (normal approximation),
      MDD = (z_0.975 + z_0.8) * sqrt(2 p (1 - p) / (n r S)).
  With instance rates p_i that differ, mean p_i (1 - p_i) <= p (1 - p) (Jensen), so the formula
  errs towards a larger MDD; what it leaves out is seed-to-seed variance of training, an effect
  that differs between instances, and any correlation between the arms' episodes on an instance.
  Inverted, the instances needed to detect a difference delta at r runs and S seeds are n =
  (z_0.975 + z_0.8)^2 2 p (1 - p) / (r S delta^2),
  rounded up.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Protocol

import numpy as np

from tasks.ladder import Z_975  # z_{1 - alpha/2} for two-sided alpha 0.05


class Sequential(Protocol):
    """A comparison judged at a group-sequential bound (`tasks.ladder_design.Design`)."""

    comparison: tuple[str, str]

    def judge(self, seeds: int) -> dict: ...

Z_80 = 0.841621
"""z_{power} for power 0.8."""
RESAMPLES = 10_000
BOUND_DECIMALS = 12
"""Bootstrap bounds are rounded to this many decimals. Resampled means of exact fractions carry
float rounding, so a bound that is 0 could read as excluding 0 by a hair (three seeds' pooled
dapo - warmup once had 7.7e-19 for its lower bound); a real bound is a multiple of one episode
over all of them (~1e-3)."""
Tally = Mapping[str, tuple[int, int]]
"""instance_id -> (resolved, episodes)."""

COMPARISONS = (("warmup", "base"), ("rft", "warmup"), ("dapo", "rft"), ("dapo", "warmup"),
               ("dapo_guided", "dapo"))
"""(A, B) pairs the report compares as A - B: each step of the ladder, DAPO against the warm-up
(the held-out ordering the ladder exists to show) and guidance against none."""


def tally(eval_rows: list[dict]) -> dict[str, tuple[int, int]]:
    """{instance_id: (resolved, episodes)} of EVAL rows (one row per instance and run)."""
    out: dict[str, tuple[int, int]] = {}
    for row in eval_rows:
        resolved, episodes = out.get(row["instance_id"], (0, 0))
        out[row["instance_id"]] = (resolved + bool(row["resolved"]), episodes + 1)
    return dict(sorted(out.items()))


def pool(tallies: list[Tally]) -> dict[str, tuple[int, int]]:
    """One tally of several seeds: each instance's resolved and episodes summed over them."""
    out: dict[str, tuple[int, int]] = {}
    for one in tallies:
        for iid, (resolved, episodes) in one.items():
            r0, e0 = out.get(iid, (0, 0))
            out[iid] = (r0 + resolved, e0 + episodes)
    return dict(sorted(out.items()))


def rates(t: Tally, ids: list[str]) -> np.ndarray:
    """Resolved share of each of `ids`, in that order."""
    return np.array([t[i][0] / t[i][1] for i in ids], dtype=float)          # (n,)


def bootstrap_mean(values: np.ndarray, resamples: int = RESAMPLES, seed: int = 0,
                   level: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high): the mean of `values` and its percentile-bootstrap interval at `level`."""
    n = len(values)
    if n == 0:
        raise ValueError("bootstrap_mean needs at least one instance (got none).")
    mean = float(values.mean())
    if n == 1:
        return mean, math.nan, math.nan
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, n, size=(resamples, n))                          # (B, n)
    means = values[picks].mean(axis=1)                                       # (B,)
    return (mean, *percentile_bounds(means, level))


def percentile_bounds(samples: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """The two-sided `level` interval's percentiles of bootstrap `samples` (at 0.95: the 2.5th and
    97.5th), to `BOUND_DECIMALS` (no -0.0)."""
    tail = 50 * (1 - level)
    low, high = (round(float(b), BOUND_DECIMALS) + 0.0
                 for b in np.percentile(samples, [tail, 100 - tail]))
    return low, high


def arm_interval(t: Tally, seed: int = 0) -> tuple[float, float, float]:
    """An arm's pass@1 (mean instance rate) with its instance-bootstrap 95% interval."""
    return bootstrap_mean(rates(t, sorted(t)), seed=seed)


def paired_difference(a: Tally, b: Tally, seed: int = 0, level: float = 0.95) -> dict[str, float]:
    """pass@1(A) - pass@1(B) over their common instances, paired bootstrap interval at `level`;
    also the instance count and the mean episodes per instance of each arm."""
    ids = sorted(set(a) & set(b))
    if not ids:
        raise ValueError("The two arms share no evaluation instance; a paired difference needs "
                         "the same eval.split, eval.limit and instances settings in both.")
    diff, low, high = bootstrap_mean(rates(a, ids) - rates(b, ids), seed=seed,   # (n,) paired
                                     level=level)
    return {"diff": diff, "low": low, "high": high, "instances": float(len(ids)),
            "episodes_a": float(np.mean([a[i][1] for i in ids])),
            "episodes_b": float(np.mean([b[i][1] for i in ids])),
            "rate_a": float(rates(a, ids).mean()), "rate_b": float(rates(b, ids).mean())}


def proportion_interval(successes: int, trials: int) -> tuple[float, float, float]:
    """(rate, low, high): successes / trials with its 95% Wilson score interval, NaN for no
    trials. Wilson rather than the normal approximation: guided recovery counts are small and
    often 0 or all, where p (1 - p) / n vanishes and the normal interval has zero width. The
    trials are taken as independent; an instance guided in several iterations is counted once
    per iteration, so the interval is somewhat narrower than a resampling of instances would be."""
    if not 0 <= successes <= trials:
        raise ValueError(f"A proportion needs 0 <= successes <= trials (got {successes} of "
                         f"{trials}).")
    if trials == 0:
        return math.nan, math.nan, math.nan
    z2 = Z_975 ** 2
    rate = successes / trials
    center = (rate + z2 / (2 * trials)) / (1 + z2 / trials)
    half = Z_975 / (1 + z2 / trials) * math.sqrt(rate * (1 - rate) / trials
                                                   + z2 / (4 * trials ** 2))
    return rate, max(0.0, center - half), min(1.0, center + half)


def trend(by_iteration: Mapping[str, Tally], resamples: int = RESAMPLES, seed: int = 0
          ) -> dict[str, float] | None:
    """A training curve's rise: the least-squares slope, per iteration, of the train resolve rate
    (resolved / samples of each iteration) over the instances sampled in every iteration, with a
    95% percentile-bootstrap interval that resamples those instances (each carrying its samples
    of every iteration: an instance's difficulty is shared by its points, so the iterations are
    not independent). Also the first and last rate. None: fewer than 2 iterations or no instance
    in all of them; NaN interval: 1 instance."""
    its = sorted(by_iteration, key=int)
    ids = sorted(set.intersection(*(set(by_iteration[k]) for k in its))) if its else []
    if len(its) < 2 or not ids:
        return None
    x = np.array([int(k) for k in its], dtype=float)                                 # (T,)
    resolved = np.array([[by_iteration[k][i][0] for k in its] for i in ids], dtype=float)
    samples = np.array([[by_iteration[k][i][1] for k in its] for i in ids], dtype=float)
    curve = resolved.sum(0) / np.maximum(samples.sum(0), 1)                          # (T,)
    row = {"slope": float(_slopes(x, curve[None])[0]), "low": math.nan, "high": math.nan,
           "first": float(curve[0]), "last": float(curve[-1]), "instances": float(len(ids)),
           "iterations": float(len(its))}
    if len(ids) == 1:
        return row
    picks = np.random.default_rng(seed).integers(0, len(ids), size=(resamples, len(ids)))
    curves = resolved[picks].sum(1) / np.maximum(samples[picks].sum(1), 1)          # (B, T)
    low, high = percentile_bounds(_slopes(x, curves))
    return {**row, "low": low, "high": high}


def _slopes(x: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """Least-squares slope of each row of `ys` (B, T) against `x` (T,)."""
    dx = x - x.mean()
    return (ys - ys.mean(axis=1, keepdims=True)) @ dx / (dx @ dx)                    # (B,)


def excludes_zero(row: Mapping[str, float]) -> bool:
    """Whether a (low, high) interval lies wholly on one side of 0 (never for a missing one)."""
    return not math.isnan(row["low"]) and (row["low"] > 0 or row["high"] < 0)


def mdd(instances: int, runs: int, seeds: int, p: float) -> float:
    """Minimum detectable difference in pass@1 of a design (module docstring's formula)."""
    _check_design(instances, runs, seeds, p)
    return (Z_975 + Z_80) * math.sqrt(2 * p * (1 - p) / (instances * runs * seeds))


def instances_needed(delta: float, runs: int, seeds: int, p: float) -> int:
    """Instances the MDD formula needs to detect `delta` at `runs` runs and `seeds` seeds."""
    if delta == 0:
        raise ValueError("A zero difference is detectable at no sample size.")
    _check_design(1, runs, seeds, p)
    return math.ceil((Z_975 + Z_80) ** 2 * 2 * p * (1 - p) / (runs * seeds * delta ** 2))


def _check_design(instances: int, runs: int, seeds: int, p: float) -> None:
    if min(instances, runs, seeds) < 1 or not 0 < p < 1:
        raise ValueError(f"A design needs instances, runs and seeds >= 1 and a base rate strictly "
                         f"between 0 and 1 (got {instances}, {runs}, {seeds}, p={p}).")


# --------------------------------------------------------------------------- the comparisons


def comparison_rows(results: Mapping[str, list[dict]], design: Sequential | None = None
                    ) -> list[dict]:
    """Each COMPARISONS pair with results in both arms: a pooled row over their common seeds,
    then one row per seed (`paired_difference` plus a, b, seed, seeds). The pooled row of the
    `design`'s comparison also carries `sequential`: where its seeds stand (`design.judge`) and,
    at a look, the paired interval at that look's level, from the same resamples."""
    rows = []
    for a, b in COMPARISONS:
        by_seed = {s["seed"]: s["instances"] for s in results.get(a, [])}
        other = {s["seed"]: s["instances"] for s in results.get(b, [])}
        seeds = sorted(set(by_seed) & set(other))
        if not seeds:
            continue
        pooled_a, pooled_b = pool([by_seed[s] for s in seeds]), pool([other[s] for s in seeds])
        name = {"a": a, "b": b, "seeds": float(len(seeds))}
        rows.append({**name, "seed": "pooled", **paired_difference(pooled_a, pooled_b),
                     "intervals_a": arm_interval(pooled_a)[1:],
                     "intervals_b": arm_interval(pooled_b)[1:]})
        if design is not None and design.comparison == (a, b):
            look = design.judge(len(seeds))
            if look["planned"]:
                at = paired_difference(pooled_a, pooled_b, level=look["level"])
                look = {**look, "low": at["low"], "high": at["high"]}
            rows[-1]["sequential"] = look
        rows += [{**name, "seed": str(s), "seeds": 1.0, **paired_difference(by_seed[s], other[s])}
                 for s in seeds]
    return rows


def statements(pairs: list[dict]) -> list[str]:
    """One plain sentence per pooled comparison: an ordering only where its interval excludes 0,
    otherwise the measured difference and the instances the MDD formula needs to detect it."""
    pooled = [r for r in pairs if r["seed"] == "pooled"]
    if not pooled:
        return ["No two arms with results on a common seed: nothing to compare."]
    return [_statement(r, [p for p in pairs if (p["a"], p["b"]) == (r["a"], r["b"])
                           and p["seed"] != "pooled"]) for r in pooled]


def _statement(row: dict, per_seed: list[dict]) -> str:
    a, b, n, seeds = row["a"], row["b"], int(row["instances"]), int(row["seeds"])
    measured = (f"{a} − {b} = {row['diff']:+.3f} (95% CI [{row['low']:+.3f}, {row['high']:+.3f}] "
                f"over {n} instances, {seeds} seed(s) pooled)")
    if math.isnan(row["low"]):
        return f"- {a} − {b} = {row['diff']:+.3f} on {n} instance: no interval, so no claim."
    look = row.get("sequential")
    if look and not look["planned"]:
        return (f"- {measured}: this comparison is judged by its sequential design only at its "
                f"looks, and {seeds} seeds fall between them, so the ladder does not claim it "
                f"yet; the next look is at {look['next']} seeds.")
    if look and excludes_zero(row) and not excludes_zero(look):
        return (f"- {measured}: the 95% interval excludes 0, but this comparison is judged by its "
                f"sequential design: at look {look['look']} of {look['looks']} the "
                f"{100 * look['level']:.1f}% interval is [{look['low']:+.3f}, "
                f"{look['high']:+.3f}], which contains 0, so the ladder does not show it"
                + (" at the design's last look." if look["look"] == look["looks"] else " yet."))
    if excludes_zero(row):
        shown = sum(excludes_zero(p) for p in per_seed)
        (la, ha), (lb, hb) = row["intervals_a"], row["intervals_b"]
        overlap = "overlap" if la <= hb and lb <= ha else "do not overlap"
        also = ""
        if look:
            followed = (f"; with its earlier looks as they were judged, a false claim has "
                        f"two-sided probability {look['error_rate']:.3f}"
                        if "error_rate" in look else "")
            also = (f" (and its {100 * look['level']:.1f}% interval at look {look['look']} of "
                    f"{look['looks']} of its sequential design, [{look['low']:+.3f}, "
                    f"{look['high']:+.3f}]{followed})")
        return (f"- **{measured}{also}: {a}'s pass@1 on these test instances is "
                f"{'above' if row['diff'] > 0 else 'below'} {b}'s.** The per-seed intervals "
                f"exclude 0 in {shown} of "
                f"{len(per_seed)} seed(s); the arms' own instance intervals {overlap} "
                f"([{la:.3f}, {ha:.3f}] and [{lb:.3f}, {hb:.3f}]).")
    if row["diff"] == 0:
        return (f"- {measured}: no measured difference. The intervals support no ordering, and "
                f"no number of instances detects a zero difference.")
    runs = (row["episodes_a"] + row["episodes_b"]) / 2 / seeds          # episodes per seed
    p = (row["rate_a"] + row["rate_b"]) / 2
    need = instances_needed(abs(row["diff"]), max(1, round(runs)), seeds, p)
    return (f"- {measured}: the interval contains 0, so the ladder does not show a difference. "
            f"Detecting {abs(row['diff']):.3f} at a base rate of {p:.3f} with {round(runs)} "
            f"run(s) and {seeds} seed(s) (two-sided alpha 0.05, power 0.8) needs about {need} "
            f"instances; this evaluation has {n}.")
