"""Plain-torch engine: CPU or GPU, one process or several under `torchrun` (data parallel).

fp32 master weights; the forward runs under bf16 autocast where the device multiplies bf16
natively (`trainer.autocast`: auto; bf16 forces it, fp32 never).
AdamW over the trainable parameters (Nebius: weight decay 0.1; torch's fused kernel where the
device has one), a linear warm-up then cosine or constant LR, gradient-norm clipping, optional
gradient checkpointing, and optional compiled decoder layers (`trainer.compile`). With
`trainer.lora` the trainable parameters are LoRA adapters on a frozen base (module
`trainer.lora`): the base has no gradients and no AdamW state, and a checkpoint holds the adapter
beside the merged model. Gradient accumulation is the caller's: call `backward` once per packed
micro-batch (losses already normalised by the step's global counts), then `step` once.

Data parallel (`trainer.launch` starts `torchrun`, which sets RANK/WORLD_SIZE): every rank holds
the whole model and optimiser, runs the rows `shard` gives it, and `step` *sums* the gradients
over the ranks (one all-reduce per flat bucket) before clipping. Because every micro-batch loss is
already divided by the whole step's count, that sum is the one-process gradient, up to fp32
summation order; the ranks then take identical optimiser steps. Rank 0 writes checkpoints. Not
DDP: its reducer fires inside backward, and a rank may hold fewer packed rows than another.
"""

from __future__ import annotations

import contextlib
import math
import os
from pathlib import Path

import torch

from swe_rlvr import precision, spans
from swe_rlvr.config import TrainerConfig
from trainer.checkpoint import load_train_state, save_checkpoint
from trainer.forward import attention_kernel, compile_layers, packed_logprobs, use_segment_attention
from trainer.lora import attach, save_weights, source, trainable
from trainer.packing import PackedBatch


def set_threads(cfg: TrainerConfig, device: torch.device) -> None:
    """The trainer's CPU threads (trainer.torch_threads, 0: this process's share of the cores it
    may use, split between the ranks on this machine)."""
    if device.type == "cpu":
        ranks = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        torch.set_num_threads(cfg.torch_threads or max(1, len(os.sched_getaffinity(0)) // ranks))


def join_process_group(device: torch.device) -> None:
    """Initialise torch.distributed from a launcher's environment (several ranks only): nccl on
    GPU, bound to this rank's GPU (LOCAL_RANK), gloo on CPU."""
    if torch.distributed.is_initialized() or int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return
    if device.type == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    torch.distributed.init_process_group("nccl" if device.type == "cuda" else "gloo")


def rank_and_world() -> tuple[int, int]:
    """(this rank, the number of ranks): (0, 1) without a process group."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def shard(n: int, rank: int, world: int, lockstep: bool = False) -> list[int | None]:
    """Rows rank, rank + world, ... of a step's n packed rows. With `lockstep` every rank gets
    ceil(n / world) entries, None standing for a filler micro-batch (loss times 0), for engines
    whose forward or backward is a collective (ZeRO-3 gathers the weights)."""
    own: list[int | None] = list(range(rank, n, world))
    return own + [None] * (-(-n // world) - len(own)) if lockstep else own


def all_reduce_grads(params, device: torch.device, bucket: int = 1 << 25) -> None:
    """Sum the gradients over the ranks in flat buckets of <= `bucket` elements. A parameter no
    rank has a gradient for stays without one (as in one process); a rank that ran no row for
    it contributes zeros."""
    params = [p for p in params if p.requires_grad]
    has = torch.tensor([p.grad is not None for p in params], dtype=torch.int32, device=device)
    torch.distributed.all_reduce(has)                                 # (P,) ranks with a grad
    params = [p for p, n in zip(params, has.tolist()) if n]
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    start = 0
    while start < len(params):
        end, size = start + 1, params[start].numel()
        while end < len(params) and size + params[end].numel() <= bucket:
            size, end = size + params[end].numel(), end + 1
        group = params[start:end]
        flat = torch.cat([p.grad.reshape(-1) for p in group])          # (size,)
        torch.distributed.all_reduce(flat)
        for p, g in zip(group, flat.split([p.numel() for p in group])):
            p.grad.copy_(g.view_as(p.grad))
        start = end


def pick_device(name: str) -> torch.device:
    """trainer.device as a torch device (`swe_rlvr.precision.pick_device`)."""
    return precision.pick_device(name, "trainer.device")


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
               compile: bool = False, attention: str = "auto"):
    """HF causal LM in fp32 with segment attention (`trainer.attention`), in train mode (decoder
    layers compiled)."""
    return _ready(_loaded(model_dir, device, attention), grad_checkpointing, compile)


def load_lora_model(model_dir: Path, device: torch.device, cfg: TrainerConfig,
                    compile: bool = False):
    """(the HF model with `trainer.lora`'s adapters injected, which the forward runs; its peft
    wrapper, which saves them): `model_dir`'s own adapter continued on its base, or a fresh one
    on `model_dir` (`trainer.lora.source`); the frozen base in bf16 where autocast runs."""
    base, adapter = source(Path(model_dir), cfg.lora)
    model = _loaded(Path(base), device, cfg.attention)
    wrapped = attach(model, cfg.lora, base, adapter, seed=cfg.seed,
                     bf16_base=precision.autocast_enabled(cfg.autocast, device))
    if cfg.grad_checkpointing:          # checkpointed layers of a frozen base: their input must
        model.enable_input_require_grads()             # require grad for the adapters' backward
    return _ready(model, cfg.grad_checkpointing, compile), wrapped


def _loaded(model_dir: Path, device: torch.device, attention: str = "auto"):
    """The HF causal LM in fp32 on `device`, with segment attention and no KV cache."""
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(device)
    use_segment_attention(model, attention_kernel(attention, device))
    model.config.use_cache = False
    return model


def _ready(model, grad_checkpointing: bool, compile: bool):
    """`model` with gradient checkpointing and compiled layers as asked, in train mode."""
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


def sum_over_ranks(values: list[float], world: int, device: torch.device) -> list[float]:
    """Element-wise sums of `values` over the `world` ranks of the process group."""
    if world == 1:
        return values
    total = torch.tensor(values, dtype=torch.float64, device=device)
    torch.distributed.all_reduce(total)
    return total.tolist()


class TorchEngine:
    """Model + optimiser + scheduler on one device."""

    def __init__(self, model_dir: Path, cfg: TrainerConfig, *, lr: float, total_steps: int,
                 schedule: str = "constant") -> None:
        self.cfg = cfg
        self.device = pick_device(cfg.device)
        join_process_group(self.device)
        self.rank, self.world = rank_and_world()
        if self.device.type == "cuda":
            self.device = torch.device("cuda", torch.cuda.current_device())
        set_threads(cfg, self.device)
        if cfg.autocast == "bf16":
            precision.warn_if_emulated("trainer.autocast=bf16", self.device)
        compiled = compile_enabled(cfg.compile, self.device)
        self.adapter = None          # under trainer.lora: the peft wrapper that saves the adapter
        with spans.span("model_load"):
            if cfg.lora.r:
                self.model, self.adapter = load_lora_model(Path(model_dir), self.device, cfg,
                                                           compiled)
            else:
                self.model = load_model(Path(model_dir), self.device, cfg.grad_checkpointing,
                                        compiled, cfg.attention)
        self.optimizer = make_optimizer(trainable(self.model), lr, cfg.weight_decay, self.device)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lr_lambda(schedule, cfg.warmup_steps, total_steps))

    def autocast(self):
        """bf16 autocast without its weight cache: a forward casts each weight once anyway (a
        checkpointed layer's recompute runs in a context of its own), so the cache saved no cast
        and only held every bf16 copy until the forward returned: 125-270 MB of SmolLM2's update
        peak on CPU."""
        if precision.autocast_enabled(self.cfg.autocast, self.device):
            return torch.autocast(self.device.type, dtype=torch.bfloat16, cache_enabled=False)
        return contextlib.nullcontext()

    def shard(self, n: int) -> list[int | None]:
        """Indices of a step's n packed rows that this rank runs."""
        return shard(n, self.rank, self.world)

    def reduce(self, values: list[float]) -> list[float]:
        """Element-wise sums of `values` over the ranks (metrics)."""
        return sum_over_ranks(values, self.world, self.device)

    def logprobs(self, batch: PackedBatch) -> tuple[torch.Tensor, torch.Tensor]:
        if self.cfg.lora.dropout:     # the adapters' dropout acts in gradient passes only: old and
            self.model.train(torch.is_grad_enabled())      # reference log-probs are policy k's
        with self.autocast():
            return packed_logprobs(self.model, batch)

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def step(self) -> float:
        """Sum grads over the ranks, clip, step optimiser and scheduler, zero grads; returns the
        pre-clip grad norm."""
        if self.world > 1:
            all_reduce_grads(self.model.parameters(), self.device)
        norm = torch.nn.utils.clip_grad_norm_(trainable(self.model), self.cfg.grad_clip)
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
        if self.rank == 0 and self.adapter is not None:   # the ranks hold identical copies
            save_checkpoint(dst, self.adapter, tokenizer_src=tokenizer_src, train_state=state,
                            save_weights=save_weights)
        elif self.rank == 0:
            save_checkpoint(dst, self.model, tokenizer_src=tokenizer_src, train_state=state)
        if self.world > 1:
            torch.distributed.barrier()
        return Path(dst)

    def load_state(self, ckpt: Path) -> dict:
        """Load optimiser and scheduler state saved with the weights in `ckpt`; returns the rest."""
        state = load_train_state(ckpt)
        self.optimizer.load_state_dict(state.pop("optimizer"))
        self.scheduler.load_state_dict(state.pop("scheduler"))
        return state
