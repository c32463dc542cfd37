"""Scheduled retraining against a real `prefect server`: the server's scheduler creates the cron
deployment's upcoming runs, and one of them, moved to now, runs to completion in `swe-rlvr serve`.

Regression: with SQLAlchemy 2.1 every loop of Prefect 3.8's scheduler died with "InvalidRequestError:
Can't evaluate bulk DML statement", so a cron deployment never got a run (hence the `sqlalchemy<2.1`
pin). The run is an evaluation-only training (no iterations) of the scripted policy on the tiny
model, to keep the test short. The server and the serving process are started by this test on
127.0.0.1 and stopped by their process ids.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime

import pytest
import yaml

from process_support import stop
from test_flows_deploy import _wait, server  # noqa: F401 - the real `prefect server` fixture

pytestmark = pytest.mark.e2e

CRON = "0 3 * * 0"
MIN_RUNS = 3  # Prefect's scheduler keeps at least this many runs ahead (scheduler.min_runs)


def _config(tmp_path, model) -> str:
    path = tmp_path / "retrain.yaml"
    path.write_text(yaml.safe_dump({
        "instances": {"source": "builtin", "limit": 1},
        "engine": {"name": "scripted", "model": str(model), "max_batch": 1},
        "agent": {"scaffold": "bash", "max_turns": 8},
        "sandbox": {"workdir": str(tmp_path / "work"), "env_cache": str(tmp_path / "envs")},
        "eval": {"runs": 1, "k": 1, "limit": 1},
        "orchestration": {"run_root": str(tmp_path / "runs"), "run_name": "scheduled",
                          "iterations": 0, "rft_warmup": False, "max_workers": 1,
                          "schedule": CRON}}))
    return str(path)


def _scheduled_runs(client, name: str) -> list:
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterName
    return client.read_flow_runs(
        deployment_filter=DeploymentFilter(name=DeploymentFilterName(any_=[name])))


def test_the_cron_deployment_gets_upcoming_runs_and_one_completes(server, tmp_path,  # noqa: F811
                                                                   tiny_model_dir):
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from prefect.states import Scheduled

    from flows.deployments import SCHEDULED

    api, env = server
    serve = subprocess.Popen([sys.executable, "-m", "swe_rlvr.cli", "serve", "--config",
                              _config(tmp_path, tiny_model_dir)],
                             env={**env, "PREFECT_API_URL": api, "PREFECT_RUNNER_POLL_FREQUENCY": "1"},
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
    try:
        with temporary_settings({PREFECT_API_URL: api}), get_client(sync_client=True) as client:
            _wait(lambda: len(_scheduled_runs(client, SCHEDULED)) >= MIN_RUNS,
                  "the scheduler's runs of the cron deployment", serve, timeout=120)
            runs = _scheduled_runs(client, SCHEDULED)
            assert all(r.state.is_scheduled() and r.expected_start_time > datetime.now(UTC)
                       for r in runs), [(r.state, r.expected_start_time) for r in runs]
            first = min(runs, key=lambda r: r.expected_start_time)
            client.set_flow_run_state(first.id, Scheduled(scheduled_time=datetime.now(UTC)),
                                      force=True)
            _wait(lambda: client.read_flow_run(first.id).state.is_final(),
                  "the scheduled run, moved to now", serve, timeout=300)
            state = client.read_flow_run(first.id).state
        assert state.is_completed(), state
    finally:
        stop(serve)
    assert (tmp_path / "runs" / "scheduled" / "iter_0").is_dir()
