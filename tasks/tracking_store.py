"""Where MLflow keeps a training run: the tracking URI, the artifact location, a client on them.

The default store is SQLite under the run root (`<run_root>/mlflow.db`) with the artifact location
beside it (`<run_root>/mlartifacts`); a team server (`infra/docker-compose.yml`) is one
`tracking.mlflow_uri` away. The run's metrics and artifacts (`tasks.tracking`) and its registered
models (`tasks.registry`) both connect through here.
"""

from __future__ import annotations

from typing import Any

from swe_rlvr.config import Config
from tasks import store


def tracking_uri(cfg: Config) -> str:
    """tracking.mlflow_uri, else `sqlite:///<run_root>/mlflow.db` (absolute)."""
    if cfg.tracking.mlflow_uri:
        return cfg.tracking.mlflow_uri
    root = store.local_dir(cfg.orchestration.run_root)
    if root is None:
        raise ValueError("orchestration.run_root is not a local path, so the default SQLite "
                         "MLflow store cannot live there; set tracking.mlflow_uri to a server.")
    root.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{root / 'mlflow.db'}"


def artifact_location(cfg: Config) -> str | None:
    """tracking.artifact_location, else `<run_root>/mlartifacts` for a local run root."""
    if cfg.tracking.artifact_location:
        return cfg.tracking.artifact_location
    root = store.local_dir(cfg.orchestration.run_root)
    if root is None or (cfg.tracking.mlflow_uri or "").startswith("http"):
        return None  # a server chooses its own artifact store
    return (root / "mlartifacts").as_uri()


def use_store(cfg: Config) -> None:
    """Point MLflow's global URIs at the run's store, for what MLflow only does through them:
    the tracer exports traces there (on a background thread), and the registry resolves a
    `models:/<model_id>` source there. Set only when it differs, and not put back: changing it
    flushes the trace queue first (seconds), and in a training process everything goes here."""
    import mlflow
    uri = tracking_uri(cfg)
    if mlflow.get_tracking_uri() != uri:
        mlflow.set_tracking_uri(uri)
    if mlflow.get_registry_uri() != uri:
        mlflow.set_registry_uri(uri)


def client(cfg: Config) -> Any:
    """An MlflowClient on the run's tracking store, which is also its model registry."""
    from mlflow.tracking import MlflowClient
    return MlflowClient(tracking_uri=tracking_uri(cfg), registry_uri=tracking_uri(cfg))
