"""`swe-rlvr serve` and `swe-rlvr deploy` keep their KEY=VALUE overrides: a real `prefect server`
holds them in both deployments' parameters, so a run trains on the config the command's preflight
checked.

Regression: the overrides were checked, then dropped (`overrides: []` in every deployment). The
server and the serving process are started by this test on 127.0.0.1 and stopped by their process
ids.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from process_support import stop
from test_flows_deploy import _wait, server  # noqa: F401 - the real `prefect server` fixture

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[1]


def _config(tmp_path, model) -> str:
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump({
        "instances": {"source": "builtin", "limit": 1},
        "engine": {"name": "scripted", "model": str(model), "max_batch": 1},
        "sandbox": {"workdir": str(tmp_path / "work"), "env_cache": str(tmp_path / "envs")},
        "orchestration": {"run_root": str(tmp_path / "runs"), "iterations": 0,
                          "rft_warmup": False, "work_pool": "swe-rlvr-test"}}))
    return str(path)


def _parameters(api: str) -> dict[str, dict]:
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings
    with temporary_settings({PREFECT_API_URL: api}), get_client(sync_client=True) as client:
        return {d.name: d.parameters for d in client.read_deployments()}


def test_serve_and_deploy_store_their_overrides_in_both_deployments(server, tmp_path,  # noqa: F811
                                                                     tiny_model_dir):
    from flows.deployments import ON_DEMAND, SCHEDULED
    api, env = server
    env = {**env, "PREFECT_API_URL": api}
    config = _config(tmp_path, tiny_model_dir)
    served = ["eval.limit=1", "orchestration.run_name=served"]
    serve = subprocess.Popen([sys.executable, "-m", "swe_rlvr.cli", "serve", "--config", config,
                              *served], env=env, cwd=ROOT, start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait(lambda: len(_parameters(api)) == 2, "swe-rlvr serve", serve)
    finally:
        stop(serve)
    assert _parameters(api) == {name: {"config": config, "overrides": served}
                                for name in (ON_DEMAND, SCHEDULED)}

    deployed = ["eval.limit=1", "orchestration.run_name=deployed"]
    result = subprocess.run([sys.executable, "-m", "swe_rlvr.cli", "deploy", "--config", config,
                             *deployed], env=env, cwd=ROOT, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert _parameters(api) == {name: {"config": config, "overrides": deployed}
                                for name in (ON_DEMAND, SCHEDULED)}
