"""A training run's directory and the result object the flows return.

A run lives in `<orchestration.run_root>/<run_name>`; an empty run_name generates one from the
clock. Running again with the same run_name resumes: every finished stage is reused.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from swe_rlvr.config import Config, to_dict
from tasks import store

ARTIFACTS = ("instances", "rollouts", "validations", "guidance", "rollouts_guided",
             "validations_guided", "rewards", "train_metrics", "eval_rollouts",
             "eval_validations", "eval")


def run_directory(cfg: Config, prefix: str = "train") -> str:
    """`<run_root>/<run_name>` (created, with the run's config.yaml, on first use)."""
    name = cfg.orchestration.run_name or f"{prefix}-{time.strftime('%Y%m%d-%H%M%S')}"
    run_dir = store.join(cfg.orchestration.run_root, name)
    saved = store.join(run_dir, "config.yaml")
    if not store.exists(saved):
        import yaml
        fs, path = store.fs_and_path(saved)
        fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        with fs.open(path, "w") as fh:
            yaml.safe_dump(to_dict(cfg), fh, sort_keys=False)
    return run_dir


@dataclass
class RunResult:
    """What a training, RFT or evaluation flow returns."""

    run_dir: str
    """The run directory: every artifact lies under it."""
    mlflow_run_id: str
    tracking_uri: str
    policy_dir: str
    """The final policy (the last checkpoint, or the evaluated model)."""
    metrics: dict[int, dict[str, float]] = field(default_factory=dict)
    """Step (policy version) -> the metrics logged to MLflow at that step."""
    checkpoints: list[str] = field(default_factory=list)
    """Policy k+1 of each iteration k, in order."""
    base: dict[str, float] = field(default_factory=dict)
    """The metrics of engine.model evaluated before the warm-ups (orchestration.eval_base)."""

    @property
    def run_name(self) -> str:
        return self.run_dir.rstrip("/").rsplit("/", 1)[-1]

    @property
    def pass1(self) -> float | None:
        """pass@1 of the last evaluated policy."""
        evaluated = [m["pass1"] for _, m in sorted(self.metrics.items()) if "pass1" in m]
        return evaluated[-1] if evaluated else None

    def artifacts(self, step: int) -> dict[str, str]:
        """Artifact name -> URL of every Parquet file of `iter_<step>`."""
        it = store.join(self.run_dir, f"iter_{step}")
        found = {n: store.join(it, f"{n}.parquet") for n in ARTIFACTS}
        return {n: url for n, url in found.items() if store.exists(url)}
