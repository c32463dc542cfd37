"""The `rollout` task: the policy of iteration k attempts each instance G times.

It serves three places in the DAG, told apart by `out`: the unguided rollout (`rollouts`), the
guided re-attempt of failed instances (`rollouts_guided`, with `guidance_path`), and evaluation
(`eval_rollouts`, G = eval.runs samples per instance, each one an independent run).

The output is all-or-nothing: the artifact is written once, when every episode has finished, so no
episode is lost or duplicated. A stage stopped midway (a session's end, a crash) goes on where it
stopped: on a local run directory each shard appends its finished episodes to a journal beside the
artifact (`.<out>-<input key>.shard<k>.jsonl`, keyed by the stage's inputs, removed once the
artifact is written), and the rerun takes them from it (`agent.runner.run_rollouts`). Rerun
episodes equal the first attempt's when the runner's sampling is reproducible (one worker and
`engine.max_batch: 1` make it so; see `agent.batcher`); a resumed stage's remaining episodes are
sampled afresh, so it equals an uninterrupted one in distribution, not token for token. With the Ray
runner the instances are split into shards, one Ray task each (`tasks.shards`), and shard k
samples from the stage's seed + k * SHARD_SEED_STRIDE, so shard 0 alone is the one-process run.
The episodes' policy version is the iteration (step) whose policy sampled them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from swe_rlvr.config import Config
from swe_rlvr.instances import Instance
from tasks import store
from tasks.stage import artifact, finished, iter_dir, stage_task

SEED_OFFSETS = {"rollouts": 0, "rollouts_guided": 1_000_003, "eval_rollouts": 2_000_003}
"""Distinct sampling streams per use, so an eval run never replays a training episode."""


def repo_store(cfg: Config) -> str:
    """Where instance repositories are cached (instances.repo_store, else under the run root)."""
    return cfg.instances.repo_store or store.join(cfg.orchestration.run_root, ".cache", "repos")


def read_instances(url: str) -> list[Instance]:
    return [Instance.from_row(r) for r in store.read_rows(url, "instances")]


def read_guidance(url: str | None) -> dict[str, str] | None:
    return {r["instance_id"]: r["text"] for r in store.read_rows(url, "guidance")} if url else None


@stage_task("rollout")
def rollout(run_dir: str, iteration: int, instances_path: str, policy_dir: str, cfg: Config,
            out: str = "rollouts", guidance_path: str | None = None, group_size: int = 0) -> str:
    """Sample `group_size` (default algorithm.group_size) episodes per instance; ROLLOUTS rows."""
    group_size = group_size or cfg.algorithm.group_size
    key, done = finished(run_dir, iteration, out, instances_path=instances_path,
                         policy_dir=policy_dir, guidance_path=guidance_path, group_size=group_size,
                         engine=cfg.engine, agent=cfg.agent, sandbox=cfg.sandbox)
    if done:
        return done
    instances = read_instances(instances_path)
    guidance = read_guidance(guidance_path)
    if guidance is not None:
        instances = [i for i in instances if i.instance_id in guidance]
    url = artifact(run_dir, iteration, f"{out}.parquet")
    folder = store.local_dir(iter_dir(run_dir, iteration))
    journal = str(folder / f".{out}-{key[:16]}") if folder is not None else None
    with store.stage(iter_dir(run_dir, iteration), out, key) as st:
        rows = _sample(instances, policy_dir, cfg, group_size, iteration, guidance,
                       SEED_OFFSETS.get(out, 0), out, journal) if instances else []
        st.output("main", url, store.write_table(url, "rollouts", rows), rows=len(rows))
    for path in folder.glob(f".{out}-{key[:16]}.shard*.jsonl") if folder is not None else ():
        path.unlink()
    return url


def journal_path(journal: str | None, shard: int) -> str | None:
    """Shard `shard`'s journal of finished episodes (`agent.runner.run_rollouts`), or None."""
    return f"{journal}.shard{shard}.jsonl" if journal else None


@contextmanager
def policy_engine(cfg: Config, policy_dir: str, instances: list[Instance]) -> Iterator[Any]:
    """The engine that samples policy `policy_dir`, for the duration of the block.

    `engine.name` is one of `agent.engines.ENGINES`, held in this process (`agent.engines.held`:
    the evaluation and the rollouts of one policy that run side by side share one engine), or
    `scripted[:variant]`: the package's scripted policy (`agent.scripted`, variants gold, weak,
    cheat, format_error) replaying known actions with `policy_dir`'s tokenizer, which drives the
    real loop, sandbox and grading end to end in tests and demos. (Its replies do not depend on
    the weights, so training changes nothing it says.)
    """
    name, _, variant = cfg.engine.name.partition(":")
    if name == "scripted":
        from transformers import AutoTokenizer

        from agent.scripted import ScriptedPolicy
        yield ScriptedPolicy(AutoTokenizer.from_pretrained(policy_dir), instances,
                             variant=variant or "gold", scaffold=cfg.agent.scaffold)
        return
    from agent.engines.held import held
    with held(dataclasses.replace(cfg.engine, model=policy_dir)) as engine:
        yield engine


def _sample(instances: list[Instance], policy_dir: str, cfg: Config, group_size: int,
            iteration: int, guidance: dict[str, str] | None, seed_offset: int,
            label: str, journal: str | None = None) -> list[dict]:
    """The episodes' rows in (instance, sample) order, from one Ray task per shard of the
    instances when the Ray runner is on (`tasks.shards`), else from this process."""
    from tasks.shards import map_shards, shard_count
    if cfg.engine.name == "openai":              # a server of the user's: onto this policy first
        from agent.engines.openai import serve_policy
        serve_policy(cfg.engine, policy_dir)
    elif shard_count(cfg, len(instances)) > 1:   # the shards share one inference server
        from agent.engines.served import shared_engine
        cfg = dataclasses.replace(cfg, engine=shared_engine(cfg.engine, policy_dir))
    return map_shards(_sample_shard, instances, cfg, policy_dir, group_size, iteration, guidance,
                      seed_offset, label, journal)


SHARD_SEED_STRIDE = 7_919
"""Seed step between shards, so shards draw distinct streams (shard 0 keeps the stage's seed)."""


def _sample_shard(shard: int, instances: list[Instance], cfg: Config, policy_dir: str,
                  group_size: int, iteration: int, guidance: dict[str, str] | None,
                  seed_offset: int, label: str, journal: str | None = None) -> list[dict]:
    from agent.runner import run_rollouts
    seed = cfg.engine.seed + seed_offset + SHARD_SEED_STRIDE * shard
    with policy_engine(cfg, policy_dir, instances) as engine:
        trajectories = run_rollouts(instances, engine, cfg.agent, cfg.sandbox, repo_store(cfg),
                                    group_size, iteration, guidance=guidance,
                                    workers=cfg.orchestration.max_workers, seed=seed,
                                    max_batch=cfg.engine.max_batch,
                                    temperature=cfg.engine.temperature, progress=True,
                                    label=label, journal=journal_path(journal, shard))
    return [t.to_row(policy_version=iteration) for t in trajectories]
