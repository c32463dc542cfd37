"""Policies as MLflow models: a registered checkpoint loads with `mlflow.transformers.load_model`
from `models:/<name>@champion`, and every command that takes engine.model takes a `models:/` URI
(downloaded once into the run root's model cache, checked by the preflight)."""

from __future__ import annotations

import shutil

import pytest

from swe_rlvr.config import ConfigError, load_config
from tasks import registry, store, tracking

NAME = "swe-rlvr-policy"


@pytest.fixture(scope="module")
def registered(tmp_path_factory, tiny_model_dir):
    """The tiny model trained nowhere, registered as policy 0 of a run with pass@1 0.5."""
    root = tmp_path_factory.mktemp("runs")
    base = [f"orchestration.run_root={root}", "tracking.log_checkpoints=false",
            "tracking.register_final=true", "eval.runs=2", "eval.k=1"]
    cfg = load_config(None, base)
    run_dir = store.join(str(root), "run-a")
    rows = [{"instance_id": "i0", "run": r, "episode_id": f"i0/s{r}", "resolved": r == 0,
             "infra_failure": False, "termination": "submitted", "turns": 3, "format_errors": 0,
             "verifier_score": None} for r in range(2)]
    store.write_table(store.join(run_dir, "iter_0", "eval.parquet"), "eval", rows)
    ckpt = shutil.copytree(tiny_model_dir, root / "run-a" / "iter_0" / "checkpoint")
    store.seal_dir(str(ckpt))
    run_id = tracking.open_run(cfg, run_dir)
    tracking.log_step(cfg, run_id, run_dir, 0, str(ckpt), final=True)
    return cfg, base, run_id


@pytest.fixture
def mlflow_uris(registered):
    import mlflow
    uri = tracking.tracking_uri(registered[0])
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    yield uri
    mlflow.set_tracking_uri(None)
    mlflow.set_registry_uri(None)


def test_the_final_policy_is_registered_as_a_transformers_model_that_loads(registered,
                                                                            mlflow_uris):
    import mlflow.transformers
    champion = tracking.client(registered[0]).get_model_version_by_alias(NAME, "champion")
    assert champion.tags["pass1"] == "0.5" and champion.tags["policy_version"] == "0"
    parts = mlflow.transformers.load_model(f"models:/{NAME}@champion", return_type="components")
    assert parts["model"].config.model_type == "qwen2"
    assert parts["tokenizer"]("def f(): pass")["input_ids"]


def test_models_uri_resolves_to_one_local_directory_with_weights_and_tokenizer(registered):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    cfg, base, _ = registered
    by_alias, by_version = (registry.resolve_model(load_config(None, [*base, f"engine.model={u}"]))
                            for u in (f"models:/{NAME}@champion", f"models:/{NAME}/1"))
    local = by_alias.engine.model
    assert local == by_version.engine.model and store.is_sealed(local.rsplit("/", 1)[0])
    assert "/.models/registry/swe-rlvr-policy/v1/" in local + "/"
    AutoTokenizer.from_pretrained(local)
    assert AutoModelForCausalLM.from_pretrained(local).config.model_type == "qwen2"
    assert registry.resolve_model(cfg) is cfg                  # a plain directory stays as it is


def test_preflight_checks_the_registry_and_names_the_fix(registered):
    from flows.preflight import PreflightError, preflight
    _, base, _ = registered
    preflight(load_config(None, base + [f"engine.model=models:/{NAME}@champion"]),
              check_prefect=False)
    with pytest.raises(PreflightError, match="register a policy first"):
        preflight(load_config(None, base + [f"engine.model=models:/{NAME}@nobody"]),
                  check_prefect=False)
    with pytest.raises(ConfigError, match="models:/<name>/<version>"):
        registry.resolve_model(load_config(None, base + [f"engine.model=models:/{NAME}/9"]))


def test_the_experiment_opens_as_model_training(registered):
    cfg = registered[0]
    exp = tracking.client(cfg).get_experiment_by_name(cfg.tracking.experiment)
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"


def test_the_flows_resolve_the_registered_model_before_their_preflight(registered):
    from flows.training import _config
    _, base, _ = registered
    cfg = _config(None, base + [f"engine.model=models:/{NAME}@champion"], trains=False)
    assert cfg.engine.model.endswith("/.models/registry/swe-rlvr-policy/v1/model")


@pytest.mark.slow
def test_evaluate_takes_a_registered_model(registered, tmp_path):
    """The evaluate command with engine.model=models:/...@champion (the scripted gold policy
    reads the registered model's tokenizer) evaluates the downloaded copy (a Prefect API start:
    a minute on a busy 2-core machine)."""
    from flows import evaluate
    _, base, _ = registered
    result = evaluate(None, base + [
        f"engine.model=models:/{NAME}@champion", "engine.name=scripted:gold",
        "orchestration.run_name=eval-registered", "orchestration.max_workers=1",
        "instances.source=builtin", "eval.limit=1", "eval.runs=1", "eval.k=1",
        "agent.scaffold=bash", "agent.max_turns=8", "agent.context_tokens=8192",
        f"sandbox.workdir={tmp_path / 'work'}", f"sandbox.env_cache={tmp_path / 'envs'}"])
    assert result.policy_dir.endswith("/.models/registry/swe-rlvr-policy/v1/model")
    assert result.pass1 == 1.0
