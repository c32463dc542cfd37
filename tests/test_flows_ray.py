"""The Ray task runner (`orchestration.task_runner: ray`) against a local Ray cluster on 127.0.0.1.

The cluster is started by this test in its own temp dir and session (`tests/ray_cluster.py`) and
stopped by its process id. Its nodes see a stale `~/.ray/auth_token`, as on a machine where an
earlier run used Ray: the explicit auth mode keeps the test passing there as on a fresh machine.
"""

from __future__ import annotations

import pytest

from ray_cluster import ray_cluster, ray_env

pytest.importorskip("ray", reason="ray is not installed (pip install -e '.[ray]')")
pytest.importorskip("prefect_ray", reason="prefect-ray is not installed (pip install -e '.[ray]')")

pytestmark = pytest.mark.ray



@pytest.fixture(scope="module")
def ray_head(prefect_api, tmp_path_factory):
    import ray
    from prefect.settings import PREFECT_API_URL
    tmp = tmp_path_factory.mktemp("ray")
    env = {**ray_env(tmp / "home"), "PREFECT_API_URL": PREFECT_API_URL.value()}
    with ray_cluster(tmp, nodes=1, cpus=2, env=env) as address:
        yield address
        ray.shutdown()                            # this process's connection, before the cluster


def test_evaluation_runs_its_stages_on_ray_workers(ray_head, tmp_path, tiny_model_dir,
                                                   monkeypatch):
    """A used machine: this process's HOME holds a stale Ray token too."""
    import ray

    from flows.iteration import evaluate_policy
    from flows.runners import task_runner
    from swe_rlvr.config import load_config
    from tasks import store
    ray_env(tmp_path / "home")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    cfg = load_config(None, [
        "orchestration.task_runner=ray", f"orchestration.ray_address={ray_head}",
        f"orchestration.run_root={tmp_path}", "instances.source=builtin",
        f"engine.model={tiny_model_dir}", "engine.name=scripted:gold", "agent.scaffold=bash",
        f"sandbox.workdir={tmp_path / 'work'}", f"sandbox.env_cache={tmp_path / 'envs'}",
        "eval.runs=1", "eval.k=1", "eval.limit=1"])
    runner = task_runner(cfg)
    assert type(runner).__name__ == "RayTaskRunner"
    assert {n["NodeManagerAddress"] for n in ray.nodes()} == {"127.0.0.1"}      # loopback only
    url = evaluate_policy.with_options(task_runner=runner)(cfg, str(tmp_path / "run"), 0,
                                                           str(tiny_model_dir))
    rows = store.read_rows(url, "eval")
    assert len(rows) == 1 and rows[0]["resolved"]                 # the gold script resolves it


@pytest.fixture(scope="module")
def gpu_head(prefect_api, tmp_path_factory):
    """A one-node cluster that declares 2 GPUs (Ray only counts them)."""
    import ray
    from prefect.settings import PREFECT_API_URL
    tmp = tmp_path_factory.mktemp("ray-gpu")
    env = {**ray_env(tmp / "home"), "PREFECT_API_URL": PREFECT_API_URL.value()}
    with ray_cluster(tmp, nodes=1, cpus=2, gpus=2, env=env) as address:
        yield address
        ray.shutdown()


def test_the_update_asks_ray_for_the_trainers_gpus(gpu_head, tmp_path):
    """`stages(cfg).update.submit` runs where Ray grants `trainer.num_gpus` GPUs on a cluster
    with GPUs; with trainer.device=cpu it asks for none; more than a node has is refused."""
    import ray
    from prefect import flow, task

    from flows.runners import WithRayResources, stages, task_runner, update_resources
    from swe_rlvr.config import ConfigError, load_config

    ray.shutdown()      # a connection to another test's cluster; the runner joins this one

    @task
    def granted() -> dict:
        return ray.get_runtime_context().get_assigned_resources()

    def cfg(*extra):
        return load_config(None, ["orchestration.task_runner=ray",
                                  f"orchestration.ray_address={gpu_head}",
                                  f"orchestration.run_root={tmp_path}", *extra])

    @flow
    def probe(c) -> tuple[dict, dict]:
        """What the flow's update stage asks for, and what Ray grants a task asking the same."""
        update = stages(c, str(tmp_path / "run")).update
        resources = update.resources if isinstance(update, WithRayResources) else {}
        asked = WithRayResources(granted, resources) if resources else granted
        return resources, asked.submit().result()

    on_gpus = cfg("trainer.num_gpus=2")
    asked, got = probe.with_options(task_runner=task_runner(on_gpus))(on_gpus)
    assert asked == {"num_gpus": 2} and got.get("GPU") == 2.0
    on_cpu = cfg("trainer.device=cpu")
    asked, got = probe.with_options(task_runner=task_runner(on_cpu))(on_cpu)
    assert asked == {} and "GPU" not in got
    with pytest.raises(ConfigError, match=r"trainer.num_gpus is 4.*largest node has 2 GPUs"):
        update_resources(cfg("trainer.num_gpus=4"))
