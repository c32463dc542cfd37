"""Policies as MLflow models against a real `mlflow server` (what a team runs), not the SQLite
file of a one-person run: the run registers its final policy over HTTP, with the artifacts
proxied by the server, and then `mlflow.transformers.load_model("models:/...@champion")` and a
`models:/` engine.model resolve through that server."""

from __future__ import annotations

import shutil

import pytest

from process_support import start_mlflow_server, stop
from swe_rlvr.config import load_config
from tasks import registry, store, tracking

pytestmark = pytest.mark.e2e

NAME = "swe-rlvr-policy"


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    """`mlflow server` on 127.0.0.1: a SQLite backend, artifacts served by the server."""
    proc, url = start_mlflow_server(tmp_path_factory.mktemp("mlflow-server"))
    try:
        yield url
    finally:
        stop(proc)


def test_a_policy_registered_on_the_server_loads_by_alias(mlflow_server, tmp_path,
                                                          tiny_model_dir):
    import mlflow
    import mlflow.transformers
    base = [f"orchestration.run_root={tmp_path / 'runs'}", f"tracking.mlflow_uri={mlflow_server}",
            "tracking.log_checkpoints=false", "tracking.register_final=true", "eval.runs=2",
            "eval.k=1"]
    cfg = load_config(None, base)
    run_dir = store.join(str(tmp_path / "runs"), "run-a")
    rows = [{"instance_id": "i0", "run": r, "episode_id": f"i0/s{r}", "resolved": r == 0,
             "infra_failure": False, "termination": "submitted", "turns": 3, "format_errors": 0,
             "verifier_score": None} for r in range(2)]
    store.write_table(store.join(run_dir, "iter_0", "eval.parquet"), "eval", rows)
    ckpt = shutil.copytree(tiny_model_dir, tmp_path / "runs" / "run-a" / "iter_0" / "checkpoint")
    store.seal_dir(str(ckpt))
    run_id = tracking.open_run(cfg, run_dir)
    tracking.log_step(cfg, run_id, run_dir, 0, str(ckpt), final=True)

    champion = tracking.client(cfg).get_model_version_by_alias(NAME, "champion")
    assert champion.tags["pass1"] == "0.5" and champion.source.startswith(("models:/", "mlflow-artifacts:"))
    mlflow.set_tracking_uri(mlflow_server)
    mlflow.set_registry_uri(mlflow_server)
    try:
        parts = mlflow.transformers.load_model(f"models:/{NAME}@champion",
                                               return_type="components")
    finally:
        mlflow.set_tracking_uri(None)
        mlflow.set_registry_uri(None)
    assert parts["model"].config.model_type == "qwen2"
    resolved = registry.resolve_model(load_config(None, [*base, f"engine.model=models:/{NAME}@champion"]))
    from transformers import AutoModelForCausalLM
    assert AutoModelForCausalLM.from_pretrained(resolved.engine.model).config.model_type == "qwen2"
