"""LoRA through `peft`: low-rank adapters on a frozen base, and checkpoints every engine loads.

With `trainer.lora.r` > 0 the torch engine loads the base in fp32, injects peft's LoRA layers into
the linear layers named by `trainer.lora.targets` (`attach`) and trains only them: the base gets
no gradients, and AdamW holds state for the adapters alone. Where the trainer runs under bf16
autocast (`swe_rlvr.precision.autocast_enabled`), the frozen linear layers of the decoder are
stored in bf16 (`frozen_linears_to_bf16`). Autocast casts them to bf16 for every matmul anyway,
so the log-probs are bit for bit those of an autocast forward over fp32 weights, at half the
bytes. Embeddings, the LM head and the norms stay fp32, and so does the residual stream, as in
full fine-tuning.

The base is the model an adapter is defined on (`source`). A fresh adapter's base is the policy
the update starts from. A policy that already holds an adapter of the same rank, alpha and
targets has it continued on that adapter's own base, so the warm-ups and every RL iteration
train one adapter on one base. A fresh adapter is initialised from `trainer.seed` (peft: A
Kaiming-uniform, B zero, so its first forward is the base's, as TRL's GRPOTrainer starts).

A checkpoint (`save_weights`) holds:
- `adapter/`: peft's `adapter_config.json`, whose `base_model_name_or_path` points to the base
  (an absolute directory, or a hub id), and `adapter_model.safetensors` (fp32);
- at its top level, the merged model (`merged`: the base's own fp32 weights plus B A alpha / r,
  peft's `merge_and_unload`) in the HF format that the engines (hf, vllm, an OpenAI-compatible
  server) load unchanged. The adapter sits in a sub-directory, so transformers never takes the
  checkpoint for an adapter to apply.

Left out: the DeepSpeed engine (refused with LoRA), adapters on embeddings or the LM head,
QLoRA's quantised base, DoRA and rsLoRA.
"""

from __future__ import annotations

import contextlib
import json
import warnings
from pathlib import Path

import torch

from swe_rlvr.config_training import LoraConfig
from trainer.checkpoint import save_model

ADAPTER_DIR = "adapter"
"""The adapter's sub-directory of a checkpoint."""
ADAPTER_CONFIG = "adapter_config.json"


def adapter_of(model_dir: Path) -> Path | None:
    """The adapter directory that the checkpoint `model_dir` holds, or None."""
    found = Path(model_dir) / ADAPTER_DIR
    return found if (found / ADAPTER_CONFIG).is_file() else None


def base_pointer(adapter: Path) -> str:
    """The base an adapter is defined on (peft's `base_model_name_or_path`)."""
    return json.loads((Path(adapter) / ADAPTER_CONFIG).read_text())["base_model_name_or_path"]


def pointer(model_dir: Path | str) -> str:
    """How a checkpoint points to `model_dir` as its base: its absolute path where it is a local
    directory, else the name as given (a hub id)."""
    path = Path(model_dir)
    return str(path.resolve()) if path.is_dir() else str(model_dir)


def continues(adapter: Path, cfg: LoraConfig) -> bool:
    """Does the saved `adapter` have the rank, alpha and targets of `cfg` (its dropout is
    cfg's either way)?"""
    saved = json.loads((Path(adapter) / ADAPTER_CONFIG).read_text())
    return (saved["r"] == cfg.r and saved["lora_alpha"] == cfg.alpha
            and sorted(saved["target_modules"]) == sorted(cfg.targets))


def source(model_dir: Path, cfg: LoraConfig) -> tuple[str, Path | None]:
    """(the base to load, the adapter to continue or None for a fresh one) of an update that
    starts from the policy in `model_dir`."""
    adapter = adapter_of(model_dir)
    if adapter is None or not continues(adapter, cfg):
        return pointer(model_dir), None
    base = base_pointer(adapter)
    if Path(base).is_absolute() and not (Path(base) / "config.json").is_file():
        raise FileNotFoundError(
            f"The adapter in {adapter} is defined on the base model {base}, which is gone. Put the "
            f"base back there, or train a fresh adapter on the merged weights: remove {adapter}.")
    return base, adapter


def peft_config(cfg: LoraConfig):
    """`trainer.lora` as peft's LoraConfig."""
    import peft
    return peft.LoraConfig(r=cfg.r, lora_alpha=cfg.alpha, lora_dropout=cfg.dropout,
                           target_modules=list(cfg.targets), task_type="CAUSAL_LM")


def check_targets(model, targets: tuple[str, ...]) -> None:
    """Refuse a target that names no linear layer of the model's decoder layers (peft refuses
    only when no target matches anywhere), listing the names there are."""
    names = {n.rsplit(".", 1)[-1] for n, m in model.base_model.layers.named_modules()
             if isinstance(m, torch.nn.Linear)}
    missing = sorted(set(targets) - names)
    if missing or not targets:
        raise ValueError(f"trainer.lora.targets names {missing or 'no layer'}, which this model's "
                         f"decoder layers have no linear layer of; choose among: "
                         f"{', '.join(sorted(names))}.")


def attach(model, cfg: LoraConfig, base: str, adapter: Path | None, *, seed: int,
           bf16_base: bool):
    """Inject LoRA layers into `model` in place (continuing `adapter`, or fresh from `seed`),
    freeze everything else, and return the peft wrapper that saves the adapter. The caller's RNG
    is left as it was."""
    import peft
    check_targets(model, cfg.targets)
    config = peft_config(cfg)
    if adapter is None:
        with torch.random.fork_rng(devices=[]), _quiet():     # peft draws A on the CPU
            torch.manual_seed(seed)
            wrapped = peft.get_peft_model(model, config)
    else:
        wrapped = with_adapter(model, adapter, config=config, trainable=True)
    wrapped.peft_config["default"].base_model_name_or_path = base
    if bf16_base:
        frozen_linears_to_bf16(model)
    return wrapped


def with_adapter(model, adapter: Path, *, config=None, trainable: bool = False):
    """`model` with the saved `adapter` applied (peft's PeftModel.from_pretrained)."""
    import peft
    with _quiet():
        return peft.PeftModel.from_pretrained(model, adapter, config=config, is_trainable=trainable)


@contextlib.contextmanager
def _quiet():
    """Without the FutureWarning peft's wrapping sets off in transformers 5 (a renamed property)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", ".*is_gradient_checkpointing", FutureWarning)
        yield


def frozen_linears_to_bf16(model) -> None:
    """Store the frozen linear layers of every decoder layer in bf16 (autocast casts them so for
    each matmul anyway); adapters, norms, embeddings and the LM head keep fp32."""
    for layer in model.base_model.layers:
        for module in layer.modules():
            if isinstance(module, torch.nn.Linear) and not module.weight.requires_grad:
                module.to(torch.bfloat16)


def trainable(model) -> list[torch.nn.Parameter]:
    """The parameters that train: the adapters under LoRA, else every one."""
    return [p for p in model.parameters() if p.requires_grad]


def merged(adapter: Path):
    """The adapter merged into its base on the CPU: the base's fp32 weights plus B A alpha / r
    (peft's merge_and_unload), a plain HF model."""
    from transformers import AutoModelForCausalLM
    base = AutoModelForCausalLM.from_pretrained(base_pointer(adapter), dtype=torch.float32)
    return with_adapter(base, adapter).merge_and_unload()


def save_weights(wrapped, dst: Path) -> None:
    """The adapter and its base pointer in `dst/adapter`, the merged model in `dst`."""
    wrapped.save_pretrained(Path(dst) / ADAPTER_DIR)
    save_model(merged(Path(dst) / ADAPTER_DIR), Path(dst))
