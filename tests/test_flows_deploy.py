"""Deployments against a real Prefect server: `swe-rlvr serve` serves the on-demand training
deployment, a run started through the API completes and logs to MLflow.

The server (`prefect server start` on 127.0.0.1, a free port, its own SQLite database) and the
serving process are started by this test and stopped by their process ids.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from process_support import free_port, stop

pytestmark = pytest.mark.slow


def _wait(check, what: str, proc: subprocess.Popen, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert proc.poll() is None, f"{what}: the process exited ({proc.returncode})"
        assert time.monotonic() < deadline, f"{what}: not ready after {timeout}s"
        time.sleep(1)


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


@pytest.fixture
def server(tmp_path):
    port = free_port()
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect-home")}
    env.pop("PREFECT_API_URL", None)
    proc = subprocess.Popen([str(Path(sys.executable).parent / "prefect"), "server", "start",
                             "--host", "127.0.0.1", "--port", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    api = f"http://127.0.0.1:{port}/api"
    try:
        _wait(lambda: _healthy(f"{api}/health"), "prefect server", proc)
        yield api, env
    finally:
        stop(proc)


def test_a_deployment_run_started_through_the_api_completes_and_logs(server, tmp_path,
                                                                      tiny_model_dir):
    from mlflow.tracking import MlflowClient
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, temporary_settings

    api, env = server
    config = tmp_path / "train.yaml"
    config.write_text(yaml.safe_dump({
        "instances": {"source": "builtin", "limit": 1},
        "engine": {"name": "scripted:weak", "model": str(tiny_model_dir), "max_batch": 1},
        "agent": {"scaffold": "bash", "max_turns": 8},
        "sandbox": {"workdir": str(tmp_path / "work"), "env_cache": str(tmp_path / "envs")},
        "reward": {"l_thr": 6, "t_max": 8},
        "algorithm": {"name": "dpo", "group_size": 1},
        "guidance": {"attempts": 1},
        "trainer": {"sft_batch_size": 1, "dpo_batch_pairs": 1, "pack_tokens": 8192},
        "eval": {"runs": 1, "k": 1, "limit": 1},
        "orchestration": {"run_root": str(tmp_path / "runs"), "run_name": "served",
                          "iterations": 1, "rft_warmup": False, "max_workers": 1}}))
    serve = subprocess.Popen([sys.executable, "-m", "swe_rlvr.cli", "serve", "--config",
                              str(config)], env={**env, "PREFECT_API_URL": api},
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
    try:
        with temporary_settings({PREFECT_API_URL: api}):
            from prefect.client.orchestration import get_client

            def served() -> bool:
                with get_client(sync_client=True) as client:
                    return len(client.read_deployments()) == 2
            _wait(served, "swe-rlvr serve", serve)
            run = run_deployment("train/train-on-demand", timeout=900)
        assert run.state.is_completed(), run.state
    finally:
        stop(serve)
    uri = f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}"
    mlc = MlflowClient(uri)
    [mlflow_run] = mlc.search_runs([mlc.get_experiment_by_name("swe-rlvr").experiment_id])
    assert mlflow_run.info.run_name == "served" and mlflow_run.info.status == "FINISHED"
    assert sorted(m.step for m in mlc.get_metric_history(mlflow_run.info.run_id, "pass1")) == [0, 1]
