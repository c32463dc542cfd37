"""`train`, `rft` and `evaluate` as plain functions: check everything first, then run the flow."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from flows.preflight import preflight
from flows.runs import RunResult
from swe_rlvr.config import Config, ConfigError, load_config


def _checked(config: str | Path | None, overrides: Sequence[str],
             trains: bool = True) -> tuple[str | None, list[str]]:
    preflight(load_config(config, list(overrides)), trains=trains)
    return (str(config) if config else None), list(overrides)


def train(config: str | Path | None = None, overrides: Sequence[str] = ()) -> RunResult:
    """Run the `train` flow on a YAML config plus dotted overrides; resumes an existing run_name."""
    from flows.training import train_flow
    config, overrides = _checked(config, overrides)
    return train_flow(config=config, overrides=overrides)


def rft(config: str | Path | None = None, overrides: Sequence[str] = ()) -> RunResult:
    """Run the `rft` flow (rejection fine-tuning on the policy's own successes, then evaluation)."""
    from flows.training import rft_flow
    config, overrides = _checked(config, overrides)
    return rft_flow(config=config, overrides=overrides)


def evaluate(config: str | Path | None = None, overrides: Sequence[str] = (), model: str = "",
             split: str = "", verifier: str = "") -> RunResult:
    """pass@1 ± SEM and pass@k of `model` (default engine.model) on `split` (default eval.split);
    best@k too with a trained `verifier` directory and eval.best_of_k > 0."""
    from flows.training import evaluate_flow
    extra = ([f"engine.model={model}"] if model else []) + ([f"eval.split={split}"] if split else [])
    config, overrides = _checked(config, list(overrides) + extra, trains=False)
    if verifier:
        _check_verifier(verifier, load_config(config, overrides))
    return evaluate_flow(config=config, overrides=overrides, verifier=str(verifier))


def _check_verifier(verifier: str | Path, cfg: Config) -> None:
    if cfg.eval.best_of_k <= 0:
        raise ConfigError(f"A verifier ({verifier}) reranks nothing with eval.best_of_k=0; set "
                          f"eval.best_of_k to the block size k (at most eval.runs="
                          f"{cfg.eval.runs}).")
    from tasks import store
    if not store.is_sealed(str(verifier)):
        raise ConfigError(f"{verifier} is not a trained verifier (no _SUCCESS marker); pass a "
                          f"run's iter_<k>/verifier, written when eval.best_of_k > 0.")
