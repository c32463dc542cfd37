"""The `validate` task: grade every episode's patch with the hidden tests (VALIDATIONS rows).

An infrastructure failure of one grading is recorded in its row (`infra_failure`), never raised:
the reward stage treats it as no sample. Only a failure of the whole stage (e.g. the sandbox
backend is down) raises, and then an `InfraError` is retried by Prefect.
"""

from __future__ import annotations

from swe_rlvr.config import Config
from tasks import store
from tasks.rollout import read_instances, repo_store
from tasks.stage import artifact, finished, iter_dir, stage_task

OUTPUTS = {"rollouts": "validations", "rollouts_guided": "validations_guided",
           "eval_rollouts": "eval_validations"}
"""Which validations file grades which rollouts file."""


@stage_task("validate")
def validate(run_dir: str, iteration: int, rollouts_path: str, instances_path: str,
             cfg: Config) -> str:
    """Grade the episodes of `rollouts_path`; returns the validations file's URL."""
    out = OUTPUTS[rollouts_path.rsplit("/", 1)[-1].removesuffix(".parquet")]
    key, done = finished(run_dir, iteration, out, rollouts_path=rollouts_path,
                         instances_path=instances_path, sandbox=cfg.sandbox)
    if done:
        return done
    episodes = store.read_rows(rollouts_path, "rollouts")
    instances = {i.instance_id: i for i in read_instances(instances_path)}
    url = artifact(run_dir, iteration, f"{out}.parquet")
    with store.stage(iter_dir(run_dir, iteration), out, key) as st:
        rows = _grade(episodes, instances, cfg) if episodes else []
        st.output("main", url, store.write_table(url, "validations", rows), rows=len(rows))
    return url


def _grade(episodes: list[dict], instances: dict, cfg: Config) -> list[dict]:
    """Reports in the episodes' order, from one Ray task per shard of the episodes when the Ray
    runner is on (`tasks.shards`), else from this process."""
    from tasks.shards import map_shards
    items = [(e["instance_id"], e["patch"], e["episode_id"]) for e in episodes]
    return map_shards(_grade_shard, items, cfg, instances)


def _grade_shard(shard: int, items: list[tuple[str, str, str]], cfg: Config,
                 instances: dict) -> list[dict]:
    from sandbox.grading import grade_many
    jobs = [(instances[iid], patch, episode) for iid, patch, episode in items]
    reports = grade_many(jobs, cfg.sandbox, repo_store(cfg), cfg.orchestration.max_workers,
                         progress=True)
    return [r.to_row() for r in reports]
