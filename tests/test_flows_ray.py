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
def prefect_api():
    from prefect.testing.utilities import prefect_test_harness
    with prefect_test_harness(server_startup_timeout=120):
        yield


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
