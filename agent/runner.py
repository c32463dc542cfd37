"""Rollouts: G episodes per instance, run concurrently, written to `rollouts.parquet`.

Episodes run in a thread pool (sandbox commands release the GIL); their generation calls meet in a
`Batcher`, which calls the engine once per batch. One episode's crash (sandbox start-up, the engine,
a bug) is caught at this boundary and recorded as that episode with termination `error` and the
error text; the others go on. With `out` set, the finished trajectories are written in `finally`,
so an interrupted run keeps what it finished. With `journal` set, each finished episode is appended
to it as it ends, and a rerun takes those episodes from it instead of sampling them again: a stage
of hours that a session's end stopped goes on where it stopped.
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from tqdm import tqdm

from agent.batcher import Batcher
from agent.engines.base import Engine
from agent.loop import Episode
from agent.trajectory import Trajectory
from swe_rlvr.artifacts import table
from swe_rlvr.config import AgentConfig, SandboxConfig
from swe_rlvr.instances import Instance


def run_rollouts(instances: list[Instance], engine: Engine, agent_cfg: AgentConfig,
                 sandbox_cfg: SandboxConfig, repo_store: str | Path, group_size: int, iteration: int,
                 guidance: dict[str, str] | None = None, workers: int = 4, seed: int = 0,
                 max_batch: int = 16, temperature: float = 1.0, out: str | Path | None = None,
                 progress: bool = True, label: str = "rollouts", max_wait_s: float = 0.02,
                 journal: str | Path | None = None) -> list[Trajectory]:
    """Run `group_size` episodes of each instance; trajectories come back in (instance, sample) order.

    `guidance` maps instance ids to hint text: those episodes are guided (agent.guidance).
    `max_batch` should be `EngineConfig.max_batch`; `temperature` `EngineConfig.temperature`;
    `label` names the progress bar (stages that run side by side each have their own);
    `max_wait_s` is the Batcher's longest wait for live episodes still busy in their sandboxes.
    `journal`: a JSONL file that each finished episode's row is appended to; episodes it already
    holds (from a run that was stopped) are taken from it and not run again (`read_journal`).
    """
    guidance = guidance or {}
    jobs = [(inst, s) for inst in instances for s in range(group_size)]
    kept = read_journal(journal, iteration) if journal is not None else {}
    if journal is not None:
        Path(journal).parent.mkdir(parents=True, exist_ok=True)
        if Path(journal).exists() and Path(journal).stat().st_size:
            with open(journal, "rb+") as fh:  # end the line a stop cut short: appends start afresh
                fh.seek(-1, 2)
                if fh.read(1) != b"\n":
                    fh.write(b"\n")
    done: list[Trajectory | None] = [kept.get((inst.instance_id, s)) for inst, s in jobs]
    bar = tqdm(total=len(jobs), initial=sum(t is not None for t in done), desc=f"{label} i{iteration}",
               disable=not progress)
    lock = threading.Lock()
    try:
        with Batcher(engine, max_batch, max_wait_s, seed=seed) as batcher, ThreadPoolExecutor(max(1, workers)) as pool:
            def one(k: int) -> None:
                inst, sample = jobs[k]
                traj = run_one(inst, batcher, agent_cfg, sandbox_cfg, repo_store,
                               guidance.get(inst.instance_id, ""), temperature)
                traj.iteration, traj.sample = iteration, sample
                done[k] = traj
                if journal is not None and traj.termination != "error":  # a crash runs again
                    with lock, open(journal, "a") as fh:
                        fh.write(json.dumps(traj.to_row()) + "\n")
                bar.update()
            list(pool.map(one, [k for k, t in enumerate(done) if t is None]))
    finally:
        bar.close()
        if out is not None:
            write_rollouts(out, [t for t in done if t is not None])
    return done  # type: ignore[return-value]


def read_journal(path: str | Path, iteration: int) -> dict[tuple[str, int], Trajectory]:
    """The episodes of iteration `iteration` that a journal holds, by (instance id, sample); a
    last line cut short by a stopped run is left out (that episode runs again)."""
    kept: dict[tuple[str, int], Trajectory] = {}
    if not Path(path).exists():
        return kept
    for line in Path(path).read_text().splitlines():
        try:
            traj = Trajectory.from_row(json.loads(line))
        except (ValueError, KeyError, TypeError):
            continue
        if traj.iteration == iteration:
            kept[(traj.instance_id, traj.sample)] = traj
    return kept


def run_one(instance: Instance, engine: Any, agent_cfg: AgentConfig, sandbox_cfg: SandboxConfig,
            repo_store: str | Path, guidance: str = "", temperature: float = 1.0) -> Trajectory:
    """One episode in a fresh sandbox; never raises (a crash becomes termination `error`)."""
    from sandbox import open_sandbox

    started, episode = time.monotonic(), None
    try:
        with _live(engine), open_sandbox(instance, sandbox_cfg, repo_store) as box:
            episode = Episode(instance, box, engine, agent_cfg, guidance, temperature)
            return episode.run()
    except Exception as exc:  # the runner's boundary: record the crash as this episode's outcome
        traj = episode.traj if episode else Trajectory(instance.instance_id, guided=bool(guidance),
                                                        policy_version=engine.policy_version)
        traj.termination, traj.error = "error", f"{type(exc).__name__}: {exc}"
        traj.wall_s = time.monotonic() - started
        return traj


def _live(engine: Any) -> AbstractContextManager:
    """Tell a Batcher that one more episode may call it (any other engine needs nothing)."""
    return engine.episode() if isinstance(engine, Batcher) else nullcontext()


def write_rollouts(path: str | Path, trajectories: list[Trajectory]) -> Path:
    """Write ROLLOUTS rows (each trajectory's own iteration and sample) to a Parquet file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table("rollouts", [t.to_row() for t in trajectories]), path)
    return path
