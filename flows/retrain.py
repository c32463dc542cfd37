"""Scheduled retraining: continue from the champion, and move it only when the new policy is
better on the same evaluation.

The `retrain` flow starts `train` (as a subflow) from `models:/<registered_model>@champion`, or
from engine.model while the registry has no champion, with the warm-ups off: policy 0 is the
champion, evaluated as step 0, and the final policy is evaluated on the same eval instances and
seeds (eval instances do not rotate; the sampling seed is engine.seed) and registered. Alias
champion moves to it only when its pass@1 beats the champion's by tracking.champion_margin_sems
of the champion's SEM; the decision and both scores go to MLflow and a Prefect artifact.
"""

from __future__ import annotations

from prefect import flow

from flows.preflight import start_policy
from flows.training import train_flow
from swe_rlvr.config import load_config
from tasks.registry import champion_uri, registered_version
from tasks.report import decide_champion

RETRAIN = ["orchestration.expert_warmup=false", "orchestration.rft_warmup=false",
           "orchestration.eval_base=false", "orchestration.eval_start=true",
           "tracking.register_final=true", "tracking.promote_best=false"]
"""What a retrain fixes whatever the config says: no warm-ups (the champion is past them), the
starting policy evaluated as step 0, the final policy registered, champion moved only here."""


@flow(name="retrain")
def retrain_flow(config: str | None = None, overrides: list[str] | None = None) -> dict:
    """Train orchestration.iterations from the champion; promote the result if it is better."""
    overrides = list(overrides or [])
    cfg = load_config(config, overrides)
    start = champion_uri(cfg) or start_policy(cfg)
    trained = train_flow(config, [*overrides, *RETRAIN, f"engine.model={start}"])
    last = max(trained.metrics)
    return decide_champion(cfg, trained.mlflow_run_id, registered_version(trained.run_dir, last),
                           trained.metrics[0], trained.metrics[last], start)
