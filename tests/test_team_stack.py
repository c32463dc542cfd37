"""The team stack of infra/docker-compose.yml, end to end on this machine's Docker engine.

`infra/team/build.sh` builds the stack's image from the project's debootstrap base (no registry),
`docker compose up` starts PostgreSQL, the Prefect server, the MLflow server and the worker, the
`setup` service builds the tiny model on the runs volume and registers the deployments, and then
the on-demand deployment is triggered through the Prefect server's API, as the UI does. The test
waits for the flow run to complete, then reads from the MLflow server the run it logged (the
Prefect tags, per-step metrics) and the policy it registered, and checks in the Prefect summary
artifact that the run's link opens in a browser on this host.

Skips, with the reason, where no Docker engine answers or no compose CLI is installed (Debian:
`apt-get install docker-compose`; the v2 plugin, `docker compose`, is used when present).
Cold, the image build takes several minutes (debootstrap, wheels); later builds reuse its layers.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import urllib.parse
from pathlib import Path

import pytest

from docker_engine import engine_problem
from process_support import free_port, http_json, wait_http

pytestmark = [pytest.mark.e2e, pytest.mark.docker]

ROOT = Path(__file__).resolve().parents[1]
COMPOSE_FILE = ROOT / "infra" / "docker-compose.yml"
RUN_NAME = "team-stack"
TINY_RUN = " ".join([
    f"orchestration.run_name={RUN_NAME}", "orchestration.iterations=1",
    "orchestration.expert_warmup=false", "orchestration.rft_warmup=false",
    "orchestration.eval_base=false", "instances.limit=2", "engine.name=scripted:gold",
    "algorithm.group_size=2", "guidance.attempts=1", "eval.limit=2", "eval.runs=1", "eval.k=1",
    "agent.max_new_tokens=1024",                 # the gold script's edits are one long command
    "trainer.compile=false", "trainer.pack_tokens=4096", "tracking.register_final=true",
    "tracking.registered_model=team-stack-policy"])


def compose_cli() -> list[str] | None:
    """`docker compose` (the v2 plugin) when it answers, else Debian's `docker-compose` (v1)."""
    if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    return [shutil.which("docker-compose")] if shutil.which("docker-compose") else None


class Stack:
    def __init__(self, cli: list[str], project: str, env: dict[str, str], prefect: str,
                 mlflow: str):
        self.cli, self.project, self.env = cli, project, env
        self.prefect, self.mlflow = prefect, mlflow

    def run(self, *args: str, timeout: float, extra_env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess:
        """`<compose> -p <project> -f infra/docker-compose.yml <args>`, output captured."""
        return subprocess.run([*self.cli, "-p", self.project, "-f", str(COMPOSE_FILE), *args],
                              env={**self.env, **(extra_env or {})}, cwd=ROOT, text=True,
                              capture_output=True, timeout=timeout)

    def compose(self, *args: str, timeout: float = 600, check: bool = True,
                extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        done = self.run(*args, timeout=timeout, extra_env=extra_env)
        if check and done.returncode != 0:
            raise AssertionError(f"compose {' '.join(args)} failed ({done.returncode}):\n"
                                 f"{(done.stdout + done.stderr)[-4000:]}\n{self.logs()}")
        return done

    def logs(self, tail: int = 60) -> str:
        done = self.run("logs", "--no-color", "--tail", str(tail), timeout=120)
        return (done.stdout + done.stderr)[-12000:]


@pytest.fixture(scope="module")
def stack():
    _, problem = engine_problem()
    if problem:
        pytest.skip(f"no Docker engine for the team stack: {problem}; run infra/docker/engine.sh")
    cli = compose_cli()
    if cli is None:
        pytest.skip("no compose CLI: apt-get install docker-compose (or the docker compose plugin)")
    built = subprocess.run(["bash", "infra/team/build.sh"], cwd=ROOT, text=True,
                           capture_output=True, timeout=3600)
    assert built.returncode == 0, f"infra/team/build.sh failed:\n{(built.stdout + built.stderr)[-4000:]}"
    print(built.stdout[-2000:])
    prefect_port, mlflow_port = free_port(), free_port()
    env = {**os.environ, "SWE_RLVR_PREFECT_PORT": str(prefect_port),
           "SWE_RLVR_MLFLOW_PORT": str(mlflow_port)}
    env.pop("PREFECT_API_URL", None)
    s = Stack(cli, f"swe-rlvr-test-{os.getpid()}", env, f"http://127.0.0.1:{prefect_port}",
              f"http://127.0.0.1:{mlflow_port}")
    try:
        s.compose("up", "-d", timeout=900)
        wait_http(f"{s.prefect}/api/health", timeout=300)
        wait_http(f"{s.mlflow}/health", timeout=300)
        yield s
    finally:
        s.compose("down", "-v", "--remove-orphans", "-t", "20", timeout=300, check=False)


def test_a_deployment_triggered_through_the_server_runs_on_the_worker_and_logs_to_mlflow(stack):
    setup = stack.compose("run", "--rm", "setup", timeout=900, extra_env={
        "SWE_RLVR_MODEL": "tiny", "SWE_RLVR_OVERRIDES": TINY_RUN})
    print(setup.stdout[-2000:])

    deployment = http_json(f"{stack.prefect}/api/deployments/name/train/train-on-demand")
    assert f"orchestration.run_name={RUN_NAME}" in deployment["parameters"]["overrides"]
    assert "sandbox.backend=docker" in deployment["parameters"]["overrides"]
    flow_run = http_json(f"{stack.prefect}/api/deployments/{deployment['id']}/create_flow_run", {})
    deadline = time.monotonic() + 1800
    while True:
        state = http_json(f"{stack.prefect}/api/flow_runs/{flow_run['id']}")["state"]
        if state["type"] in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED"):
            break
        assert time.monotonic() < deadline, f"flow run still {state['type']}:\n{stack.logs()}"
        time.sleep(5)
    assert state["type"] == "COMPLETED", f"{state}\n{stack.logs(200)}"
    flow = http_json(f"{stack.prefect}/api/flow_runs/{flow_run['id']}")
    assert flow["name"] == RUN_NAME                         # named after the run, not at random

    experiments = http_json(f"{stack.mlflow}/api/2.0/mlflow/experiments/search",
                            {"max_results": 100})["experiments"]
    runs = http_json(f"{stack.mlflow}/api/2.0/mlflow/runs/search", {
        "experiment_ids": [e["experiment_id"] for e in experiments],
        "filter": f"tags.`prefect.flow_run_id` = '{flow_run['id']}'"})["runs"]
    assert len(runs) == 1
    data = runs[0]["data"]
    params = {p["key"]: p["value"] for p in data["params"]}
    assert params["sandbox.backend"] == "docker"           # episodes ran in sandbox containers
    metrics = {m["key"]: m["value"] for m in data["metrics"]}
    assert metrics["train_resolve_rate"] > 0 and "pass1" in metrics, sorted(metrics)
    tags = {t["key"]: t["value"] for t in data["tags"]}
    assert len(tags.get("mlflow.source.git.commit", "")) == 40   # recorded by the image build

    alias = urllib.parse.urlencode({"name": "team-stack-policy", "alias": "champion"})
    version = http_json(f"{stack.mlflow}/api/2.0/mlflow/registered-models/alias?{alias}")
    assert version["model_version"]["run_id"] == runs[0]["info"]["run_id"]

    artifacts = http_json(f"{stack.prefect}/api/artifacts/filter",
                          {"artifacts": {"flow_run_id": {"any_": [flow_run["id"]]}}})
    summary = next(a for a in artifacts if (a.get("key") or "").endswith("-summary"))
    assert f"{stack.mlflow}/#/experiments/" in summary["data"]     # a link this host can open
