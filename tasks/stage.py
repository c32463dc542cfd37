"""What every stage task shares: Prefect options, the iteration directory and the skip-if-done rule.

A stage task is decorated with `stage_task(name)`: retries only on infrastructure errors, results
persisted and cached under `ArtifactInputs` (content hashes of input artifacts + the frozen
config). Its body starts with `finished(...)`: when the stage's manifest already records the same
input key, the task returns the recorded output without doing the work again.

What a stage did is said once, from its manifest (`tasks.runlog.announce`): one line per finished
or reused stage in the Prefect run log, so the UI shows the same facts the manifest records.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prefect import task

from tasks import store
from tasks.cache import ARTIFACT_INPUTS, input_key
from tasks.errors import retry_on_infra
from tasks.runlog import announce

RETRIES = 2
RETRY_DELAYS_S = [2, 10, 30]


def stage_task(name: str, **options: Any) -> Callable:
    """`@task` with the stage defaults (overridable per call with `.with_options`)."""
    defaults = dict(name=name, retries=RETRIES, retry_delay_seconds=RETRY_DELAYS_S,
                    retry_condition_fn=retry_on_infra, cache_policy=ARTIFACT_INPUTS,
                    persist_result=True)
    return task(**{**defaults, **options})


def iter_dir(run_dir: str, iteration: int) -> str:
    """`<run_dir>/iter_<k>`: where iteration k's artifacts live."""
    return store.join(run_dir, f"iter_{iteration}")


def artifact(run_dir: str, iteration: int, name: str) -> str:
    """The URL of artifact `name` (e.g. "rollouts.parquet") of iteration k."""
    return store.join(iter_dir(run_dir, iteration), name)


def finished(run_dir: str, iteration: int, stage: str, **inputs: Any) -> tuple[str, str | None]:
    """(input key, primary output URL if the stage already finished on these inputs, else None)."""
    key = input_key(stage, inputs)
    done = store.Stage(iter_dir(run_dir, iteration), stage, key).manifest()
    if done:
        announce(done, reused=True)
    return key, (done["outputs"]["main"]["url"] if done else None)

