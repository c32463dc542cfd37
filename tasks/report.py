"""Tracking and reporting tasks: the MLflow run, per-step logging, and Prefect's run summaries.

Each flow run is named after its run directory, like its MLflow run, and ends with two Prefect
artifacts: a markdown summary (the metrics of the last step, where the artifacts lie) and a table
with one row per step, both linking to the MLflow run.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from prefect import task
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from swe_rlvr.config import Config
from tasks import registry, tracking
from tasks.errors import retry_on_infra

_TRACKING = dict(retries=2, retry_delay_seconds=[2, 10], retry_condition_fn=retry_on_infra)
SUMMARY_KEYS = ("pass1", "pass1_sem", "train_resolve_rate", "guided_recovery_rate",
                "zero_advantage_group_fraction", "reward_mean", "mean_turns", "loss")


@task(name="start-tracking", **_TRACKING)
def start_tracking(cfg: Config, run_dir: str) -> str:
    """The MLflow run id of `run_dir` (created with the config as params on first use)."""
    return tracking.open_run(cfg, run_dir)


@task(name="track-step", **_TRACKING)
def track_step(cfg: Config, run_id: str, run_dir: str, step: int, policy_dir: str | None = None,
               prefix: str = "", final: bool = False) -> dict[str, float]:
    """Log step k's metrics, artifacts and (when trained here) policy k's checkpoint; `prefix`
    names a side evaluation (`base_`) logged into the same run; `final`: policy k is the run's
    last (registered even without tracking.log_checkpoints when tracking.register_final)."""
    return tracking.log_step(cfg, run_id, run_dir, step, policy_dir, prefix, final)


@task(name="finish-tracking", **_TRACKING)
def finish_tracking(cfg: Config, run_id: str) -> None:
    tracking.close_run(cfg, run_id)


def name_flow_run(run_dir: str) -> None:
    """Rename the current Prefect flow run after its run directory (no-op outside a flow run)."""
    from prefect.client.orchestration import get_client
    from prefect.runtime import flow_run
    if not flow_run.id or flow_run.name == run_name(run_dir):
        return
    with get_client(sync_client=True) as prefect:
        prefect.update_flow_run(flow_run.id, name=run_name(run_dir))


def run_name(run_dir: str) -> str:
    return run_dir.rstrip("/").rsplit("/", 1)[-1]


@contextmanager
def tracked_run(cfg: Config, run_dir: str) -> Iterator[str]:
    """The MLflow run of `run_dir` for the body of a flow, whose flow run takes the directory's
    name: FINISHED when the body returns, FAILED when it raises (a rerun of the same run
    directory reopens it as RUNNING and resumes)."""
    name_flow_run(run_dir)
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
    mlflow_run = f"[{run_id}]({link})" if link.startswith("http") else f"`{run_id}` ({link})"
    lines = [f"# {title}", "", f"- run directory: `{run_dir}`", f"- MLflow run: {mlflow_run}",
             f"- steps logged: {sorted(steps)}", "", "| metric | value |", "|---|---|"]
    lines += [f"| {k} | {last[k]:.4g} |" for k in SUMMARY_KEYS if k in last]
    markdown = "\n".join(lines)
    key = _artifact_key(f"{title}-{run_name(run_dir)}")
    create_markdown_artifact(markdown, key=f"{key}-summary", description=f"{title}: {link}")
    rows = [{"step": s, "mlflow_run": run_id, **{k: round(v, 4) for k, v in m.items()
                                                  if k in SUMMARY_KEYS}}
            for s, m in sorted(steps.items())]
    create_table_artifact(rows, key=f"{key}-metrics", description=f"MLflow run {run_id}: {link}")
    return markdown


@task(name="decide-champion", **_TRACKING)
def decide_champion(cfg: Config, run_id: str, version: str, champion: dict[str, float],
                    new: dict[str, float], started_from: str) -> dict:
    """Promote registered `version` to champion when it beats the policy it started from
    (`registry.champion_decision`); record the decision in MLflow and a Prefect artifact."""
    decision = {**registry.champion_decision(champion, new, cfg.tracking.champion_margin_sems),
                "started_from": started_from, "version": version}
    decision["promoted"] = decision["promoted"] and bool(version)   # nothing registered to move
    registry.record_decision(cfg, run_id, version, decision)
    verdict = (f"version {version} is the new champion" if decision["promoted"]
               else f"champion kept; version {version} stays a candidate")
    markdown = "\n".join([
        "# retrain", "", f"- {verdict}", f"- started from `{started_from}`",
        f"- MLflow run: `{run_id}` ({tracking.run_link(cfg, run_id)})", "",
        "| policy | pass@1 | SEM |", "|---|---|---|",
        f"| champion | {decision['champion_pass1']:.4g} | {decision['champion_pass1_sem']:.4g} |",
        f"| new (v{version}) | {decision['new_pass1']:.4g} | {decision['new_pass1_sem']:.4g} |",
        "", f"Promoted only above {decision['threshold']:.4g} (champion pass@1 + "
        f"{decision['margin_sems']:g} SEM)."])
    create_markdown_artifact(markdown, key=_artifact_key(f"retrain-{run_id}"),
                             description=f"retrain: {verdict}")
    return decision
