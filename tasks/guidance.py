"""The `guidance` task: hints for the instances the policy failed (Agent-RLVR).

Which instances get guidance (`guidance.trigger`), from which failure, and what the hint says
(`guidance.source`: rules or a teacher model) are the `agent.recovery` and
`agent.guidance_sources` libraries' business; this task reads the iteration's artifacts, asks them,
and writes GUIDANCE rows. The guided re-attempt is the `rollout` task again, with this file.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

from swe_rlvr.artifacts import outcomes
from swe_rlvr.config import Config
from swe_rlvr.instances import Instance
from tasks import store
from tasks.rollout import read_instances, repo_store
from tasks.stage import artifact, finished, iter_dir, stage_task


@stage_task("guidance")
def guidance(run_dir: str, iteration: int, validations_path: str, rollouts_path: str,
             instances_path: str, cfg: Config) -> str:
    """Write `iter_<k>/guidance.parquet` (empty when guidance is off); returns its URL."""
    key, done = finished(run_dir, iteration, "guidance", validations_path=validations_path,
                         rollouts_path=rollouts_path, instances_path=instances_path,
                         guidance=cfg.guidance)
    if done:
        return done
    rollouts = store.read_rows(rollouts_path, "rollouts")
    validations = store.read_rows(validations_path, "validations")
    instances = {i.instance_id: i for i in read_instances(instances_path)}
    url = artifact(run_dir, iteration, "guidance.parquet")
    with store.stage(iter_dir(run_dir, iteration), "guidance", key) as st:
        rows = _hints(rollouts, validations, instances, cfg) if cfg.guidance.enabled else []
        st.output("main", url, store.write_table(url, "guidance", rows), rows=len(rows))
    return url


def _hints(rollouts: list[dict], validations: list[dict], instances: dict, cfg: Config
           ) -> list[dict]:
    from agent.recovery import make_source, select_failed, write_guidance
    failures = select_failed(outcomes(rollouts, validations), cfg.guidance.trigger)
    source = make_source(cfg.guidance, BaseFiles(repo_store(cfg)))
    return [g.to_row() for g in write_guidance(instances, failures, source)]


@dataclass(frozen=True)
class BaseFiles:
    """`read_base` for the guidance sources: a file's text at the instance's base commit."""

    repo_store: str

    def __call__(self, instance: Instance, path: str) -> str:
        from sandbox.repos import ensure_repo
        repo = ensure_repo(instance, self.repo_store)
        proc = subprocess.run(["git", "-C", str(repo), "show", f"{instance.base_commit}:{path}"],
                              capture_output=True, text=True)
        return proc.stdout if proc.returncode == 0 else ""
