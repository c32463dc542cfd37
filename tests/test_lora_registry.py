"""A LoRA policy in the MLflow registry: logged the way MLflow logs a PEFT model (the adapter and
a reference to its base directory, no merged weights), loaded by `mlflow.transformers` as a
PeftModel, and resolved from `models:/` to a directory the engines and the trainer load: the
merged weights (equal to the trainer's) with the adapter beside them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from swe_rlvr.config import load_config
from tasks import registry, store, tracking
from trainer.episodes import Episode

NAME = "swe-rlvr-policy"


@pytest.fixture(scope="module")
def registered(tmp_path_factory, tiny_model_dir):
    """An RFT update of the tiny model with LoRA, registered as policy 0 of a run."""
    from trainer.loops import run_rft
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("runs")
    base = [f"orchestration.run_root={root}", "tracking.log_checkpoints=false",
            "tracking.register_final=true", "eval.runs=1", "eval.k=1"]
    cfg = load_config(None, base + ["trainer.device=cpu", "trainer.lora.r=4", "trainer.rft_lr=1e-2",
                                    "trainer.pack_tokens=256"])
    ep = Episode(tuple(range(40, 56)) + (300, 301, 302), (0,) * 16 + (1,) * 3, (0.0,) * 19,
                 resolved=True)
    trained = run_rft(tiny_model_dir, [ep] * 4, cfg, tmp_path_factory.mktemp("update")).checkpoint
    run_dir = store.join(str(root), "run-lora")
    rows = [{"instance_id": "i0", "run": 0, "episode_id": "i0/s0", "resolved": True,
             "infra_failure": False, "termination": "submitted", "turns": 3, "format_errors": 0,
             "verifier_score": None}]
    store.write_table(store.join(run_dir, "iter_0", "eval.parquet"), "eval", rows)
    ckpt = shutil.copytree(trained, root / "run-lora" / "iter_0" / "checkpoint")
    store.seal_dir(str(ckpt))
    run_id = tracking.open_run(cfg, run_dir)
    tracking.log_step(cfg, run_id, run_dir, 0, str(ckpt), final=True)
    return cfg, base, ckpt


def test_the_lora_policy_is_logged_as_a_peft_model_on_its_base(registered, tiny_model_dir):
    import mlflow.artifacts
    import mlflow.transformers
    import yaml
    cfg, _, _ = registered
    uri = tracking.tracking_uri(cfg)
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    try:
        got = mlflow.artifacts.download_artifacts(f"models:/{NAME}@champion")
        flavor = yaml.safe_load(open(f"{got}/MLmodel"))["flavors"]["transformers"]
        parts = mlflow.transformers.load_model(f"models:/{NAME}@champion",
                                               return_type="components")
    finally:
        mlflow.set_tracking_uri(None)
        mlflow.set_registry_uri(None)
    assert flavor["peft_adaptor"] == "peft"
    assert flavor["local_base_model_path"] == str(tiny_model_dir.resolve())
    assert not (Path(got) / "model").exists()                       # no merged weights logged
    assert type(parts["model"]).__name__ == "PeftModelForCausalLM"


def test_models_uri_resolves_to_the_merged_weights_with_the_adapter_beside(registered,
                                                                            tiny_model_dir):
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM
    _, base, ckpt = registered
    local = registry.resolve_model(load_config(None, [*base, f"engine.model=models:/{NAME}@champion"])
                                   ).engine.model
    assert local.endswith("/.models/registry/swe-rlvr-policy/v1/model")
    ours, theirs = load_file(f"{local}/model.safetensors"), load_file(ckpt / "model.safetensors")
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    pointer = json.loads(open(f"{local}/adapter/adapter_config.json").read())
    assert pointer["base_model_name_or_path"] == str(tiny_model_dir.resolve())
    assert AutoModelForCausalLM.from_pretrained(local).config.model_type == "qwen2"
