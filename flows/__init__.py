"""Prefect flows: the RL iteration DAG, training, RFT and evaluation, and their deployments.

Programmatic use:

    from flows import train
    result = train(config="configs/quickstart.yaml", overrides=["orchestration.iterations=4"])
    result.run_dir, result.mlflow_run_id, result.metrics[2]["pass1"], result.artifacts(0)

`train`, `rft` and `evaluate` check the config first (`preflight`: model path, instance source,
MLflow and Prefect reachability), then run the flow of the same name. Attributes load lazily so
that `import flows` (and `swe-rlvr --help`) does not import Prefect.
"""

from __future__ import annotations

import os
from typing import Any

# The embedded ephemeral API migrates a fresh SQLite database on first start; Prefect's default
# 20 s wait is too short on a busy 2-core machine. Set before Prefect is imported; a value in the
# environment wins.
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")

_LAZY = {
    "train": "flows.api", "rft": "flows.api", "evaluate": "flows.api",
    "train_flow": "flows.training", "rft_flow": "flows.training",
    "evaluate_flow": "flows.training", "rl_iteration": "flows.iteration",
    "evaluate_policy": "flows.iteration", "rft_warmup": "flows.iteration",
    "preflight": "flows.preflight", "PreflightError": "flows.preflight",
    "RunResult": "flows.runs",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'flows' has no attribute {name!r}")
    import importlib
    return getattr(importlib.import_module(_LAZY[name]), name)
