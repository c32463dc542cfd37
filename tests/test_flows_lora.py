"""A tiny-model training run with `trainer.lora` end to end: the RFT warm-up, one iteration whose
update is the SFT warm-up and DPO with adapters, evaluation and the registry, under a real
Prefect API and MLflow store. The scripted policy of tests/test_flows.py does the sampling, so
the update trains the tiny model on real guided pairs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tasks import store
from test_flows import overrides


@pytest.mark.e2e
def test_a_lora_training_run_completes_with_adapter_checkpoints(prefect_api, tmp_path,
                                                                tiny_model_dir):
    import mlflow.artifacts
    import yaml
    from mlflow.tracking import MlflowClient
    from transformers import AutoModelForCausalLM

    from flows import train
    result = train(None, overrides(tmp_path / "runs", tiny_model_dir, "lora") + [
        "orchestration.iterations=1", "orchestration.eval_base=false",
        "orchestration.eval_beside=false", "eval.runs=1", "eval.k=1", "trainer.lora.r=4",
        "trainer.rft_lr=1e-3", "trainer.lr=1e-3"])
    (ckpt,) = result.checkpoints
    assert store.is_sealed(ckpt)
    adapter = Path(ckpt) / "adapter"
    base = json.loads((adapter / "adapter_config.json").read_text())["base_model_name_or_path"]
    assert (Path(base) / "config.json").is_file() and (adapter / "adapter_model.safetensors").is_file()
    assert AutoModelForCausalLM.from_pretrained(ckpt).config.model_type == "qwen2"
    rows = store.read_rows(str(Path(result.run_dir) / "iter_0" / "train_metrics.parquet"),
                           "train_metrics")
    assert {r["phase"] for r in rows} == {"sft", "dpo"} and all(r["loss"] == r["loss"] for r in rows)

    mlc = MlflowClient(result.tracking_uri, registry_uri=result.tracking_uri)
    version = mlc.get_model_version_by_alias("swe-rlvr-policy", "candidate")
    assert version.tags["policy_version"] == "1"
    flavor_dir = Path(mlflow.artifacts.download_artifacts(
        artifact_uri=mlc.get_model_version_download_uri("swe-rlvr-policy", version.version),
        dst_path=str(tmp_path / "model"), tracking_uri=result.tracking_uri))
    flavor = yaml.safe_load((flavor_dir / "MLmodel").read_text())["flavors"]["transformers"]
    assert flavor["peft_adaptor"] == "peft" and flavor["local_base_model_path"] == base
