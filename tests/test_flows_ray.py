"""The Ray task runner (`orchestration.task_runner: ray`) against a local Ray head on 127.0.0.1.

The head is started by this test (`ray start --head --block`) and stopped by its process id.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from process_support import free_port

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
    from prefect.settings import PREFECT_API_URL
    port = free_port()
    ray = Path(sys.executable).parent / "ray"
    env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value(), "RAY_USAGE_STATS_ENABLED": "0"}
    head = subprocess.Popen(
        [str(ray), "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={port}",
         "--num-cpus=2", "--include-dashboard=false", "--disable-usage-stats",
         f"--temp-dir={tmp_path_factory.mktemp('ray')}"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    address = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        assert head.poll() is None and time.monotonic() < deadline, "ray head did not start"
        time.sleep(0.5)
    yield address
    os.killpg(head.pid, signal.SIGTERM)
    try:
        head.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(head.pid, signal.SIGKILL)


def test_evaluation_runs_its_stages_on_ray_workers(ray_head, tmp_path, tiny_model_dir):
    from flows.iteration import evaluate_policy
    from flows.runners import task_runner
    from swe_rlvr.config import load_config
    from tasks import store
    cfg = load_config(None, [
        "orchestration.task_runner=ray", f"orchestration.ray_address={ray_head}",
        f"orchestration.run_root={tmp_path}", "instances.source=builtin",
        f"engine.model={tiny_model_dir}", "engine.name=scripted:gold", "agent.scaffold=bash",
        f"sandbox.workdir={tmp_path / 'work'}", f"sandbox.env_cache={tmp_path / 'envs'}",
        "eval.runs=1", "eval.k=1", "eval.limit=1"])
    runner = task_runner(cfg)
    assert type(runner).__name__ == "RayTaskRunner"
    url = evaluate_policy.with_options(task_runner=runner)(cfg, str(tmp_path / "run"), 0,
                                                           str(tiny_model_dir))
    rows = store.read_rows(url, "eval")
    assert len(rows) == 1 and rows[0]["resolved"]                 # the gold script resolves it
