"""The experiment ladder in MLflow (`flows.experiment`): one parent run for the ladder, one child
run per arm (the aggregate over seeds, its mean pass@1 per step), each (arm, seed) flow run a child
of its arm, and the report with its plots as the parent's artifacts.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from swe_rlvr.config import Config


def tracking_run(cfg: Config, run_dir: Path, parent: str | None) -> str:
    """The MLflow run of `run_dir` (the ladder, or one arm), a child of `parent` when given."""
    from tasks import tracking
    run_id = tracking.open_run(cfg, str(run_dir))
    if parent:
        tracking.client(cfg).set_tag(run_id, "mlflow.parentRunId", parent)
    return run_id


def tag_child(cfg: Config, run_id: str, arm_run: str, arm: str, seed: int) -> None:
    from tasks import tracking
    mlc = tracking.client(cfg)
    for key, value in (("mlflow.parentRunId", arm_run), ("swe_rlvr.arm", arm),
                       ("swe_rlvr.seed", str(seed))):
        mlc.set_tag(run_id, key, value)


def log_arm(cfg: Config, arm_run: str, parent: str, arm: str, seeds: list[dict],
            arm_dir: Path) -> None:
    """The arm's aggregate (and its mean pass@1 per step) on its run and, prefixed, on the parent;
    once per set of seeds (`<arm dir>/logged.json`), so a resumed ladder logs nothing twice. The
    arm's run ends FINISHED either way (an arm with no evaluated seed, `--skip-eval`, logs none)."""
    from tasks import tracking
    logged = arm_dir / "logged.json"
    runs = sorted(s["mlflow_run_id"] for s in seeds)
    if not seeds or (logged.exists() and json.loads(logged.read_text()) == runs):
        tracking.close_run(cfg, arm_run)        # `tracking_run` reopened it
        return
    import math

    from mlflow.entities import Metric

    from tasks.ladder import aggregate_arm, curve
    from tasks.ladder_stats import arm_interval, pool
    now = int(time.time() * 1000)
    _, low, high = arm_interval(pool([s["instances"] for s in seeds]))
    row = {k: v for k, v in {**aggregate_arm(seeds), "pass1_instances_ci_low": low,
                             "pass1_instances_ci_high": high}.items() if not math.isnan(v)}
    steps, means, _ = curve(seeds)
    mlc = tracking.client(cfg)
    mlc.set_tag(arm_run, "swe_rlvr.arm", arm)
    mlc.log_batch(arm_run, metrics=[Metric(k, v, now, 0) for k, v in row.items()
                                    if k != "pass1"]
                  + [Metric("pass1", m, now, s) for s, m in zip(steps, means)])
    mlc.log_batch(parent, metrics=[Metric(f"{arm}.{k}", v, now, 0) for k, v in row.items()])
    tracking.close_run(cfg, arm_run)
    logged.write_text(json.dumps(runs))


def finish(cfg: Config, parent: str, out: Path, ladder: Any) -> None:
    from tasks import tracking
    mlc = tracking.client(cfg)
    mlc.set_tag(parent, "swe_rlvr.ladder.seeds", ",".join(map(str, ladder.seeds)))
    mlc.set_tag(parent, "swe_rlvr.ladder.arms", ",".join(ladder.arms))
    mlc.log_artifact(parent, str(out / "report.md"))
    mlc.log_artifact(parent, str(out / "ladder.png"))
    mlc.log_artifact(parent, str(out / "curves.png"))
    tracking.close_run(cfg, parent)
