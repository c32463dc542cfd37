"""Fan-out of rollout and validate over Ray shards (`tasks.shards`).

The split and merge rules are checked on plain lists. The stages run on a local two-node Ray
cluster on 127.0.0.1 (`tests/ray_cluster.py`) with the scripted gold policy over the tiny model:
both nodes run shards at the same time, the merged artifacts equal the single-process run's, and a
shard whose worker is killed mid-stage is rerun by Ray without losing or repeating an episode.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tasks.shards import merge, split


def test_split_keeps_order_and_covers_every_item_once():
    # 7 items in 3 shards: sizes 3, 2, 2 (the remainder goes to the first shards)
    assert split(list(range(7)), 3) == [[0, 1, 2], [3, 4], [5, 6]]
    assert split([1, 2], 5) == [[1], [2]]                          # never an empty shard
    assert split([], 3) == []


def test_merge_keeps_shard_order_and_the_first_row_of_an_episode():
    parts = [[{"episode_id": "a", "v": 1}, {"episode_id": "b", "v": 1}],
             [{"episode_id": "a", "v": 2}, {"episode_id": "c", "v": 2}]]
    assert merge(parts) == [{"episode_id": "a", "v": 1}, {"episode_id": "b", "v": 1},
                            {"episode_id": "c", "v": 2}]


# --------------------------------------------------------------------------- on a Ray cluster

INSTANCES = 4
GROUP = 2


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    pytest.importorskip("ray", reason="ray is not installed (pip install -e '.[ray]')")
    import ray

    from ray_cluster import ray_cluster, ray_env
    tmp = tmp_path_factory.mktemp("ray")
    with ray_cluster(tmp, nodes=2, cpus=1, env=ray_env(tmp / "home")) as address:
        yield address
        ray.shutdown()                            # this process's connection, before the cluster


@pytest.fixture(scope="module")
def baseline(tmp_path_factory, tiny_model_dir):
    """The single-process run: instances, rollouts and validations rows."""
    root = tmp_path_factory.mktemp("one-process")
    return _stages(_config(root, tiny_model_dir, "threads", ""), root)


def _config(root, model, runner: str, address: str):
    from swe_rlvr.config import load_config
    return load_config(None, [
        f"orchestration.task_runner={runner}", f"orchestration.ray_address={address}",
        "orchestration.shards=2", "orchestration.max_workers=2", f"orchestration.run_root={root}",
        "instances.source=builtin", f"instances.limit={INSTANCES}", f"engine.model={model}",
        "engine.name=scripted:gold", "engine.max_batch=1", "agent.scaffold=bash",
        f"algorithm.group_size={GROUP}", f"sandbox.workdir={root / 'work'}",
        f"sandbox.env_cache={root.parent / 'envs'}"])


def _stages(cfg, root) -> dict[str, list[dict]]:
    from tasks import store
    from tasks.instances import instances
    from tasks.rollout import rollout
    from tasks.validate import validate
    run, model = str(root / "run"), cfg.engine.model
    insts = instances.fn(run, 0, cfg, cfg.instances.train_split)
    rolls = rollout.fn(run, 0, insts, model, cfg)
    grades = validate.fn(run, 0, rolls, insts, cfg)
    return {"rollouts": store.read_rows(rolls, "rollouts"),
            "validations": store.read_rows(grades, "validations")}


STABLE = {"rollouts": ("episode_id", "instance_id", "iteration", "sample", "guided",
                       "policy_version", "turns", "format_errors", "termination", "patch", "error"),
          "validations": ("episode_id", "instance_id", "patch_applied", "apply_method",
                          "tests_status_json", "f2p_passed", "f2p_failed", "p2p_passed",
                          "p2p_failed", "resolution", "resolved", "tampered", "infra_failure")}
"""Columns that two runs of the same episodes agree on (tokens, messages and logs hold the test
runs' timings, which differ between any two runs)."""


def _assert_same(got: dict, want: dict) -> None:
    for name, keys in STABLE.items():
        ids = [r["episode_id"] for r in got[name]]
        assert len(ids) == len(set(ids)) == INSTANCES * GROUP, name       # each episode once
        assert [[r[k] for k in keys] for r in got[name]] == [[r[k] for k in keys]
                                                             for r in want[name]], name


def _connect(cfg) -> None:
    from flows.runners import connect_ray
    connect_ray(cfg)


@pytest.mark.ray
def test_shards_run_on_both_nodes_at_once_and_merge_as_one_process(
        cluster, baseline, tmp_path, tiny_model_dir, caplog):
    cfg = _config(tmp_path, tiny_model_dir, "ray", cluster)
    _connect(cfg)
    with caplog.at_level(logging.INFO, logger="tasks.shards"):
        got = _stages(cfg, tmp_path)
    _assert_same(got, baseline)
    # each record's args: (stage function, shard, node id, pid, start, end)
    runs = [r.args for r in caplog.records
            if r.name == "tasks.shards" and r.args[0] == "_sample_shard"]
    first, second = runs
    assert first[2] != second[2]                                  # two nodes ran the shards
    assert max(first[4], second[4]) < min(first[5], second[5])    # their intervals overlap


@pytest.mark.ray
def test_a_killed_shard_is_rerun_and_no_episode_is_lost_or_repeated(
        cluster, baseline, tmp_path, tiny_model_dir):
    cfg = _config(tmp_path, tiny_model_dir, "ray", cluster)
    _connect(cfg)
    killed: list[int] = []
    watcher = threading.Thread(target=_kill_one_shard_worker, args=(killed,), daemon=True)
    watcher.start()
    got = _stages(cfg, tmp_path)
    watcher.join(timeout=1)
    assert killed, "no rollout shard's worker was seen running"
    _assert_same(got, baseline)
    mounts = Path("/proc/self/mounts").read_text()
    assert str(tmp_path / "work") not in mounts      # the dead worker's working copies are gone
    assert not list((tmp_path / "work" / "copies").glob("wc-*"))


def _kill_one_shard_worker(killed: list[int], timeout: float = 300) -> None:
    """SIGKILL the first Ray worker seen running a rollout shard (its title names the task),
    two seconds into the shard."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ps = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True).stdout
        pids = [int(line.split()[0]) for line in ps.splitlines()
                if "ray::shard-_sample_shard" in line]
        if pids:
            time.sleep(2)
            os.kill(pids[0], signal.SIGKILL)
            killed.append(pids[0])
            return
        time.sleep(0.2)
