"""Prefect deployments: the `train` flow started on demand with parameters (from the UI, the API
or `prefect deployment run`), and the `retrain` flow (`flows.retrain`: from the champion, which
moves only when the new policy is better) on a cron schedule.

- `swe-rlvr serve --config X` serves both from this one process (no work pool or worker needed;
  the process must stay up). It runs against whatever Prefect API is configured.
- `swe-rlvr deploy --config X` registers both with a Prefect server for a work pool
  (`orchestration.work_pool`, a process pool created if missing), so that a worker
  (`prefect worker start --pool swe-rlvr`, or the compose file's worker) runs them from this
  checkout. `prefect deploy --all` with the repository's `prefect.yaml` does the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from swe_rlvr.config import Config

ON_DEMAND = "train-on-demand"
SCHEDULED = "retrain-scheduled"
ENTRYPOINT = "flows/training.py:train_flow"
ENTRYPOINTS = {ON_DEMAND: ENTRYPOINT, SCHEDULED: "flows/retrain.py:retrain_flow"}
"""The scheduled deployment retrains from the champion (`flows.retrain`)."""
TAGS = ["swe-rlvr"]


def _specs(config: str, cfg: Config, overrides: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Both deployments' specs. Their parameters are the command's `config` and dotted
    `overrides`, so each run trains on what the command's preflight checked."""
    params = {"config": config, "overrides": list(overrides)}
    return [
        dict(name=ON_DEMAND, parameters=params, tags=TAGS,
             description="Train a policy; set `config` and dotted `overrides` per run."),
        dict(name=SCHEDULED, parameters=params, tags=TAGS, cron=cfg.orchestration.schedule,
             description=f"Scheduled retraining ({cfg.orchestration.schedule}) on `config`."),
    ]


def runner_deployments(config: str, cfg: Config, overrides: Sequence[str] = ()) -> list[Any]:
    """Both deployments, for `prefect.serve` in this process."""
    from flows.retrain import retrain_flow
    from flows.training import train_flow
    flows = {ON_DEMAND: train_flow, SCHEDULED: retrain_flow}
    return [flows[spec["name"]].to_deployment(**spec) for spec in _specs(config, cfg, overrides)]


def serve(config: str, cfg: Config, limit: int = 1, overrides: Sequence[str] = ()) -> None:
    """Serve both deployments from this process until interrupted (blocks)."""
    from prefect import serve as prefect_serve
    prefect_serve(*runner_deployments(config, cfg, overrides), limit=limit)


def deploy(config: str, cfg: Config, source: str | Path = ".",
           overrides: Sequence[str] = ()) -> list[str]:
    """Register both deployments for `orchestration.work_pool`; returns their ids."""
    from prefect import flow as prefect_flow
    ensure_process_pool(cfg.orchestration.work_pool)
    remote = {name: prefect_flow.from_source(source=str(Path(source).resolve()), entrypoint=entry)
              for name, entry in ENTRYPOINTS.items()}
    return [str(remote[spec["name"]].deploy(work_pool_name=cfg.orchestration.work_pool,
                                            build=False, push=False, print_next_steps=False,
                                            **spec))
            for spec in _specs(config, cfg, overrides)]


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
