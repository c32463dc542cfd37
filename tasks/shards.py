"""Fan-out of the episode stages (rollout, validate) over Ray: one Ray task per shard.

With the Ray task runner on (`orchestration.task_runner: ray`) and Ray initialised in the process
that runs the stage, `map_shards` splits the stage's items (instances, or episodes to grade) into
contiguous shards and runs each as a Ray task with `orchestration.shard_cpus` CPUs. The rows come
back in shard order, so concatenating them gives the order of one in-process run, and
`merge` drops a repeated `episode_id` so that no episode can appear twice.

A shard's rows reach the stage only when the whole shard has finished. A shard whose worker dies
is rerun by Ray (`orchestration.shard_retries`) from the start, and the dead attempt's rows are
never seen, so no episode is lost or duplicated; the stage still writes its artifact once, after
every shard has returned (all-or-nothing). A dead worker cannot take down the working copies it
had mounted, so after the shards the stage sweeps the copies whose owner died
(`sandbox.workspace.sweep`) on the stage's node. Simplifications: a retried shard reruns all of
its episodes, including those its dead attempt had finished; a dead worker's copies on another
node wait for `swe-rlvr sandbox sweep` there.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from swe_rlvr.config import Config

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ShardRun:
    """Where and when one shard ran (logged by the stage)."""
    index: int
    node_id: str
    pid: int
    start: float
    end: float


def split(items: Sequence[Any], n: int) -> list[list[Any]]:
    """`items` in `n` contiguous, near-equal, non-empty chunks (fewer when items are fewer)."""
    if not items:
        return []
    n = max(1, min(n, len(items)))
    size, extra = divmod(len(items), n)
    bounds = [k * size + min(k, extra) for k in range(n + 1)]   # [n+1] chunk starts
    return [list(items[a:b]) for a, b in zip(bounds, bounds[1:])]


def merge(parts: list[list[dict]], key: str = "episode_id") -> list[dict]:
    """The shards' rows in shard order, each `key` kept once (its first row)."""
    rows: dict[str, dict] = {}
    for part in parts:
        for row in part:
            rows.setdefault(row[key], row)
    return list(rows.values())


def shard_count(cfg: Config, n_items: int) -> int:
    """How many shards `n_items` items are run in (1: in this process, no Ray)."""
    o = cfg.orchestration
    if o.task_runner != "ray" or n_items < 2 or o.shards == 1:
        return 1
    import ray
    if not ray.is_initialized():
        return 1
    n = o.shards or int(ray.cluster_resources().get("CPU", 1) // o.shard_cpus)
    return max(1, min(n, n_items))


def map_shards(fn: Callable[..., list[dict]], items: Sequence[Any], cfg: Config,
               *args: Any) -> list[dict]:
    """`fn(shard_index, chunk, cfg, *args)` over the shards of `items`, rows merged in order."""
    n = shard_count(cfg, len(items))
    if n == 1:
        return merge([fn(0, list(items), cfg, *args)])
    import ray
    remote = ray.remote(_timed).options(num_cpus=cfg.orchestration.shard_cpus,
                                        max_retries=cfg.orchestration.shard_retries,
                                        retry_exceptions=False, name=f"shard-{fn.__name__}")
    refs = [remote.remote(fn, k, chunk, cfg, *args) for k, chunk in enumerate(split(items, n))]
    results = ray.get(refs)
    for _, run in results:
        log.info("%s shard %d: node %s pid %d, %.2f-%.2f", fn.__name__, run.index, run.node_id,
                 run.pid, run.start, run.end)
    _sweep_dead_copies(cfg)
    return merge([rows for rows, _ in results])


def _sweep_dead_copies(cfg: Config) -> None:
    """Unmount and remove the working copies that a killed shard worker left on this node."""
    from sandbox.workspace import sandbox_root, sweep
    removed = sweep(sandbox_root(cfg.sandbox.workdir), dead_owner_only=True)
    if removed:
        log.warning("removed %d working copies of dead shard workers: %s", len(removed),
                    ", ".join(removed))


def _timed(fn: Callable[..., list[dict]], k: int, chunk: list[Any], cfg: Config,
           *args: Any) -> tuple[list[dict], ShardRun]:
    """Run one shard on a Ray worker; its rows and where and when it ran."""
    import ray
    start = time.time()
    rows = fn(k, chunk, cfg, *args)
    node = ray.get_runtime_context().get_node_id()
    return rows, ShardRun(k, node, os.getpid(), start, time.time())
