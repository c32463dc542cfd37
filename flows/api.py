"""`train`, `rft` and `evaluate` as plain functions: check everything first, then run the flow.

A flow that fails raises `RunFailed`: its message names the failed stage and its error (which
states the fix), the run directory, which resumes when run again under the same run_name, and the
Prefect flow run. The run_name is fixed here before the flow starts, so the directory is known
even when the flow never returns.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from flows.preflight import preflight
from flows.runs import RunResult
from swe_rlvr.cli import CommandError
from swe_rlvr.config import Config, ConfigError, load_config
from swe_rlvr.instances import shares_instances, split_problem
from tasks.store import join

log = logging.getLogger(__name__)


class RunFailed(CommandError):
    """A flow run failed; the message is the cause, the fix, the run directory and the flow run."""

    def __init__(self, flow: str, cause: str, run_dir: str, flow_run: str):
        self.cause, self.run_dir, self.flow_run = cause, run_dir, flow_run
        run_name = run_dir.rstrip("/").rsplit("/", 1)[-1]
        super().__init__(f"the {flow} run failed: {cause}\n"
                         f"  run directory:    {run_dir}\n"
                         f"  Prefect flow run: {flow_run}\n"
                         f"  fix the cause and run again with orchestration.run_name={run_name} to "
                         f"resume from the last finished stage (-v shows the traceback)")


def _checked(config: str | Path | None, overrides: Sequence[str], trains: bool = True,
             prefix: str = "train") -> tuple[str | None, list[str], str]:
    """(config, overrides with a fixed run_name, run directory) once the preflight passes."""
    cfg = load_config(config, list(overrides))
    _check_splits(cfg, trains)
    preflight(cfg, trains=trains)
    from flows.ephemeral import watch_ephemeral_server
    watch_ephemeral_server()   # with no Prefect API configured: the server dies with this process
    name = cfg.orchestration.run_name or f"{prefix}-{time.strftime('%Y%m%d-%H%M%S')}"
    overrides = list(overrides) + ([] if cfg.orchestration.run_name
                                   else [f"orchestration.run_name={name}"])
    return (str(config) if config else None), overrides, join(cfg.orchestration.run_root, name)


def _check_splits(cfg: Config, trains: bool) -> None:
    """Refuse a split that selects nothing; for training, refuse (or, when
    eval.share_train_instances allows it, warn) when its instances may be evaluated on too."""
    settings = [("eval.split", cfg.eval.split)]
    settings += [("instances.train_split", cfg.instances.train_split)] if trains else []
    problems = [p for p in (split_problem(split, key) for key, split in settings) if p]
    if problems:
        raise ConfigError(" ".join(problems))
    if not trains:
        return
    from tasks.instances import check_sharing
    check_sharing(cfg)
    train_split, eval_split = cfg.instances.train_split, cfg.eval.split
    if shares_instances(train_split, eval_split):
        log.warning("training (instances.train_split=%s) and evaluation (eval.split=%s) share "
                    "instances (eval.share_train_instances=true): pass@1 includes instances the "
                    "policy trained on", train_split, eval_split)


def train(config: str | Path | None = None, overrides: Sequence[str] = ()) -> RunResult:
    """Run the `train` flow on a YAML config plus dotted overrides; resumes an existing run_name."""
    from flows.training import train_flow
    config, overrides, run_dir = _checked(config, overrides)
    return _run(train_flow, run_dir, config=config, overrides=overrides)


def rft(config: str | Path | None = None, overrides: Sequence[str] = (),
        evaluate: bool = True) -> RunResult:
    """Run the `rft` flow (rejection fine-tuning on the policy's own successes, then evaluation
    unless `evaluate` is false)."""
    from flows.training import rft_flow
    config, overrides, run_dir = _checked(config, overrides, prefix="rft")
    return _run(rft_flow, run_dir, config=config, overrides=overrides, evaluate=evaluate)


def evaluate(config: str | Path | None = None, overrides: Sequence[str] = (),
             model: str | None = None, split: str | None = None,
             verifier: str | Path | None = None) -> RunResult:
    """pass@1 ± SEM and pass@k of `model` (default engine.model) on `split` (default eval.split;
    "all" for every instance); best@k too with a trained `verifier` directory and
    eval.best_of_k > 0."""
    from flows.training import evaluate_flow
    extra = (([f"engine.model={model}"] if model else [])
             + ([f"eval.split={split}"] if split is not None else []))
    config, overrides, run_dir = _checked(config, list(overrides) + extra, trains=False,
                                          prefix="eval")
    if verifier:
        _check_verifier(verifier, load_config(config, overrides))
    return _run(evaluate_flow, run_dir, config=config, overrides=overrides,
                verifier=str(verifier) if verifier else None)


def _run(flow: Callable[..., RunResult], run_dir: str, **parameters: Any) -> RunResult:
    """Call `flow`; a failed run raises RunFailed, chained to the flow's own exception."""
    state = flow(**parameters, return_state=True)
    try:
        return state.result()
    except Exception as exc:  # noqa: BLE001 - every failure of the flow becomes one RunFailed
        flow_run_id = state.state_details.flow_run_id
        stage, label = "", str(flow_run_id)
        try:
            stage, label = _failed_stage(flow_run_id), _flow_run_label(flow_run_id)
        except Exception:  # noqa: BLE001 - an unreachable API must not hide the run's own error
            log.debug("could not look up the failed flow run %s", flow_run_id, exc_info=True)
        cause = stage or f"{type(exc).__name__}: {exc}"
        raise RunFailed(flow.name, cause, run_dir, label) from exc


def _check_verifier(verifier: str | Path, cfg: Config) -> None:
    if cfg.eval.best_of_k <= 0:
        raise ConfigError(f"A verifier ({verifier}) reranks nothing with eval.best_of_k=0; set "
                          f"eval.best_of_k to the block size k (at most eval.runs="
                          f"{cfg.eval.runs}).")
    from tasks import store
    if not store.is_sealed(str(verifier)):
        raise ConfigError(f"{verifier} is not a trained verifier (no _SUCCESS marker); pass a "
                          f"run's iter_<k>/verifier, written when eval.best_of_k > 0.")


def _failed_stage(flow_run_id: Any, wait_s: float = 5.0) -> str:
    """`stage '<task run>': <error>` of the first task run that failed in the flow run or its
    subflows ("" when none did). Task states reach the API as events, so a failure may take a
    moment to show."""
    deadline = time.monotonic() + wait_s
    while True:
        failed = _failed_task_runs(flow_run_id)
        if failed or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    if not failed:
        return ""
    first = failed[0]
    message = (first.state.message or "").removeprefix("Task run encountered an exception ")
    return f"stage {first.name!r}: {message or first.state.name}"


def _failed_task_runs(flow_run_id: Any) -> list:
    """The FAILED task runs (not subflow placeholders) of the flow run and every subflow run of
    it, the earliest first."""
    from prefect import get_client
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterId,
        FlowRunFilterParentFlowRunId,
        TaskRunFilter,
        TaskRunFilterState,
        TaskRunFilterStateType,
        TaskRunFilterSubFlowRuns,
    )
    from prefect.client.schemas.objects import StateType
    from prefect.client.schemas.sorting import TaskRunSort
    with get_client(sync_client=True) as client:
        ids, frontier = [flow_run_id], [flow_run_id]
        while frontier:
            children = client.read_flow_runs(flow_run_filter=FlowRunFilter(
                parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=frontier)))
            frontier = [c.id for c in children if c.id not in ids]
            ids += frontier
        return client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=ids)),
            task_run_filter=TaskRunFilter(
                state=TaskRunFilterState(type=TaskRunFilterStateType(any_=[StateType.FAILED])),
                subflow_runs=TaskRunFilterSubFlowRuns(exists_=False)),
            sort=TaskRunSort.EXPECTED_START_TIME_ASC)


def _flow_run_label(flow_run_id: Any) -> str:
    """`<id> ('<name>')`, the name as the Prefect UI shows it."""
    from prefect import get_client
    with get_client(sync_client=True) as client:
        return f"{flow_run_id} ({client.read_flow_run(flow_run_id).name!r})"
