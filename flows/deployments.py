"""Prefect deployments of the `train` flow: one started on demand with parameters (from the UI,
the API or `prefect deployment run`), and one retraining on a cron schedule.

- `swe-rlvr serve --config X` serves both from this one process (no work pool or worker needed;
  the process must stay up). It runs against whatever Prefect API is configured.
- `swe-rlvr deploy --config X` registers both with a Prefect server for a work pool
  (`orchestration.work_pool`, a process pool created if missing), so that a worker
  (`prefect worker start --pool swe-rlvr`, or the compose file's worker) runs them from this
  checkout. `prefect deploy --all` with the repository's `prefect.yaml` does the same.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from swe_rlvr.config import Config

ON_DEMAND = "train-on-demand"
SCHEDULED = "retrain-scheduled"
ENTRYPOINT = "flows/training.py:train_flow"
TAGS = ["swe-rlvr"]


def _specs(config: str, cfg: Config) -> list[dict[str, Any]]:
    params = {"config": config, "overrides": []}
    return [
        dict(name=ON_DEMAND, parameters=params, tags=TAGS,
             description="Train a policy; set `config` and dotted `overrides` per run."),
        dict(name=SCHEDULED, parameters=params, tags=TAGS, cron=cfg.orchestration.schedule,
             description=f"Scheduled retraining ({cfg.orchestration.schedule}) on `config`."),
    ]


def runner_deployments(config: str, cfg: Config) -> list[Any]:
    """Both deployments, for `prefect.serve` in this process."""
    from flows.training import train_flow
    return [train_flow.to_deployment(**spec) for spec in _specs(config, cfg)]


def serve(config: str, cfg: Config, limit: int = 1) -> None:
    """Serve both deployments from this process until interrupted (blocks)."""
    from prefect import serve as prefect_serve
    prefect_serve(*runner_deployments(config, cfg), limit=limit)


def deploy(config: str, cfg: Config, source: str | Path = ".") -> list[str]:
    """Register both deployments for `orchestration.work_pool`; returns their ids."""
    from prefect import flow as prefect_flow
    ensure_process_pool(cfg.orchestration.work_pool)
    remote = prefect_flow.from_source(source=str(Path(source).resolve()), entrypoint=ENTRYPOINT)
    return [str(remote.deploy(work_pool_name=cfg.orchestration.work_pool, build=False,
                              push=False, print_next_steps=False, **spec))
            for spec in _specs(config, cfg)]


def ensure_process_pool(name: str) -> None:
    """Create the process work pool `name` unless it exists."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectAlreadyExists
    with get_client(sync_client=True) as client:
        try:
            client.create_work_pool(WorkPoolCreate(name=name, type="process"))
        except ObjectAlreadyExists:
            pass
