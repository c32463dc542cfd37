"""Tracking and reporting tasks: the MLflow run, per-step logging, and Prefect's run summaries.

Each flow run ends with two Prefect artifacts: a markdown summary (the metrics of the last step,
where the artifacts lie) and a table with one row per step, both linking to the MLflow run.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from prefect import task
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from swe_rlvr.config import Config
from tasks import tracking
from tasks.errors import retry_on_infra

_TRACKING = dict(retries=2, retry_delay_seconds=[2, 10], retry_condition_fn=retry_on_infra)
SUMMARY_KEYS = ("pass1", "pass1_sem", "train_resolve_rate", "guided_recovery_rate",
                "zero_advantage_group_fraction", "reward_mean", "mean_turns", "loss")


@task(name="start-tracking", **_TRACKING)
def start_tracking(cfg: Config, run_dir: str) -> str:
    """The MLflow run id of `run_dir` (created with the config as params on first use)."""
    return tracking.open_run(cfg, run_dir)


@task(name="track-step", **_TRACKING)
def track_step(cfg: Config, run_id: str, run_dir: str, step: int, policy_dir: str = "",
               prefix: str = "") -> dict[str, float]:
    """Log step k's metrics, artifacts and (when trained here) policy k's checkpoint; `prefix`
    names a side evaluation (`base_`) logged into the same run."""
    return tracking.log_step(cfg, run_id, run_dir, step, policy_dir, prefix)


@task(name="finish-tracking", **_TRACKING)
def finish_tracking(cfg: Config, run_id: str) -> None:
    tracking.close_run(cfg, run_id)


@contextmanager
def tracked_run(cfg: Config, run_dir: str) -> Iterator[str]:
    """The MLflow run of `run_dir` for the body of a flow: FINISHED when the body returns, FAILED
    when it raises (a rerun of the same run directory reopens it as RUNNING and resumes)."""
    run_id = start_tracking(cfg, run_dir)
    try:
        yield run_id
    except BaseException:
        try:
            tracking.close_run(cfg, run_id, status="FAILED")
        except Exception as exc:  # the flow's own error matters more than this one
            logging.getLogger(__name__).warning("could not mark MLflow run %s FAILED: %s",
                                                run_id, exc)
        raise
    finish_tracking(cfg, run_id)


def _artifact_key(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text.lower()).strip("-")[:60] or "run"


@task(name="summarize")
def summarize(cfg: Config, run_id: str, run_dir: str, steps: dict[int, dict[str, float]],
              title: str) -> str:
    """Create the markdown and table artifacts of this flow run; returns the markdown."""
    link = tracking.run_link(cfg, run_id)
    last = steps[max(steps)] if steps else {}
    lines = [f"# {title}", "", f"- run directory: `{run_dir}`", f"- MLflow run: `{run_id}`",
             f"- MLflow: {link}", f"- steps logged: {sorted(steps)}", "", "| metric | value |",
             "|---|---|"]
    lines += [f"| {k} | {last[k]:.4g} |" for k in SUMMARY_KEYS if k in last]
    markdown = "\n".join(lines)
    key = _artifact_key(f"{title}-{run_dir.rstrip('/').rsplit('/', 1)[-1]}")
    create_markdown_artifact(markdown, key=f"{key}-summary", description=f"{title}: {link}")
    rows = [{"step": s, "mlflow_run": run_id, **{k: round(v, 4) for k, v in m.items()
                                                  if k in SUMMARY_KEYS}}
            for s, m in sorted(steps.items())]
    create_table_artifact(rows, key=f"{key}-metrics", description=f"MLflow run {run_id}: {link}")
    return markdown
