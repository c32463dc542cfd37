"""The MLflow model registry of a training run: policies as transformers models, `models:/` URIs
resolved to local directories, and the champion that retraining moves.

- Every checkpoint (with tracking.log_checkpoints; the final policy alone with
  tracking.register_final) is saved with MLflow's transformers flavor (model and tokenizer, so
  `mlflow.transformers.load_model("models:/<name>@champion")` works) as an MLflow 3 logged model
  of the run (its step's metrics are linked to it) and becomes a version of
  `tracking.registered_model` with alias `candidate`; a new best pass@1 also takes `champion`.
  The flavor is saved from the loaded model, not from the checkpoint path: MLflow's
  checkpoint-path route fails on transformers 5's pipeline registry.
- A LoRA policy (`trainer.lora`: its checkpoint holds `adapter/`) is logged the way MLflow logs a
  PEFT model: the adapter (`peft/`) and a reference to its base, the base directory
  (`base_model_path`, which must then exist where the model is loaded) or its hub id; no merged
  weights. `mlflow.transformers.load_model` applies the adapter to the base.
- Retraining (`flows.retrain`) starts from `champion_uri` and moves champion only on
  `champion_decision`: the new policy's pass@1 must beat the champion's, both evaluated on the
  same instances and seeds, by tracking.champion_margin_sems of the champion's SEM.
- `resolve_model`: an engine.model of `models:/<name>@<alias>` or `models:/<name>/<version>` is
  downloaded once into `<run_root>/.models/registry/<name>/v<version>` and replaced by that local
  directory, so every command that takes a model takes a registered one. A PEFT model's merged
  weights are written there (with the adapter beside them, as in a trainer checkpoint), so the
  engines and the trainer load it as they load any checkpoint.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from swe_rlvr.config import Config, ConfigError
from tasks import store
from tasks.tracking_store import client, tracking_uri, use_store

MODELS = "models:/"
FLAVOR_TASK = "text-generation"


def register(cfg: Config, mlc: Any, run_id: str, run_dir: str, step: int, ckpt: str,
              pass1: float | None) -> dict:
    """Log policy `step`'s checkpoint as an MLflow 3 logged model of the run (transformers
    flavor; the run's "Logged models", where the step's metrics link to it) and register it:
    alias candidate, and champion if best. Returns its version, aliases and model_id."""
    tags = {"policy_version": str(step), "run_dir": run_dir}
    if pass1 is not None:
        tags["pass1"] = str(pass1)
    model = mlc.create_logged_model(mlc.get_run(run_id).info.experiment_id,
                                    name=f"policy_{step}", source_run_id=run_id, tags=tags,
                                    model_type="transformers")
    try:
        with tempfile.TemporaryDirectory(prefix="swe-rlvr-model-") as tmp:
            save_flavor(store.local_copy(ckpt), Path(tmp) / "model")
            mlc.log_model_artifacts(model.model_id, str(Path(tmp) / "model"))
    except BaseException:
        mlc.finalize_logged_model(model.model_id, "FAILED")
        raise
    mlc.finalize_logged_model(model.model_id, "READY")
    from mlflow.entities import LoggedModelOutput
    mlc.log_outputs(run_id, [LoggedModelOutput(model.model_id, step)])   # the run's "Logged models"
    name = cfg.tracking.registered_model
    from mlflow.exceptions import MlflowException
    try:
        mlc.create_registered_model(name)
    except MlflowException:
        pass  # already registered
    use_store(cfg)      # the registry resolves a models:/ source through the global URI
    version = mlc.create_model_version(name, f"models:/{model.model_id}", run_id=run_id,
                                       tags={**tags, "model_id": model.model_id},
                                       model_id=model.model_id).version
    mlc.set_registered_model_alias(name, "candidate", version)
    aliases = ["candidate"]
    if cfg.tracking.promote_best and pass1 is not None and pass1 > _champion_pass1(mlc, name):
        mlc.set_registered_model_alias(name, "champion", version)
        aliases.append("champion")
    return {"version": str(version), "aliases": aliases, "model_id": model.model_id}


def save_flavor(ckpt: str, dst: Path) -> None:
    """Save an HF checkpoint directory at `dst` as an MLflow transformers model (MLmodel,
    `model/`, `components/tokenizer/`), in the checkpoint's own dtype; a LoRA checkpoint as a
    PEFT model (`peft/` and its base's reference, fp32)."""
    import mlflow.transformers
    import torch
    import transformers
    model, base_path, extra = _flavor_model(ckpt)
    tokenizer = transformers.AutoTokenizer.from_pretrained(ckpt)
    mlflow.transformers.save_model(
        {"model": model, "tokenizer": tokenizer}, path=str(dst), task=FLAVOR_TASK,
        torch_dtype=model.dtype, base_model_path=base_path,
        pip_requirements=[f"torch=={torch.__version__}",          # no inference: it loads the
                          f"transformers=={transformers.__version__}", *extra])  # model again


def _flavor_model(ckpt: str) -> tuple[Any, str | None, list[str]]:
    """(the model to log, MLflow's base_model_path, extra pip requirements): the checkpoint's
    model, or for a LoRA checkpoint its adapter on its fp32 base, with the base directory (None
    for a hub id, which MLflow references by name)."""
    import torch
    import transformers

    from trainer.lora import adapter_of, base_pointer, with_adapter
    adapter = adapter_of(Path(ckpt))
    if adapter is None:
        return transformers.AutoModelForCausalLM.from_pretrained(ckpt, dtype="auto"), None, []
    import peft
    base = base_pointer(adapter)
    model = with_adapter(transformers.AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32),
                         adapter)
    return model, base if Path(base).is_dir() else None, [f"peft=={peft.__version__}"]


def _champion_pass1(mlc: Any, name: str) -> float:
    from mlflow.exceptions import MlflowException
    try:
        mv = mlc.get_model_version_by_alias(name, "champion")
    except MlflowException:
        return float("-inf")
    return float(mv.tags.get("pass1", "-inf"))


def resolve_model(cfg: Config) -> Config:
    """`cfg` with an engine.model of `models:/<name>@<alias>` or `models:/<name>/<version>`
    replaced by the registered version's local directory (downloaded once); else `cfg`."""
    model = cfg.engine.model
    if model is None or not model.startswith(MODELS):
        return cfg
    local = registered_model_dir(cfg, model)
    return dataclasses.replace(cfg, engine=dataclasses.replace(cfg.engine, model=local))


def model_version(cfg: Config, uri: str) -> Any:
    """The registry's ModelVersion that `models:/<name>@<alias>` or `models:/<name>/<version>`
    names; ConfigError with the fix when there is none."""
    from mlflow.exceptions import MlflowException
    ref = uri[len(MODELS):]
    name, at, alias = ref.partition("@")
    mlc = client(cfg)
    try:
        if at:
            return mlc.get_model_version_by_alias(name, alias)
        name, _, version = ref.rpartition("/")
        return mlc.get_model_version(name, version)
    except MlflowException as exc:
        raise ConfigError(
            f"engine.model {uri!r} names no model version in the MLflow registry at "
            f"{tracking_uri(cfg)} ({exc.message}); register a policy first (a training run with "
            f"tracking.log_checkpoints or tracking.register_final), or name one that exists: "
            f"models:/<name>@<alias> or models:/<name>/<version>.") from exc


def registered_model_dir(cfg: Config, uri: str) -> str:
    """The local HF model directory of the registered version `uri` names: downloaded once into
    `<run_root>/.models/registry/<name>/v<version>`, the tokenizer beside the weights."""
    mv = model_version(cfg, uri)
    dst = _model_cache(cfg) / mv.name / f"v{mv.version}"
    if not store.is_sealed(str(dst)):
        import mlflow.artifacts
        partial = Path(store.fresh_dir(f"{dst}.partial"))
        got = Path(mlflow.artifacts.download_artifacts(
            artifact_uri=client(cfg).get_model_version_download_uri(mv.name, mv.version),
            dst_path=str(partial), tracking_uri=tracking_uri(cfg)))
        _engine_layout(got)
        store.seal_dir(str(got), registered_model=mv.name, version=str(mv.version))
        store.publish_dir(str(got), str(dst))
        shutil.rmtree(partial, ignore_errors=True)
    return str(dst / "model") if (dst / "model" / "config.json").exists() else str(dst)


def _model_cache(cfg: Config) -> Path:
    root = store.local_dir(cfg.orchestration.run_root)
    return (root or Path(tempfile.gettempdir()) / "swe-rlvr") / ".models" / "registry"


def _engine_layout(model: Path) -> None:
    """Copy a transformers-flavor model's components (the tokenizer) beside its weights in
    `model/`, the one directory the engines and the trainer load (a plain checkpoint: as is). A
    PEFT model's weights are its adapter merged into its base, written there first, with the
    adapter in `model/adapter/` (`trainer.lora`'s checkpoint layout)."""
    if (model / "peft").is_dir() and not (model / "model" / "config.json").exists():
        from trainer.checkpoint import save_model
        from trainer.lora import ADAPTER_DIR, merged
        save_model(merged(model / "peft"), model / "model")
        shutil.copytree(model / "peft", model / "model" / ADAPTER_DIR)
    for component in sorted((model / "components").glob("*/")):
        for item in component.iterdir():
            if not (model / "model" / item.name).exists():
                shutil.copy2(item, model / "model" / item.name)


def champion_uri(cfg: Config) -> str:
    """`models:/<registered_model>@champion` when the registry has a champion, else ""."""
    from mlflow.exceptions import MlflowException
    name = cfg.tracking.registered_model
    try:
        client(cfg).get_model_version_by_alias(name, "champion")
    except MlflowException:
        return ""
    return f"{MODELS}{name}@champion"


def registered_version(run_dir: str, step: int) -> str:
    """The model version policy `step` of `run_dir` was registered as ("" when it was not)."""
    done = store.read_json(store.join(run_dir, "_tracking", f"step_{step}.json")) or {}
    return (done.get("registered") or {}).get("version", "")


def champion_decision(champion: dict[str, float], new: dict[str, float],
                      margin_sems: float) -> dict[str, Any]:
    """Promote when new pass@1 > champion pass@1 + margin_sems * champion SEM; both measured on
    the same instances and seeds. E.g. champion 0.50 ± 0.05, margin 1: new 0.56 promotes, 0.55
    does not."""
    threshold = champion["pass1"] + margin_sems * champion.get("pass1_sem", 0.0)
    return {"promoted": new["pass1"] > threshold, "threshold": threshold,
            "margin_sems": margin_sems, "champion_pass1": champion["pass1"],
            "champion_pass1_sem": champion.get("pass1_sem", 0.0), "new_pass1": new["pass1"],
            "new_pass1_sem": new.get("pass1_sem", 0.0)}


def record_decision(cfg: Config, run_id: str, version: str, decision: dict[str, Any]) -> None:
    """Move champion to `version` when promoted; log both scores and the decision to the run
    (metrics `retrain_*`, tag `swe_rlvr.retrain`) and to the version's tags."""
    from mlflow.entities import Metric
    mlc, name = client(cfg), cfg.tracking.registered_model
    if decision["promoted"]:
        mlc.set_registered_model_alias(name, "champion", version)
    now = int(time.time() * 1000)
    mlc.log_batch(run_id, metrics=[Metric(f"retrain_{k}", float(v), now, 0)
                                   for k, v in decision.items() if isinstance(v, (int, float))])
    mlc.set_tag(run_id, "swe_rlvr.retrain", "promoted" if decision["promoted"] else "kept")
    for key, value in decision.items() if version else ():
        mlc.set_model_version_tag(name, version, f"retrain_{key}", str(value))
