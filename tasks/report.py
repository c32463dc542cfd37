"""Tracking and reporting tasks: the MLflow run, per-step logging, and Prefect's run summaries.

Each flow run is named after its run directory, like its MLflow run, and ends with two Prefect
artifacts that show what the CLI prints: a markdown summary (where the run lies, then one row per
step of `STEP_KEYS`, with links to the MLflow run and to the traces of the step's failed
evaluation episodes) and a table artifact of the same rows.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from prefect import task
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from swe_rlvr.config import Config
from tasks import registry, traces, tracking
from tasks.errors import retry_on_infra

_TRACKING = dict(retries=2, retry_delay_seconds=[2, 10], retry_condition_fn=retry_on_infra)
STEP_KEYS = ("pass1", "pass1_sem", "eval_format_error_rate", "eval_submit_rate",
             "eval_mean_turns", "train_resolve_rate", "guided_recovery_rate", "reward_mean", "loss")
"""The columns of a run's per-step table, in the CLI (`flows.cli.summary_table`) and in Prefect."""
FAILED_LINKS = 3
"""Failed evaluation episodes linked per step in the summary (the search finds them all)."""


@task(name="start-tracking", **_TRACKING)
def start_tracking(cfg: Config, run_dir: str, trains: bool = True) -> str:
    """The MLflow run id of `run_dir` (created with the config as params on first use)."""
    return tracking.open_run(cfg, run_dir, trains)


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
def tracked_run(cfg: Config, run_dir: str, trains: bool = True) -> Iterator[str]:
    """The MLflow run of `run_dir` for the body of a flow, whose flow run takes the directory's
    name: FINISHED when the body returns, FAILED when it raises (a rerun of the same run
    directory reopens it as RUNNING and resumes); a run that `trains` logs its train pool."""
    name_flow_run(run_dir)
    run_id = start_tracking(cfg, run_dir, trains)
    monitor = system_metrics(cfg, run_id)
    try:
        yield run_id
    except BaseException:
        try:
            tracking.close_run(cfg, run_id, status="FAILED")
        except Exception as exc:  # the flow's own error matters more than this one
            logging.getLogger(__name__).warning("could not mark MLflow run %s FAILED: %s",
                                                run_id, exc)
        raise
    finally:
        if monitor is not None:
            monitor.finish()
    finish_tracking(cfg, run_id)


def system_metrics(cfg: Config, run_id: str):
    """MLflow's system-metrics monitor (CPU, memory, disk, network; GPUs where it finds them)
    sampling into the run every tracking.system_metrics_s seconds, started; None when off."""
    if not cfg.tracking.system_metrics_s:
        return None
    from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor
    monitor = SystemMetricsMonitor(run_id, sampling_interval=cfg.tracking.system_metrics_s,
                                   resume_logging=True,
                                   tracking_uri=tracking.tracking_uri(cfg))
    monitor.start()
    return monitor


def _artifact_key(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text.lower()).strip("-")[:60] or "run"


@task(name="summarize")
def summarize(cfg: Config, run_id: str, run_dir: str, steps: dict[int, dict[str, float]],
              title: str) -> str:
    """Create the markdown and table artifacts of this flow run; returns the markdown."""
    link = tracking.run_link(cfg, run_id)
    mlflow_run = f"[{run_id}]({link})" if link.startswith("http") else f"`{run_id}` ({link})"
    failed = {step: _failed_traces(cfg, run_id, step) for step, m in steps.items() if "pass1" in m}
    keys = [k for k in STEP_KEYS if any(k in m for m in steps.values())]
    lines = [f"# {title}", "", f"- run directory: `{run_dir}`", f"- MLflow run: {mlflow_run}",
             f"- steps logged: {sorted(steps)}", "",
             "| step | " + " | ".join(keys) + " | failed eval episodes |",
             "|---" * (len(keys) + 2) + "|"]
    for step, m in sorted(steps.items()):
        cells = [f"{m[k]:.3f}" if k in m else "-" for k in keys]
        lines.append(f"| {step} | " + " | ".join(cells) + f" | {failed.get(step, ('-',))[0]} |")
    if failed:
        lines += ["", "Traces of a step's failed evaluation episodes, in the MLflow UI's Traces "
                  "tab (or `mlflow.search_traces`): "
                  f"`{traces.failed_eval_filter(max(failed))}`"]
    markdown = "\n".join(lines)
    key = _artifact_key(f"{title}-{run_name(run_dir)}")
    create_markdown_artifact(markdown, key=f"{key}-summary", description=f"{title}: {link}")
    rows = [{"step": s, **{k: round(m[k], 4) for k in keys if k in m}, "mlflow_run": link,
             "failed_eval_traces": failed.get(s, ("", ""))[1]} for s, m in sorted(steps.items())]
    create_table_artifact(rows, key=f"{key}-metrics", description=f"MLflow run {run_id}: {link}")
    return markdown


def _failed_traces(cfg: Config, run_id: str, step: int) -> tuple[str, str]:
    """(markdown, plain text) naming step's failed evaluation episodes' traces: their count and
    links to the first FAILED_LINKS where the MLflow UI has a URL."""
    if not cfg.tracking.traces:
        return "-", ""
    found = traces.find(cfg, run_id, traces.failed_eval_filter(step), max_results=1000)
    if not found:
        return "0", ""
    ui = cfg.tracking.ui_url or (tracking.tracking_uri(cfg) if tracking.tracking_uri(cfg)
                                 .startswith("http") else "")
    if not ui:
        return str(len(found)), ""
    experiment = found[0].info.experiment_id
    urls = [traces.trace_link(ui, experiment, t.info.trace_id) for t in found[:FAILED_LINKS]]
    links = ", ".join(f"[{t.info.tags.get('instance_id', t.info.trace_id)}]({u})"
                      for t, u in zip(found, urls, strict=False))
    return f"{len(found)}: {links}", " ".join(urls)


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
