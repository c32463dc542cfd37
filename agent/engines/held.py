"""The process's in-process engines: one per engine configuration, shared by the stages that
hold it at the same time.

With `orchestration.eval_beside` the evaluation of policy k runs beside the rollouts of
iteration k, and both sample policy k. With one engine between them, their turns meet in one
continuously batched decode step instead of two engines taking turns: a decode step reads all the
weights whatever its rows, so rows per step are the throughput. It also keeps one copy of
the weights and one KV budget (`engine.max_batch`, `engine.prefix_cache_gb`) in memory, which is
what the memory preflight estimates. The engine is dropped when its last holder lets go, so the
update that follows gets the memory back.

    with held(dataclasses.replace(cfg.engine, model=policy_dir)) as engine:
        ...
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from agent.engines import make_engine

_lock = threading.Lock()
_held: dict[Any, list] = {}
"""EngineConfig -> [engine, holders]."""


@contextmanager
def held(cfg: Any) -> Iterator[Any]:
    """The process's engine on `cfg` (an EngineConfig), built by the first holder and dropped by
    the last."""
    with _lock:                                   # a second holder waits for the first's load
        entry = _held.get(cfg)
        if entry is None:
            entry = _held[cfg] = [make_engine(cfg), 0]
        entry[1] += 1
    try:
        yield entry[0]
    finally:
        with _lock:
            entry[1] -= 1
            if entry[1] == 0 and _held.get(cfg) is entry:
                del _held[cfg]


def holders(cfg: Any) -> int:
    """How many stages hold the engine on `cfg` now (0: none is loaded)."""
    with _lock:
        entry = _held.get(cfg)
        return entry[1] if entry else 0
