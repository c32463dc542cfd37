"""The ladder's outputs: one seed's result from its run directory, `report.md` and two plots.

A seed's result is read back from the artifacts its flow wrote, not from memory, so a resumed
ladder reports exactly what a straight one would:
- pass@1 per evaluated step (the flow's metrics); the test-split format-error rate, submit rate
  and mean turns of the last evaluation (`iter_<last>/eval_rollouts.parquet`); and its
  per-instance tally, resolved and graded episodes of each instance (`iter_<last>/eval.parquet`,
  the rows pass@1 is computed from), which the instance intervals of `tasks.ladder_stats` need;
- per training iteration (RFT's sampling as iteration 0, RL iteration k as k; the warm-up trains
  on the expert's episodes, so it has none): the train resolve rate (`tasks.metrics`, as the flow
  logs it), the groups of the policy's own samples (one instance, one iteration; guided
  re-attempts left out) and how many of them have rewards that are not all equal (DAPO's signal,
  `trainer.advantages.has_signal`), and, with guidance, the instances that failed unguided and
  how many a guided re-attempt recovered (`tasks.metrics.recovery_metrics`);
- the wall time of every stage under the run directory, grouped into rollout, grading,
  guidance, update and eval.
A result file written before the tallies and curves were recorded is completed from its run
directory (`complete`), or refused with the fix when that directory no longer holds them.
"""

from __future__ import annotations

import math
from pathlib import Path

from tasks import ladder_stats, store
from tasks.ladder import BUCKETS, aggregate_arm, curve, stage_seconds
from tasks.ladder_design import Design, sequential_lines
from tasks.ladder_stats import comparison_rows, statements
from tasks.metrics import episode_stats

RECORDED = ("instances", "training")
"""Result fields that a result file of an earlier swe-rlvr may lack (`complete` adds them)."""


def seed_result(arm: str, seed: int, result, wall_s: float, scored: bool = True) -> dict:
    """The JSON-able result of one (arm, seed) from its flow's RunResult. `scored` false: an arm
    the ladder trained without evaluating it (`--skip-eval`): its policy, training curve and
    times, and a pass@1 of None."""
    common = {"arm": arm, "seed": seed, "run_dir": result.run_dir, "run_name": result.run_name,
              "mlflow_run_id": result.mlflow_run_id, "policy": str(result.policy_dir),
              "times": stage_seconds(_manifests(result.run_dir)), "wall_s": wall_s}
    if not scored:
        return {**common, "pass1_by_step": {}, "pass1": None, "instances": {},
                "training": training_curve(result.run_dir)}
    evaluated = {str(k): float(m["pass1"]) for k, m in sorted(result.metrics.items()) if "pass1" in m}
    if not evaluated:
        raise ValueError(f"Arm {arm!r} seed {seed}: the run {result.run_dir} logged no pass@1; "
                         f"its evaluation did not run (check eval.split and eval.every).")
    last = max(int(k) for k in evaluated)
    eval_url = store.join(result.run_dir, f"iter_{last}", "eval_rollouts.parquet")
    rollouts = store.read_rows(eval_url, "rollouts") if store.exists(eval_url) else []
    return {**common, "pass1_by_step": evaluated, "pass1": evaluated[str(last)],
            **episode_stats(rollouts), **recorded(result.run_dir, last)}


def recorded(run_dir: str, last: int) -> dict:
    """The RECORDED fields of a run: its last evaluation's tally and its training curve."""
    rows = store.read_rows(store.join(run_dir, f"iter_{last}", "eval.parquet"), "eval")
    return {"instances": {k: list(v) for k, v in ladder_stats.tally(rows).items()},
            "training": training_curve(run_dir)}


def complete(row: dict, path: Path) -> dict:
    """`row` (read from `path`) with the RECORDED fields it lacks rebuilt from its run directory,
    and its training curve too where the curve lacks its per-instance tallies and the directory
    is still there; `row` itself when nothing is rebuilt."""
    missing = [f for f in RECORDED if f not in row]
    if not missing:
        untallied = any("train_tally" not in v for v in row["training"].values())
        if untallied and store.exists(row["run_dir"]):   # a curve recorded before its tallies
            return {**row, "training": training_curve(row["run_dir"])}
        return row
    last = max(int(k) for k in row["pass1_by_step"])
    if not store.exists(store.join(row["run_dir"], f"iter_{last}", "eval.parquet")):
        raise ValueError(f"{path} has no {missing[0]!r} field (an earlier swe-rlvr wrote it) and "
                         f"its run directory {row['run_dir']} no longer holds iter_{last}/"
                         f"eval.parquet to rebuild it from; delete {path} and rerun the ladder "
                         f"to run arm {row['arm']!r} seed {row['seed']} again.")
    return {**row, **recorded(row["run_dir"], last)}


def training_curve(run_dir: str) -> dict[str, dict]:
    """Iteration -> `iteration_signals` of every graded training iteration of the run
    (`iter_<k>` of an RL run, `rft/iter_0` of RFT); the warm-up's expert episodes are not graded."""
    fs, path = store.fs_and_path(run_dir)
    found = fs.glob(f"{path}/iter_*/validations.parquet") + fs.glob(
        f"{path}/rft/iter_*/validations.parquet")
    dirs = sorted({fs.unstrip_protocol(f.rsplit("/", 1)[0]) for f in found})
    curve_ = {d.rsplit("_", 1)[-1]: iteration_signals(d) for d in dirs}
    return dict(sorted(curve_.items(), key=lambda kv: int(kv[0])))


def iteration_signals(iter_dir: str) -> dict[str, float]:
    """Train resolve rate and samples (and their per-instance tally), groups with a reward
    signal, guided recovery (counts)."""
    from swe_rlvr.artifacts import outcomes
    from tasks.metrics import recovery_metrics, rollout_summary

    def rows(name: str, schema: str) -> list[dict]:
        url = store.join(iter_dir, f"{name}.parquet")
        return store.read_rows(url, schema) if store.exists(url) else []

    rollouts, grades = rows("rollouts", "rollouts"), rows("validations", "validations")
    both = outcomes(rollouts + rows("rollouts_guided", "rollouts"),
                    grades + rows("validations_guided", "validations"))
    failed = {g["instance_id"] for g in rows("guidance", "guidance")}   # guided instances
    recovery = recovery_metrics(both, failed)["guided_recovery_rate"] if failed else 0.0
    groups, signal = signal_groups(rows("rewards", "rewards"))
    samples = [o for o in outcomes(rollouts, grades) if o.is_sample]
    return {"train_resolve_rate": rollout_summary(rollouts, grades)["train_resolve_rate"],
            "train_samples": len(samples), "train_tally": train_tally(samples),
            "groups": groups, "signal_groups": signal, "guided_instances": len(failed),
            "guided_recovered": round(recovery * len(failed))}


def train_tally(samples: list) -> dict[str, list[int]]:
    """{instance_id: [resolved, samples]} of an iteration's unguided samples (EpisodeOutcomes),
    what `ladder_stats.trend` resamples: `ladder_stats.tally`, the evaluation's, over them."""
    rows = [{"instance_id": o.instance_id, "resolved": o.resolved} for o in samples]
    return {k: list(v) for k, v in ladder_stats.tally(rows).items()}


def signal_groups(rewards: list[dict]) -> tuple[int, int]:
    """(groups, groups whose rewards are not all equal) of the unguided samples' REWARDS rows,
    one group per instance."""
    from trainer.advantages import has_signal
    by_instance: dict[str, list[float]] = {}
    for r in rewards:
        if r["reward"] is not None and not r["guided"]:                 # a sample of the policy
            by_instance.setdefault(r["instance_id"], []).append(r["reward"])
    return len(by_instance), sum(has_signal(g) for g in by_instance.values())


def _manifests(run_dir: str) -> list[dict[str, dict]]:
    fs, path = store.fs_and_path(run_dir)
    dirs = sorted(fs.glob(f"{path}/iter_*") + fs.glob(f"{path}/*/iter_*"))
    return [store.stage_manifests(fs.unstrip_protocol(d)) for d in dirs]


# --------------------------------------------------------------------------- report.md


def _cell(value: float, digits: int = 2) -> str:
    return "—" if math.isnan(value) else f"{value:.{digits}f}"


def _ci(low: float, high: float, none: str = "n=1") -> str:
    return none if math.isnan(low) else f"[{low:.3f}, {high:.3f}]"


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head),
            *("| " + " | ".join(r) + " |" for r in rows)]


def table(results: dict[str, list[dict]]) -> list[str]:
    """The arms: pass@1 with its 95% intervals over seeds (t) and over instances (bootstrap)."""
    rows = []
    for arm, seeds in results.items():
        row = aggregate_arm(seeds)
        pooled = ladder_stats.pool([s["instances"] for s in seeds])
        _, low, high = ladder_stats.arm_interval(pooled)
        per_seed = sum(e for _, e in seeds[0]["instances"].values())
        rows.append([arm, str(len(seeds)), _cell(row["pass1"], 3),
                     _ci(row["pass1_ci_low"], row["pass1_ci_high"]), _ci(low, high, "—"),
                     str(len(pooled)), str(per_seed), _cell(row["format_error_rate"]),
                     _cell(row["submit_rate"]), _cell(row["mean_turns"], 1)])
    return _table(["arm", "seeds", "pass@1", "95% CI (seeds, t)", "95% CI (instances, bootstrap)",
                   "instances", "episodes per seed", "format err", "submit", "turns"], rows)


def cost_table(results: dict[str, list[dict]]) -> list[str]:
    """Minutes per stage bucket and per arm, means over seeds."""
    rows = []
    for arm, seeds in results.items():
        row = aggregate_arm(seeds)
        rows.append([arm, *(_cell(row[f"time_{b}_s"] / 60, 1) for b in BUCKETS),
                     _cell(row["wall_s"] / 60, 1)])
    return _table(["arm", *(f"{b} min" for b in BUCKETS), "arm min"], rows)


def comparison_table(rows: list[dict]) -> list[str]:
    """The paired comparisons, pooled over seeds and per seed."""
    return _table(["A − B", "seed", "instances", "episodes per instance (A/B)", "pass@1 A",
                   "pass@1 B", "difference", "95% CI (paired bootstrap)", "excludes 0"],
                  [[f"{r['a']} − {r['b']}", r["seed"], f"{r['instances']:.0f}",
                    f"{r['episodes_a']:.3g}/{r['episodes_b']:.3g}", f"{r['rate_a']:.3f}",
                    f"{r['rate_b']:.3f}", f"{r['diff']:+.3f}", _ci(r["low"], r["high"], "—"),
                    _excludes(r)] for r in rows])


def _excludes(row: dict) -> str:
    """The 95% interval's verdict, and for the design's comparison its look's (`ladder_design`)."""
    fixed = "yes" if ladder_stats.excludes_zero(row) else "no"
    look = row.get("sequential")
    if look is None:
        return fixed
    if not look["planned"]:
        return f"{fixed} at 95%; not judged between looks"
    return (f"{fixed} at 95%; {'yes' if ladder_stats.excludes_zero(look) else 'no'} at the look's "
            f"{100 * look['level']:.1f}%")


def curves_table(results: dict[str, list[dict]]) -> list[str]:
    """Per (arm, seed, training iteration): samples, train resolve rate, group-signal rate."""
    rows = [[arm, str(s["seed"]), it, f"{v['train_samples']:.0f}", f"{v['train_resolve_rate']:.3f}",
             f"{v['groups']:.0f}", f"{v['signal_groups']:.0f}",
             _cell(v["signal_groups"] / v["groups"] if v["groups"] else math.nan, 3)]
            for arm, seeds in results.items() for s in seeds for it, v in s["training"].items()]
    return _table(["arm", "seed", "iteration", "samples", "train resolve rate", "groups",
                   "with signal", "group-signal rate"], rows)


def trend_table(results: dict[str, list[dict]]) -> list[str]:
    """Per (arm, seed) with at least 2 training iterations: does the train curve rise
    (`ladder_stats.trend`: slope per iteration, instance-bootstrap 95% interval)?"""
    rows = []
    for arm, seeds in results.items():
        for s in seeds:
            its = s["training"]
            if len(its) < 2:
                continue
            tallies = {k: v.get("train_tally") for k, v in its.items()}
            found = ladder_stats.trend(tallies) if all(tallies.values()) else None
            if found is None:
                rows.append([arm, str(s["seed"]), str(len(its)), "—", "—", "—", "—",
                             "no per-instance tally recorded"])
                continue
            verdict = ("rises" if found["low"] > 0 else "falls" if found["high"] < 0
                       else "no trend shown")
            rows.append([arm, str(s["seed"]), f"{found['iterations']:.0f}",
                         f"{found['instances']:.0f}",
                         f"{found['first']:.3f} → {found['last']:.3f}",
                         f"{found['slope']:+.3f}", _ci(found["low"], found["high"]), verdict])
    return _table(["arm", "seed", "iterations", "instances", "first → last", "slope / iteration",
                   "95% CI (instances, bootstrap)", "verdict"], rows)


def recovery_lines(results: dict[str, list[dict]], pairs: list[dict]) -> list[str]:
    """Guided recovery of the dapo_guided arm per seed and iteration, each seed's total and the
    total over the seeds, each with its 95% Wilson interval (`ladder_stats.proportion_interval`),
    beside the paired difference of its pass@1 against the unguided dapo arm."""
    guided = results.get("dapo_guided", [])
    if not guided:
        return ["No dapo_guided result."]
    keys = ("guided_instances", "guided_recovered")
    rows, totals = [], []
    for s in guided:
        its = s["training"]
        rows += [_recovery_row(str(s["seed"]), it, v) for it, v in its.items()]
        totals.append({k: sum(v[k] for v in its.values()) for k in keys})
        rows.append(_recovery_row(str(s["seed"]), "total", totals[-1]))
    if len(totals) > 1:
        rows.append(_recovery_row("pooled", "total", {k: sum(t[k] for t in totals) for k in keys}))
    versus = [r for r in pairs if (r["a"], r["b"]) == ("dapo_guided", "dapo")]
    return [*_table(["seed", "iteration", "failed unguided (guided)", "recovered by guidance",
                     "recovery rate", "95% CI (Wilson)"], rows), "",
            "Each failed instance of an iteration is one trial (an instance guided in several "
            "iterations counts once in each).", "",
            *(comparison_table(versus) if versus else ["No dapo result to compare with."])]


def _recovery_row(seed: str, iteration: str, v: dict) -> list[str]:
    rate, low, high = ladder_stats.proportion_interval(v["guided_recovered"], v["guided_instances"])
    return [seed, iteration, f"{v['guided_instances']:.0f}", f"{v['guided_recovered']:.0f}",
            _cell(rate, 3), _ci(low, high, "—")]


def write_report(path: Path, results: dict[str, list[dict]], header: list[str],
                 design: Design | None = None) -> str:
    """Write `report.md` (header lines, then each section); returns its text. With a sequential
    `design` (`tasks.ladder_design`), its comparison is judged at the design's bound."""
    pairs = comparison_rows(results, design)
    lines = [*header, "", "## Arms", "", *table(results), "",
             "pass@1: mean over seeds of each seed's pass@1 (itself the mean over eval.runs runs on "
             "the test split). 95% CI (seeds, t): Student t over the seeds' pass@1. 95% CI "
             "(instances, bootstrap): percentile bootstrap over the test instances, each "
             "carrying its episodes of every seed. format err / submit / turns: test-split "
             "episodes of the arm's last evaluation. Step 0 of an arm that starts from another "
             "arm's policy is that arm's evaluation of it.", "",
             "## Paired comparisons", "", *comparison_table(pairs), "",
             "Difference: pass@1 of A minus B on the instances both evaluated; 95% CI: 10,000 "
             "bootstrap resamples of the instances, pairing each instance (and seed) with "
             "itself; pooled: every common seed's episodes of an instance resampled together.", "",
             *sequential_lines(pairs, design),
             "## What the intervals support", "", *statements(pairs), "",
             "## Training curves", "", "![train resolve and group-signal rate](curves.png)", "",
             *curves_table(results), "",
             "Iteration 0 of rft is its sampling of the warm-up policy; iteration k of the RL "
             "arms is policy k's sampling. The warm-up has no train resolve rate: it trains on "
             "the expert's episodes, never on its own samples. Groups: one instance's unguided "
             "samples in one iteration; with signal: their rewards are not all equal.", "",
             *trend_table(results), "",
             "Slope: least squares of the train resolve rate on the iteration, over the "
             "instances sampled in every iteration; 95% CI: 10,000 bootstrap resamples of those "
             "instances, each carrying its samples of every iteration. Rises or falls: the "
             "interval excludes 0.", "",
             "## Guided recovery (dapo_guided)", "", *recovery_lines(results, pairs), "",
             "## Cost per arm", "", *cost_table(results), "",
             "Stage minutes: per seed, summed over every invocation; arm min: wall time of the "
             "invocation that finished the arm (a resumed arm counts only its last one).", "",
             "## Per seed", "", *_per_seed(results)]
    text = "\n".join(lines) + "\n"
    path.write_text(text)
    return text


def _per_seed(results: dict[str, list[dict]]) -> list[str]:
    rows = []
    for arm, seeds in results.items():
        for s in seeds:
            steps = ", ".join(f"{k}: {v:.3f}" for k, v in sorted(s["pass1_by_step"].items(),
                                                                 key=lambda kv: int(kv[0])))
            rows.append([arm, str(s["seed"]), steps, f"`{s['run_dir']}`",
                         f"`{s['mlflow_run_id']}`"])
    return _table(["arm", "seed", "pass@1 by step", "run", "MLflow run"], rows)


# --------------------------------------------------------------------------- plots


def write_plot(path: Path, results: dict[str, list[dict]]) -> None:
    """pass@1 per iteration for every arm (mean over seeds, 95% CI bars); single-step arms are
    drawn as dashed horizontal lines across the iterations."""
    plt = _pyplot()
    curves = {arm: curve(seeds) for arm, seeds in results.items()}
    last = max([max(steps) for steps, _, _ in curves.values()] + [1])
    top = max([m + h for _, means, halves in curves.values() for m, h in zip(means, halves)] + [0.1])
    colors = plt.get_cmap("tab10").colors
    fig, ax = plt.subplots(figsize=(7, 4))
    for k, (arm, (steps, means, halves)) in enumerate(curves.items()):
        color = colors[k % len(colors)]
        if len(steps) == 1:
            ax.axhline(means[0], linestyle=(0, (4, 2 + k)), color=color, alpha=0.8, label=arm)
            ax.errorbar([0], means, yerr=[halves], fmt="o", color=color, capsize=3)
        else:
            ax.errorbar(steps, means, yerr=halves, marker="o", capsize=3, color=color, label=arm)
    ax.set_xlim(-0.3, last + 0.3)
    ax.set_xticks(range(last + 1))
    ax.set_ylim(-0.02, min(1.05, top * 1.15))
    ax.set_xlabel("RL iteration (policy version after RFT)")
    ax.set_ylabel("pass@1 on the test split")
    ax.set_title("swe-rlvr ladder: pass@1 per iteration (mean over seeds, 95% CI)")
    _finish(fig, ax, path)


def write_curves(path: Path, results: dict[str, list[dict]]) -> None:
    """Train resolve rate and group-signal rate per training iteration, one line per (arm,
    seed); the warm-up, which has neither, gets a legend entry that says so."""
    plt = _pyplot()
    colors = plt.get_cmap("tab10").colors
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4), sharex=True)
    last = 1
    for k, (arm, seeds) in enumerate(results.items()):
        for j, s in enumerate(seeds):
            its = s["training"]
            if not its:
                continue
            xs = [int(i) for i in its]
            last = max(last, *xs)
            style = dict(color=colors[k % len(colors)], marker="os^Dv"[j % 5],
                         linestyle=("-", "--", ":", "-.")[j % 4], label=f"{arm} seed {s['seed']}")
            left.plot(xs, [v["train_resolve_rate"] for v in its.values()], **style)
            right.plot(xs, [v["signal_groups"] / v["groups"] if v["groups"] else math.nan
                            for v in its.values()], **style)
    if "warmup" in results:
        left.plot([], [], linestyle="none", label="warmup: no train resolve rate\n(SFT on the "
                                                  "expert's episodes)")
    left.set_ylabel("train resolve rate")
    right.set_ylabel("groups with reward signal / groups")
    for ax in (left, right):
        ax.set_xlabel("training iteration (RFT: 0)")
        ax.set_xticks(range(last + 1))
        ax.set_ylim(-0.02, 1.02)
    fig.suptitle("swe-rlvr ladder: training curves per arm and seed")
    _finish(fig, left, path, outside=True)


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _finish(fig, ax, path: Path, outside: bool = False) -> None:
    """Grid, the legend of `ax`'s lines (beside the figure when `outside`), save and close."""
    import matplotlib.pyplot as plt
    for a in fig.axes:
        a.grid(alpha=0.3)
    if outside:
        fig.legend(*ax.get_legend_handles_labels(), loc="center left", fontsize=7,
                   bbox_to_anchor=(0.8, 0.5))
        fig.tight_layout(rect=(0, 0, 0.8, 1))
    else:
        ax.legend(loc="best", fontsize=7)
        fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
