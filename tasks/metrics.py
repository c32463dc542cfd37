"""Numbers that summarise an iteration or an evaluation, computed from its artifact rows.

Pure functions of plain rows (no Prefect, no MLflow), so they are tested on hand-made rows.

Evaluation: pass@1 is the mean over the N independent runs of each run's resolve rate, ± the
standard error of that mean across runs (0 for one run). pass@k uses the unbiased estimator of
Chen et al. (2021), 1 - C(n-c, k) / C(n, k) per instance with n runs and c resolved, averaged over
instances. Simplification: an evaluation episode that failed on infrastructure counts as
unresolved (fail closed) and is reported as `eval_infra_failures`, rather than being resampled.

best@k (Agent-RLVR's reranking): each instance's runs, in run order, are cut into blocks of k (a
short last block is left out); each block submits the episode the verifier scores highest (ties:
the lowest run), and best@k is the mean resolved over those submissions. With runs = k it is the
fraction of instances whose top-scored patch resolves: at most the fraction with any resolved run,
and pass@1 in expectation for a verifier that ranks at random.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from statistics import fmean, stdev

from swe_rlvr.artifacts import EpisodeOutcome, dropped, outcomes


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one instance with n samples of which c passed (k <= n)."""
    if not 0 < k <= n:
        raise ValueError(f"pass@k needs 1 <= k <= n (k={k}, n={n}); set eval.k <= eval.runs.")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def eval_rows(rollouts: list[dict], validations: list[dict],
              scores: dict[str, float] | None = None) -> list[dict]:
    """EVAL rows: one per (instance, run); the run is the episode's sample index. `scores`
    (episode -> verifier score) fills `verifier_score`, else it stays None."""
    scores = scores or {}
    rows = []
    for o in outcomes(rollouts, validations):
        r, g = o.rollout, o.grade or {}
        rows.append({"instance_id": r["instance_id"], "run": int(r["sample"]),
                     "episode_id": r["episode_id"], "resolved": bool(g.get("resolved", False)),
                     "infra_failure": bool(g.get("infra_failure", not g)),
                     "termination": r["termination"], "turns": int(r["turns"]),
                     "format_errors": int(r["format_errors"]),
                     "verifier_score": scores.get(r["episode_id"])})
    return rows


def best_of_k(rows: list[dict], k: int) -> tuple[float, int]:
    """(best@k, submissions) from scored EVAL rows; see the module docstring."""
    if k < 1:
        raise ValueError(f"best@k needs k >= 1 (got {k}); set eval.best_of_k >= 1, or 0 for off.")
    by_instance: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        if r["verifier_score"] is None:
            raise ValueError(f"EVAL row {r['episode_id']!r} has no verifier_score; best@k needs "
                             f"a trained verifier (eval.best_of_k > 0 and a verifier stage).")
        by_instance[r["instance_id"]].append(r)
    picks = []
    for runs in by_instance.values():
        runs = sorted(runs, key=lambda r: r["run"])
        for start in range(0, len(runs) - k + 1, k):
            block = runs[start:start + k]
            picks.append(max(block, key=lambda r: r["verifier_score"]))  # first of equal scores
    return (fmean(bool(p["resolved"]) for p in picks) if picks else 0.0), len(picks)


def eval_summary(rows: list[dict], k: int, best_k: int = 0) -> dict[str, float]:
    """pass@1 (mean over runs), its SEM, pass@k (unbiased) and counts, from EVAL rows; with
    `best_k` > 0 and every row scored by a verifier, also best@`best_k` as `best<best_k>`."""
    out = _pass_summary(rows, k)
    if best_k > 0 and rows and all(r["verifier_score"] is not None for r in rows):
        value, submissions = best_of_k(rows, best_k)
        if submissions:
            out[f"best{best_k}"] = value
            out[f"best{best_k}_submissions"] = float(submissions)
    return out


def _pass_summary(rows: list[dict], k: int) -> dict[str, float]:
    if not rows:
        return {"pass1": 0.0, "pass1_sem": 0.0, f"pass{k}": 0.0, "eval_runs": 0.0,
                "eval_instances": 0.0, "eval_infra_failures": 0.0}
    by_run, by_instance = defaultdict(list), defaultdict(list)
    for r in rows:
        by_run[r["run"]].append(bool(r["resolved"]))
        by_instance[r["instance_id"]].append(bool(r["resolved"]))
    rates = [fmean(v) for _, v in sorted(by_run.items())]
    k_eff = min(k, min(len(v) for v in by_instance.values()))
    return {
        "pass1": fmean(rates),
        "pass1_sem": stdev(rates) / math.sqrt(len(rates)) if len(rates) > 1 else 0.0,
        f"pass{k}": fmean(pass_at_k(len(v), sum(v), k_eff) for v in by_instance.values()),
        "eval_runs": float(len(rates)),
        "eval_instances": float(len(by_instance)),
        "eval_infra_failures": float(sum(bool(r["infra_failure"]) for r in rows)),
    }


def _rate(flags: list[bool]) -> float:
    return fmean(flags) if flags else 0.0


def episode_stats(rollouts: list[dict]) -> dict[str, float]:
    """Format-error rate (malformed turns / turns), submit rate and mean turns of episodes."""
    if not rollouts:
        return {"format_error_rate": 0.0, "submit_rate": 0.0, "mean_turns": 0.0}
    turns = sum(int(r["turns"]) for r in rollouts)
    return {"format_error_rate": sum(int(r["format_errors"]) for r in rollouts) / max(turns, 1),
            "submit_rate": fmean(r["termination"] == "submitted" for r in rollouts),
            "mean_turns": turns / len(rollouts)}


def rollout_summary(rollouts: list[dict], validations: list[dict], prefix: str = "train"
                    ) -> dict[str, float]:
    """Resolve, tamper, submit and format-error rates and mean turns of a set of episodes; the
    rates are over samples (`EpisodeOutcome.is_sample`), and the non-samples are counted by
    reason (`dropped_infra`, `dropped_crash`, `dropped_ungraded`). `<prefix>_tamper_rate`: samples
    whose canary tests caught a change to how tests run."""
    episodes = outcomes(rollouts, validations)
    graded = [o for o in episodes if o.grade is not None]
    usable = [o for o in episodes if o.is_sample]
    return {
        f"{prefix}_resolve_rate": _rate([o.resolved for o in usable]),
        f"{prefix}_infra_failure_rate": _rate([bool(o.grade["infra_failure"]) for o in graded]),
        f"{prefix}_tamper_rate": _rate([o.tampered for o in usable]),
        f"{prefix}_episodes": float(len(rollouts)),
        **{k: float(v) for k, v in dropped(episodes).items()},
        **episode_stats(rollouts),
        "gen_tokens_per_s": (sum(int(r["gen_tokens"]) for r in rollouts)
                             / max(1e-9, sum(float(r["gen_s"]) for r in rollouts))) if rollouts else 0.0,
    }


def recovery_metrics(episodes: list[EpisodeOutcome], failed_ids: Iterable[str],
                     guidance: list[dict] = ()) -> dict[str, float]:
    """Guided recovery rate, guided vs unguided resolve rate (over samples), pairs built and the
    mean leakage of the GUIDANCE rows."""
    from trainer.pairs import build_pairs
    failed_ids = set(failed_ids)
    usable = [o for o in episodes if o.is_sample]
    recovered = {o.instance_id for o in usable if o.guided and o.resolved}
    return {
        "guided_instances": float(len(failed_ids)),
        "guided_recovery_rate": len(recovered & failed_ids) / len(failed_ids) if failed_ids else 0.0,
        "guided_resolve_rate": _rate([o.resolved for o in usable if o.guided]),
        "unguided_resolve_rate": _rate([o.resolved for o in usable if not o.guided]),
        "pairs_built": float(len(build_pairs(episodes))),
        "guidance_leakage": fmean(g["leakage"] for g in guidance) if guidance else 0.0,
    }


def reward_summary(rewards: list[dict], guidance_mode: str) -> dict[str, float]:
    """Mean reward, kept fraction and the fraction of groups dropped for having no signal (groups
    as the reward stage formed them under `guidance_mode`)."""
    from trainer.scoring import group_key
    groups: dict[tuple, set] = defaultdict(set)
    for r in rewards:
        if r["reward"] is not None:                       # a sample
            groups[group_key(r, guidance_mode)].add(r["drop_reason"])
    scored = [r["reward"] for r in rewards if r["reward"] is not None]
    return {
        "reward_mean": fmean(scored) if scored else 0.0,
        "kept_fraction": _rate([bool(r["kept"]) for r in rewards]),
        "zero_advantage_group_fraction": _rate(["no_signal" in g for g in groups.values()]),
    }


TRAIN_COLUMNS = ("loss", "clip_frac_low", "clip_frac_high", "entropy", "approx_kl",
                 "sampler_mismatch", "grad_norm", "tokens_per_s")


def train_summary(rows: list[dict]) -> dict[str, float]:
    """Mean of each optimiser-step metric over the iteration's steps (absent when none ran)."""
    out = {"train_steps": float(len(rows))}
    for col in TRAIN_COLUMNS:
        values = [float(r[col]) for r in rows if r.get(col) is not None]
        if values:
            out[col] = fmean(values)
    return out


def stage_times(manifests: dict[str, dict]) -> dict[str, float]:
    """`time_<stage>_s` for every finished stage of the iteration, and `rss_<stage>_mb`, the
    process's peak resident set while it ran (manifests written before it was recorded have none)."""
    out = {f"time_{name}_s": float(m.get("wall_s", 0.0)) for name, m in manifests.items()}
    out.update({f"rss_{name}_mb": float(m["peak_rss_mb"]) for name, m in manifests.items()
                if "peak_rss_mb" in m})
    return out


def pool_sizes(manifests: dict[str, dict]) -> dict[str, float]:
    """`curriculum_pool` (instances the iteration could sample) and `curriculum_retired`, when the
    curriculum ran (Nebius: the pool shrinks as instances are solved or found hopeless)."""
    if "curriculum" not in manifests or "instances" not in manifests:
        return {}
    main = manifests["instances"]["outputs"]["main"]
    return {"curriculum_pool": float(main.get("pool", main["rows"])),
            "curriculum_retired": float(main.get("retired", 0))}
