"""Cache keys from what a stage reads: the content of its input artifacts and the frozen config.

The same key serves twice: Prefect's cache (so a rerun of a flow reuses finished task runs) and
the stage manifest (so a stage is skipped when its outputs already exist, even with no Prefect
cache store, e.g. after the run directory moved to another machine).

Inputs are keyed by kind:
- an argument named `*_path` or `policy_dir` is an input artifact: its *content* hash counts, not
  its name (a checkpoint directory contributes the hash in its `_SUCCESS` marker);
- a `Config` (or any config section) counts as its values, minus the sections that do not change
  results (`tracking`, `orchestration`, `eval.every`), so extending a run's iteration count or
  moving MLflow does not invalidate finished stages;
- anything else (iteration, split, run_dir) counts by value.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from prefect.cache_policies import CachePolicy

from swe_rlvr.config import to_dict
from tasks import store

_ARTIFACT_SUFFIXES = ("_path", "policy_dir")
_NEUTRAL_SECTIONS = ("tracking", "orchestration")
KEY_VERSION = "1"
"""Bump when a stage's semantics change so old outputs are recomputed."""


def config_values(cfg: Any) -> dict:
    """The result-relevant values of a Config (or of one section)."""
    data = to_dict(cfg)
    for section in _NEUTRAL_SECTIONS:
        data.pop(section, None)
    if isinstance(data.get("eval"), dict):
        data["eval"] = {k: v for k, v in data["eval"].items() if k != "every"}
    return data


def _value(name: str, value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return config_values(value)
    if name.endswith(_ARTIFACT_SUFFIXES) and isinstance(value, str) and value:
        return {"sha256": store.content_hash(value)} if store.exists(value) else {"missing": value}
    if isinstance(value, (list, tuple)):
        return [_value(name, v) for v in value]
    return value


def input_key(stage: str, inputs: dict[str, Any]) -> str:
    """A stable hex key of `stage` applied to `inputs` (see the module docstring)."""
    keyed = {name: _value(name, value) for name, value in sorted(inputs.items())}
    blob = json.dumps({"stage": stage, "v": KEY_VERSION, "inputs": keyed}, sort_keys=True,
                      default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


@dataclasses.dataclass
class ArtifactInputs(CachePolicy):
    """Prefect cache policy: `input_key` of the task's name and its inputs."""

    def compute_key(self, task_ctx: Any, inputs: dict[str, Any], flow_parameters: dict[str, Any],
                    **kwargs: Any) -> str | None:
        return input_key(task_ctx.task.name, inputs or {})


ARTIFACT_INPUTS = ArtifactInputs()
