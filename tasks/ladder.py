"""The experiment ladder's numbers: confidence intervals over seeds, per-arm aggregates, stage times.

Pure functions of plain values and rows (no Prefect, no MLflow), tested on hand-worked inputs.

- pass@1 of one seed is the mean over that seed's `eval.runs` evaluation runs (`tasks.metrics`).
  Across seeds the arm reports the mean of those values with a two-sided 95% Student-t interval,
  mean ± t(0.975, n-1) · s / sqrt(n), because with 3-5 seeds a normal interval is far too narrow
  (t(0.975, 2) = 4.303 against 1.96). One seed has no interval: it is reported as NaN and shown as
  "n=1", never as a zero-width interval.
- Critical values come from a table for 1-30 degrees of freedom (the usual 3-decimal values) and
  the Cornish-Fisher expansion beyond, whose error there is below 0.001. No scipy dependency.
- The intervals over instances (paired bootstrap) and the design's minimum detectable difference
  are `tasks.ladder_stats`.
"""

from __future__ import annotations

import math
from statistics import fmean, stdev

T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
         2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
         2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
"""t(0.975, df) for df = 1..30 (standard tables)."""
Z_975 = 1.959964

STAGE_BUCKETS = {"expert": "rollout", "rollouts": "rollout", "rollouts_guided": "rollout",
                 "validations": "grading", "validations_guided": "grading", "rewards": "grading",
                 "guidance": "guidance", "update": "update", "eval_instances": "eval",
                 "eval_rollouts": "eval", "eval_validations": "eval", "eval": "eval",
                 "instances": "rollout"}
"""Stage manifest name -> the report's time column (the expert replay counts as rollout)."""
BUCKETS = ("rollout", "grading", "guidance", "update", "eval")


def t_critical(df: int) -> float:
    """t(0.975, df): the two-sided 95% critical value of Student's t with df degrees of freedom."""
    if df < 1:
        raise ValueError(f"t_critical needs df >= 1 (got {df}); a CI needs at least 2 seeds.")
    if df <= len(T_975):
        return T_975[df - 1]
    z = Z_975
    return z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)


def mean_ci(values: list[float]) -> tuple[float, float, float]:
    """(mean, low, high) of a 95% t-interval over `values` (one per seed); NaN bounds for n = 1."""
    if not values:
        raise ValueError("mean_ci needs at least one value (one per seed).")
    mean = fmean(values)
    if len(values) == 1:
        return mean, math.nan, math.nan
    half = t_critical(len(values) - 1) * stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def stage_seconds(manifests: list[dict[str, dict]]) -> dict[str, float]:
    """Wall seconds per report bucket, summed over the stage manifests of every iteration dir."""
    out = dict.fromkeys(BUCKETS, 0.0)
    for found in manifests:
        for name, manifest in found.items():
            bucket = STAGE_BUCKETS.get(name)
            if bucket is None:
                raise ValueError(f"Stage {name!r} has no time column; add it to STAGE_BUCKETS.")
            out[bucket] += float(manifest.get("wall_s", 0.0))
    return out


def aggregate_arm(seeds: list[dict]) -> dict[str, float]:
    """One arm's row from its per-seed results (each: pass1, format_error_rate, submit_rate,
    mean_turns, times{bucket: s}, wall_s): pass@1 mean and 95% CI over seeds, the rest as means."""
    if not seeds:
        raise ValueError("aggregate_arm needs at least one seed's result.")
    mean, low, high = mean_ci([s["pass1"] for s in seeds])
    row = {"seeds": float(len(seeds)), "pass1": mean, "pass1_ci_low": low, "pass1_ci_high": high}
    for key in ("format_error_rate", "submit_rate", "mean_turns", "wall_s"):
        row[key] = fmean(s[key] for s in seeds)
    for bucket in BUCKETS:
        row[f"time_{bucket}_s"] = fmean(s["times"].get(bucket, 0.0) for s in seeds)
    return row


def curve(seeds: list[dict]) -> tuple[list[int], list[float], list[float]]:
    """(steps, mean pass@1, CI half-width) per evaluated step, over the seeds that reached it."""
    steps = sorted({int(k) for s in seeds for k in s["pass1_by_step"]})
    means, halves = [], []
    for step in steps:
        values = [s["pass1_by_step"][str(step)] for s in seeds if str(step) in s["pass1_by_step"]]
        mean, low, _ = mean_ci(values)
        means.append(mean)
        halves.append(0.0 if math.isnan(low) else mean - low)
    return steps, means, halves
