"""The ladder's outputs: one seed's result from its run directory, `report.md` and the pass@1 plot.

A seed's result is read back from the artifacts its flow wrote, not from memory, so a resumed
ladder reports exactly what a straight one would: pass@1 per evaluated step (from the flow's
metrics), the test-split format-error rate, submit rate and mean turns of the last evaluation
(`iter_<last>/eval_rollouts.parquet`), and the wall time of every stage under the run directory
(RL iterations, `rft/` and `warmup/`), grouped into rollout, grading, guidance, update and eval.
"""

from __future__ import annotations

import math
from pathlib import Path

from tasks import store
from tasks.ladder import BUCKETS, aggregate_arm, curve, stage_seconds
from tasks.metrics import episode_stats


def seed_result(arm: str, seed: int, result, wall_s: float) -> dict:
    """The JSON-able result of one (arm, seed) from its flow's RunResult."""
    evaluated = {str(k): float(m["pass1"]) for k, m in sorted(result.metrics.items()) if "pass1" in m}
    if not evaluated:
        raise ValueError(f"Arm {arm!r} seed {seed}: the run {result.run_dir} logged no pass@1; "
                         f"its evaluation did not run (check eval.split and eval.every).")
    last = max(int(k) for k in evaluated)
    eval_url = store.join(result.run_dir, f"iter_{last}", "eval_rollouts.parquet")
    rollouts = store.read_rows(eval_url, "rollouts") if store.exists(eval_url) else []
    return {"arm": arm, "seed": seed, "run_dir": result.run_dir, "run_name": result.run_name,
            "mlflow_run_id": result.mlflow_run_id, "policy": str(result.policy_dir),
            "pass1_by_step": evaluated, "pass1": evaluated[str(last)],
            **episode_stats(rollouts), "times": stage_seconds(_manifests(result.run_dir)),
            "wall_s": wall_s}


def _manifests(run_dir: str) -> list[dict[str, dict]]:
    fs, path = store.fs_and_path(run_dir)
    dirs = sorted(fs.glob(f"{path}/iter_*") + fs.glob(f"{path}/*/iter_*"))
    return [store.stage_manifests(fs.unstrip_protocol(d)) for d in dirs]


def _cell(value: float, digits: int = 2) -> str:
    return "—" if math.isnan(value) else f"{value:.{digits}f}"


def table(results: dict[str, list[dict]]) -> list[str]:
    """The report's markdown table: one row per arm, pass@1 with its 95% CI over seeds."""
    head = ["arm", "seeds", "pass@1", "95% CI", "format err", "submit", "turns",
            *(f"{b} min" for b in BUCKETS), "arm min"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for arm, seeds in results.items():
        row = aggregate_arm(seeds)
        ci = ("n=1" if math.isnan(row["pass1_ci_low"])
              else f"[{_cell(row['pass1_ci_low'], 3)}, {_cell(row['pass1_ci_high'], 3)}]")
        cells = [arm, str(len(seeds)), _cell(row["pass1"], 3), ci,
                 _cell(row["format_error_rate"]), _cell(row["submit_rate"]),
                 _cell(row["mean_turns"], 1),
                 *(_cell(row[f"time_{b}_s"] / 60, 1) for b in BUCKETS), _cell(row["wall_s"] / 60, 1)]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def write_report(path: Path, results: dict[str, list[dict]], header: list[str]) -> str:
    """Write `report.md` (header lines, the table, per-seed pass@1); returns its text."""
    lines = [*header, "", *table(results), "",
             "pass@1: mean over seeds of each seed's pass@1 (itself the mean over eval.runs runs on "
             "the test split); 95% CI: Student t over seeds. format err / submit / turns: test-split "
             "episodes of the arm's last evaluation. Stage minutes: per seed, summed over every "
             "invocation; arm min: wall time of the invocation that finished the arm (a resumed "
             "arm counts only its last one). Step 0 of an arm that starts from another arm's "
             "policy is that arm's evaluation of it.", "",
             "## Per seed", "", "| arm | seed | pass@1 by step | run | MLflow run |",
             "|---|---|---|---|---|"]
    for arm, seeds in results.items():
        for s in seeds:
            steps = ", ".join(f"{k}: {v:.3f}" for k, v in sorted(s["pass1_by_step"].items(),
                                                                 key=lambda kv: int(kv[0])))
            lines.append(f"| {arm} | {s['seed']} | {steps} | `{s['run_dir']}` | "
                         f"`{s['mlflow_run_id']}` |")
    text = "\n".join(lines) + "\n"
    path.write_text(text)
    return text


def write_plot(path: Path, results: dict[str, list[dict]]) -> None:
    """pass@1 per iteration for every arm (mean over seeds, 95% CI bars); single-step arms are
    drawn as dashed horizontal lines across the iterations."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
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
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
