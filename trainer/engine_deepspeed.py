"""DeepSpeed engine: ZeRO-2/3 with a torch AdamW, in-process for one rank or under the launcher.

The same step contract as `TorchEngine`: `logprobs` per packed row, `backward` per row, one `step`.
Gradient accumulation is caller-owned (`managed_gradient_accumulation: false`): every `backward`
accumulates, `step` reduces, clips and updates. Losses arrive already normalised by the step's
global token count, so `backward` does not rescale by the accumulation steps; under data
parallelism each rank takes rows `rank::world` and its loss is multiplied by the world size,
which DeepSpeed's gradient averaging divides back out. Under ZeRO-3 every forward gathers the
weights collectively, and ZeRO's reductions expect every rank's gradients, so `shard` pads a rank
with fewer rows with filler micro-batches (loss times 0) to run as many as the others.

One rank without a launcher: `torch.distributed` is initialised here (gloo on CPU, nccl on GPU)
on a free local port. On CPU set `DS_ACCELERATOR=cpu`; its collectives run on gloo, and DeepSpeed's
shared-memory kernels, a JIT C++ build of minutes on first use, only with
`trainer.deepspeed_cpu_shm` (`skip_shm_kernels`). Many GPUs: `trainer.launch` runs
the loops under `torchrun`, one rank per GPU. Checkpoints: HF weights gathered to rank 0 (ZeRO-3
consolidates them), plus DeepSpeed's own sharded optimiser state under `deepspeed/` for resume.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
from pathlib import Path

import torch

from swe_rlvr.config import TrainerConfig
from trainer.checkpoint import TRAIN_STATE, copy_tokenizer
from trainer.engine_torch import (
    compile_enabled,
    join_process_group,
    load_model,
    lr_lambda,
    pick_device,
    set_threads,
    shard,
    sum_over_ranks,
)
from trainer.forward import packed_logprobs
from trainer.packing import PackedBatch


def ds_config(cfg: TrainerConfig, on_gpu: bool) -> dict:
    """The DeepSpeed JSON for these settings (infra/deepspeed/zero{2,3}.json are its output)."""
    if cfg.deepspeed_config:
        return json.loads(Path(cfg.deepspeed_config).read_text())
    if cfg.zero_stage not in (2, 3):
        raise ValueError(f"trainer.zero_stage must be 2 or 3, got {cfg.zero_stage}.")
    return {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
            "managed_gradient_accumulation": False, "gradient_clipping": cfg.grad_clip,
            "bf16": {"enabled": on_gpu},
            "zero_optimization": {"stage": cfg.zero_stage, "overlap_comm": on_gpu,
                                  "contiguous_gradients": True, "reduce_bucket_size": 5e7,
                                  "stage3_gather_16bit_weights_on_model_save": True},
            "zero_allow_untested_optimizer": True, "steps_per_print": 1 << 30,
            "wall_clock_breakdown": False}


def skip_shm_kernels() -> None:
    """DeepSpeed's comm backend builds its shared-memory allreduce op when it starts, if the op
    is marked compatible (`deepspeed.comm.torch.build_shm_op`); on CPU that is a JIT C++ build of
    minutes the first time. Marked incompatible, the backend runs torch.distributed's (gloo's)
    collectives instead."""
    import deepspeed.ops
    from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder
    deepspeed.ops.__compatible_ops__[ShareMemCommBuilder.NAME] = False


def init_single_rank(device: torch.device) -> None:
    """Initialise a one-rank process group when no launcher did."""
    import deepspeed
    if torch.distributed.is_initialized():
        return
    if "RANK" not in os.environ:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=str(port))
    deepspeed.init_distributed(dist_backend="nccl" if device.type == "cuda" else "gloo")


def host_copy(state_dict: dict) -> dict:
    """A CPU copy of `state_dict` in which tensors that share storage (tied embeddings: `lm_head`
    and `embed_tokens` are one parameter) still share it. `save_pretrained` recognises ties by
    shared storage; copying each tensor on its own from a GPU made two, and the saved checkpoint
    carried an untied `lm_head.weight` the torch engine's did not."""
    copies: dict[tuple, torch.Tensor] = {}
    out = {}
    for name, tensor in state_dict.items():
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape),
               tuple(tensor.stride()), tensor.dtype)
        if key not in copies:
            copies[key] = tensor.detach().to("cpu", copy=True)
        out[name] = copies[key]
    return out


class DeepSpeedEngine:
    """Model wrapped by `deepspeed.initialize` with a torch AdamW and LambdaLR."""

    def __init__(self, model_dir: Path, cfg: TrainerConfig, *, lr: float, total_steps: int,
                 schedule: str = "constant") -> None:
        if cfg.lora.r:
            raise ValueError("trainer.lora trains with the torch engine only; set "
                             "trainer.engine=torch, or trainer.lora.r=0 for DeepSpeed.")
        import deepspeed
        self.cfg = cfg
        device = pick_device(cfg.device)
        set_threads(cfg, device)
        if device.type == "cpu" and os.environ.get("DS_ACCELERATOR") != "cpu":
            raise RuntimeError("DeepSpeed on CPU needs DS_ACCELERATOR=cpu in the environment "
                               "before Python starts; export it or use trainer.engine: torch.")
        if device.type == "cpu" and not cfg.deepspeed_cpu_shm:
            skip_shm_kernels()
        join_process_group(device)                         # several ranks under a launcher
        init_single_rank(device)                           # or one without
        if device.type == "cuda":
            device = torch.device("cuda", torch.cuda.current_device())
        self.device = device
        model = load_model(Path(model_dir), device, cfg.grad_checkpointing,
                           compile_enabled(cfg.compile, device), cfg.attention)
        config = ds_config(cfg, device.type == "cuda")
        self.zero_stage = config.get("zero_optimization", {}).get("stage", 0)
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=cfg.weight_decay)
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lr_lambda(schedule, cfg.warmup_steps, total_steps))
        self.model, self.optimizer, _, self.scheduler = deepspeed.initialize(
            model=model, optimizer=optimizer, lr_scheduler=scheduler,
            config=config)
        self.rank = torch.distributed.get_rank()
        self.world = torch.distributed.get_world_size()

    def shard(self, n: int) -> list[int | None]:
        """This rank's packed rows of a step with n rows (None: a filler micro-batch)."""
        return shard(n, self.rank, self.world, lockstep=True)

    def reduce(self, values: list[float]) -> list[float]:
        """Element-wise sums of `values` over the ranks (metrics)."""
        return sum_over_ranks(values, self.world, self.device)

    def logprobs(self, batch: PackedBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """The module's forward, with the bookkeeping DeepSpeed's own `forward` does first: ZeRO-3
        counts micro-steps there, and a backward at micro-step 0 overwrites the accumulated
        gradient partitions instead of adding to them."""
        if hasattr(self.optimizer, "clear_backward_seen_flag"):
            self.optimizer.clear_backward_seen_flag()
        return packed_logprobs(self.model.module, batch)

    def backward(self, loss: torch.Tensor) -> None:
        self.model.backward(loss * self.world, scale_wrt_gas=False)

    def step(self) -> float:
        self.model.step()
        norm = self.model.get_global_grad_norm()
        return float(norm) if norm is not None else float("nan")

    def lr(self) -> float:
        return float(self.scheduler.get_last_lr()[0])

    def _full_state_dict(self) -> dict:
        if self.zero_stage == 3:
            return self.model._zero3_consolidated_16bit_state_dict()   # collective; rank 0 gets it
        return host_copy(self.model.module.state_dict())

    def save(self, dst: Path, *, tokenizer_src: Path, train_state: dict | None) -> Path:
        """All ranks: DeepSpeed state; rank 0: HF weights, tokenizer, our state; then rename."""
        dst = Path(dst)
        tmp = dst.parent / f".{dst.name}.tmp-ds"
        if self.rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
        torch.distributed.barrier()
        if train_state is not None:
            self.model.save_checkpoint(str(tmp / "deepspeed"), tag="state")
        state_dict = self._full_state_dict()
        if self.rank == 0:
            self._write_hf(tmp, state_dict, tokenizer_src, train_state)
            old = dst.parent / f".{dst.name}.old-ds"
            if dst.exists():
                os.rename(dst, old)
            os.rename(tmp, dst)
            shutil.rmtree(old, ignore_errors=True)
        torch.distributed.barrier()
        return dst

    def _write_hf(self, tmp: Path, state_dict: dict, tokenizer_src: Path, train_state) -> None:
        module = self.model.module
        attn = module.config._attn_implementation
        module.config._attn_implementation = "sdpa"
        try:
            module.save_pretrained(tmp, state_dict=state_dict, safe_serialization=True)
        finally:
            module.config._attn_implementation = attn
        copy_tokenizer(Path(tokenizer_src), tmp)
        if train_state is not None:
            torch.save(train_state, tmp / TRAIN_STATE)

    def load_state(self, ckpt: Path) -> dict:
        self.model.load_checkpoint(str(Path(ckpt) / "deepspeed"), tag="state",
                                   load_optimizer_states=True, load_lr_scheduler_states=True)
        return torch.load(Path(ckpt) / TRAIN_STATE, weights_only=False)
