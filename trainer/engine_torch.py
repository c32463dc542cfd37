"""Plain-torch engine: one process, CPU or one GPU.

fp32 master weights; on GPU the forward runs under bf16 autocast. AdamW over all parameters
(Nebius: weight decay 0.1; torch's fused kernel where the device has one), a linear warm-up then
cosine or constant LR, gradient-norm clipping, optional gradient checkpointing, and optional
compiled decoder layers (`trainer.compile`). Gradient accumulation is the caller's: call `backward` once per
packed micro-batch (losses already normalised by the step's token count), then `step` once.
"""

from __future__ import annotations

import contextlib
import math
import os
from pathlib import Path

import torch

from swe_rlvr.config import TrainerConfig
from trainer.checkpoint import load_train_state, save_checkpoint
from trainer.forward import compile_layers, packed_logprobs, use_segment_attention
from trainer.packing import PackedBatch


def set_threads(cfg: TrainerConfig, device: torch.device) -> None:
    """The trainer's CPU threads (trainer.torch_threads, 0: every core this process may use)."""
    if device.type == "cpu":
        torch.set_num_threads(cfg.torch_threads or len(os.sched_getaffinity(0)))


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("trainer.device is 'cuda' but torch sees no GPU; use 'auto' or 'cpu'.")
    return torch.device(name)


def compile_enabled(setting: bool | str, device: torch.device) -> bool:
    """trainer.compile: true, false, or auto (true on CUDA only)."""
    if isinstance(setting, bool):
        return setting
    if setting == "auto":
        return device.type == "cuda"
    raise ValueError(f"trainer.compile must be true, false or auto, got {setting!r}.")


def make_optimizer(params, lr: float, weight_decay: float, device: torch.device):
    """AdamW, with torch's fused kernel on CUDA and CPU (one kernel per step, not one per tensor)."""
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay,
                             fused=device.type in ("cuda", "cpu"))


def load_model(model_dir: Path, device: torch.device, grad_checkpointing: bool,
               compile: bool = False):
    """HF causal LM in fp32 with segment attention, in train mode (decoder layers compiled)."""
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(device)
    use_segment_attention(model)
    model.config.use_cache = False
    if grad_checkpointing:
        if hasattr(model, "activation_checkpointing_enable"):       # transformers >= 5.2x
            model.activation_checkpointing_enable({"use_reentrant": False})
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if compile:
        compile_layers(model)
    return model.train()


def lr_lambda(schedule: str, warmup: int, total: int):
    """Multiplier of the base LR at scheduler step s: linear warm-up, then cosine or constant."""
    if schedule not in ("cosine", "constant"):
        raise ValueError(f"Unknown trainer.schedule {schedule!r}; choose one of: cosine, constant.")

    def factor(s: int) -> float:
        if s < warmup:
            return (s + 1) / (warmup + 1)
        if schedule == "constant":
            return 1.0
        progress = (s - warmup) / max(1, total - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
    return factor


class TorchEngine:
    """Model + optimiser + scheduler on one device."""

    def __init__(self, model_dir: Path, cfg: TrainerConfig, *, lr: float, total_steps: int,
                 schedule: str = "constant") -> None:
        self.cfg = cfg
        self.device = pick_device(cfg.device)
        set_threads(cfg, self.device)
        self.model = load_model(Path(model_dir), self.device, cfg.grad_checkpointing,
                                compile_enabled(cfg.compile, self.device))
        self.optimizer = make_optimizer(self.model.parameters(), lr, cfg.weight_decay, self.device)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lr_lambda(schedule, cfg.warmup_steps, total_steps))

    def autocast(self):
        if self.device.type == "cuda":
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def shard(self, n: int) -> range:
        """Indices of a step's n packed rows that this process runs (all of them)."""
        return range(n)

    def logprobs(self, batch: PackedBatch) -> tuple[torch.Tensor, torch.Tensor]:
        with self.autocast():
            return packed_logprobs(self.model, batch)

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def step(self) -> float:
        """Clip, step optimiser and scheduler, zero grads; returns the pre-clip grad norm."""
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.grad_clip)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(norm)

    def lr(self) -> float:
        return float(self.scheduler.get_last_lr()[0])

    def save(self, dst: Path, *, tokenizer_src: Path, train_state: dict | None) -> Path:
        state = None
        if train_state is not None:
            state = {**train_state, "optimizer": self.optimizer.state_dict(),
                     "scheduler": self.scheduler.state_dict()}
        return save_checkpoint(dst, self.model, tokenizer_src=tokenizer_src, train_state=state)

    def load_state(self, ckpt: Path) -> dict:
        """Load optimiser and scheduler state saved with the weights in `ckpt`; returns the rest."""
        state = load_train_state(ckpt)
        self.optimizer.load_state_dict(state.pop("optimizer"))
        self.scheduler.load_state_dict(state.pop("scheduler"))
        return state
