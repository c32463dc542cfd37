"""`flows.runners.stages`: one typed, frozen bundle of the stage tasks of a run directory."""

from __future__ import annotations

import dataclasses
import typing

import pytest
from prefect import Task

from flows.runners import Stages, WithRayResources, stages
from swe_rlvr.config import load_config

FIELDS = ["instances", "rollout", "validate", "guidance", "reward", "update", "evaluate",
          "verifier", "rollout_guided", "validate_guided", "curriculum", "eval_instances",
          "eval_rollout", "eval_validate"]


def test_every_stage_is_a_typed_field():
    """A type checker sees each stage as a Prefect task whose runs return a URL (the update may
    also be the Ray wrapper), so `s.rolout` or a missing stage is an error before any run."""
    hints = typing.get_type_hints(Stages)
    assert list(hints) == FIELDS
    assert {name: tp for name, tp in hints.items() if name != "update"} == \
        {name: Task[..., str] for name in FIELDS if name != "update"}
    assert hints["update"] == Task[..., str] | WithRayResources


def test_the_bundle_holds_each_task_under_its_stage_name_with_the_runs_options(tmp_path):
    cfg = load_config(None, ["orchestration.retries=3", "orchestration.retry_delay_s=2"])
    s = stages(cfg, str(tmp_path / "run"))
    assert isinstance(s, Stages) and [f.name for f in dataclasses.fields(s)] == FIELDS
    for name in FIELDS:
        task = getattr(s, name)
        assert isinstance(task, Task)                     # threads: no Ray resources asked
        assert task.name == name.replace("_", "-") and task.retries == 3
        assert task.retry_delay_seconds == [2.0, 6.0, 18.0]
        assert task.task_run_name == f"{task.name}-i{{iteration}}"
    assert s.rollout_guided.fn is s.rollout.fn is s.eval_rollout.fn
    assert s.eval_instances.fn is s.instances.fn and s.eval_validate.fn is s.validate.fn
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.update = s.rollout  # type: ignore[misc]
