"""LoRA models for the tests that run with `trainer.lora` on: the trainer's own adapted model with
every B filled with small seeded values (a fresh adapter's B is zero, which would make any
equivalence of the adapters' forward trivially true), and the same adapters on a stock HF model."""

from __future__ import annotations

from pathlib import Path

import torch

from swe_rlvr.config import TrainerConfig
from swe_rlvr.config_training import LoraConfig

LORA = LoraConfig(r=4)
"""Rank 4 on every projection of the tiny model (trainer.lora's default targets)."""


def lora_trainer_config(**fields) -> TrainerConfig:
    return TrainerConfig(**{"device": "cpu", "lora": LORA, **fields})


def lora_model(model_dir: Path, grad_checkpointing: bool = False, seed: int = 0):
    """The trainer's model with adapters (`load_lora_model`), each B ~ 0.05 N(0, 1) from `seed`."""
    from trainer.engine_torch import load_lora_model
    cfg = lora_trainer_config(grad_checkpointing=grad_checkpointing, seed=seed)
    model, _ = load_lora_model(Path(model_dir), torch.device("cpu"), cfg)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(0.05 * torch.randn(p.shape, generator=gen))
    return model


def stock_with_adapters(model_dir: Path, adapted):
    """A stock-SDPA HF model of `model_dir` with peft adapters equal to `adapted`'s."""
    import peft
    from transformers import AutoModelForCausalLM

    from trainer.lora import peft_config
    ref = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32,
                                               attn_implementation="sdpa")
    ref = peft.get_peft_model(ref, peft_config(LORA)).get_base_model()
    src = dict(adapted.named_parameters())
    with torch.no_grad():
        for name, p in ref.named_parameters():
            if "lora_" in name:
                p.copy_(src[name])
    return ref


def grads(model) -> dict[str, torch.Tensor]:
    """name -> gradient of every parameter that has one (under LoRA: the adapters alone)."""
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
