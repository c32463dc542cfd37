"""What a run will hold in host memory at its peak, estimated before it starts, and the check
that refuses a run whose estimate exceeds the memory available.

A run's process does two memory-heavy things in turn; the `rl-iteration` flow drops the sampling
engine before the update starts, so the peak is the larger of the two, plus the runtime:
- **sampling** (the `hf` engine in this process): the weights in the engine's dtype, and the KV
  cache, bounded by `engine.prefix_cache_gb` and by the work, the prefix cache for every episode of
  a stage (at most `orchestration.max_workers` at once, each up to `agent.context_tokens`) plus the
  batch being decoded (`engine.max_batch` rows);
- **the update** (the `torch` trainer on CPU, fp32, once per rank of `trainer.processes`): 16
  bytes per parameter (weights, gradients, AdamW's two moments), or under LoRA (`trainer.lora.r`
  > 0) 4 per frozen base parameter (fp32, an upper bound where its linears are stored in bf16)
  and 16 per adapter parameter (`lora_params`); the activations of one
  micro-batch, a packed row of up to `trainer.pack_tokens` tokens: every layer keeps
  `8 d + 2 d_kv + 4 i` floats per token, or with `trainer.grad_checkpointing` only its input (d
  floats) while one layer at a time recomputes the rest; and the LM head's chunk, three (rows,
  vocab) fp32 buffers (logits, softmax, gradient).
Measured on SmolLM2-135M (d 576, d_kv 192, i 1536, 30 layers): a 1,024-token row without
checkpointing grew the resident set by 1.3 GB beyond weights, gradients and optimiser state, where
the formula gives 1.4 GB; what the update holds beyond its tensors is `UPDATE_OVERHEAD`. Left out:
a GPU's own memory (a trainer or engine on CUDA holds its weights there; the check then covers the
CPU side only).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import gc
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from swe_rlvr import spans
from swe_rlvr.compute import Shape

GIB = 2 ** 30
RUNTIME_BYTES = int(0.7 * GIB)
"""The interpreter with torch, transformers, pyarrow and the Prefect client, before any model."""
HEAD_BUFFERS = 3
UPDATE_OVERHEAD = 0.35
"""What the update holds beyond its modelled tensors (load-time copies, compiled layers' buffers,
allocator slack), as a share of them: measured on the quickstart (`bench/iteration.py`), whose
update peaked at 5.0 GB where runtime + tensors came to 3.6 GB for its ~4,300-token rows."""
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True)
class ModelDims:
    """What the memory estimate needs of a model beyond its FLOP shape."""

    shape: Shape
    total_params: int
    kv_dim: int
    """key/value heads x head dim (the width of K and of V per layer)."""
    intermediate: int
    tied_head: bool = False
    """The LM head shares the input embedding's matrix (counted once in `total_params`)."""

    @classmethod
    def of(cls, model) -> ModelDims:
        cfg = model.config
        heads = cfg.num_attention_heads
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
        kv = getattr(cfg, "num_key_value_heads", None) or heads
        tied = model.get_output_embeddings().weight is model.get_input_embeddings().weight
        return cls(Shape.of(model), sum(p.numel() for p in model.parameters()), kv * head_dim,
                   cfg.intermediate_size, tied)

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        return 2 * self.shape.layers * self.kv_dim * dtype_bytes


@dataclass(frozen=True)
class Estimate:
    """Bytes by part, the phase they belong to, and the knob that sizes each part."""

    parts: dict[str, tuple[str, int, str]]
    """name -> (phase: sampling | update, bytes, the config key that sizes it)."""

    def phase(self, name: str) -> int:
        return RUNTIME_BYTES + sum(b for p, b, _ in self.parts.values() if p == name)

    @property
    def peak(self) -> int:
        return max(self.phase("sampling"), self.phase("update"))

    def largest(self) -> tuple[str, int, str]:
        """(part, bytes, knob) of the biggest part of the peak phase."""
        phase = max(("sampling", "update"), key=self.phase)
        name = max((n for n, (p, _, _) in self.parts.items() if p == phase),
                   key=lambda n: self.parts[n][1])
        return name, self.parts[name][1], self.parts[name][2]


def activation_bytes(dims: ModelDims, tokens: int, checkpointing: bool) -> int:
    """fp32 activations a forward keeps for its backward over one row of `tokens`."""
    d, layers = dims.shape.hidden, dims.shape.layers
    per_layer = 4 * (8 * d + 2 * dims.kv_dim + 4 * dims.intermediate)       # bytes per token
    if checkpointing:
        return tokens * (layers * 4 * d + per_layer)
    return tokens * layers * per_layer


def head_bytes(dims: ModelDims, tokens: int, chunk_rows: int) -> int:
    """The LM head's (rows, vocab) fp32 buffers for the action positions of one row."""
    return HEAD_BUFFERS * min(tokens, chunk_rows) * dims.shape.vocab * 4


def kv_cache_bytes(dims: ModelDims, dtype_bytes: int, episodes: int, context_tokens: int,
                   budget_gb: float) -> int:
    """The prefix cache of `episodes` episodes of up to `context_tokens`, within its budget."""
    work = episodes * context_tokens * dims.kv_bytes_per_token(dtype_bytes)
    return min(work, int(budget_gb * GIB))


def lora_params(dims: ModelDims, r: int, targets: tuple[str, ...]) -> int:
    """Parameters of rank-`r` adapters on the `targets` projections of every layer: r x (inputs +
    outputs) per projection, a Llama/Qwen2-style layer's widths (an unknown name counts d + d)."""
    d, kv, i = dims.shape.hidden, dims.kv_dim, dims.intermediate
    sides = {"q_proj": d + d, "k_proj": d + kv, "v_proj": d + kv, "o_proj": d + d,
             "gate_proj": d + i, "up_proj": d + i, "down_proj": i + d}
    return dims.shape.layers * r * sum(sides.get(t, 2 * d) for t in targets)


def estimate(cfg, dims: ModelDims, engine_dtype_bytes: int, head_chunk_rows: int,
             engine_in_process: bool, trainer_on_cpu: bool) -> Estimate:
    """The run's parts (see the module docstring) under config `cfg`."""
    e, t, a = cfg.engine, cfg.trainer, cfg.agent
    parts: dict[str, tuple[str, int, str]] = {}
    if engine_in_process:
        parts["engine weights"] = ("sampling", dims.total_params * engine_dtype_bytes,
                                   "engine.dtype")
        if dims.tied_head and e.packed_weights != "plain":     # agent.engines.packed: a copy
            parts["packed LM head"] = ("sampling", dims.shape.hidden * dims.shape.vocab
                                       * engine_dtype_bytes, "engine.packed_weights")
        parts["KV cache"] = ("sampling", kv_cache_bytes(
            dims, engine_dtype_bytes, cfg.orchestration.max_workers, a.context_tokens,
            e.prefix_cache_gb), "engine.prefix_cache_gb")
        parts["decode batch KV"] = ("sampling", e.max_batch * a.context_tokens
                                    * dims.kv_bytes_per_token(engine_dtype_bytes), "engine.max_batch")
    if trainer_on_cpu:                  # trainer.processes ranks, each a full replica here
        ranks = t.processes
        if t.lora.r > 0:
            parts["frozen base, adapters, AdamW"] = ("update", ranks * (
                4 * dims.total_params + 16 * lora_params(dims, t.lora.r, t.lora.targets)), "trainer.engine")
        else:
            parts["weights, gradients, AdamW"] = ("update", ranks * 16 * dims.total_params,
                                                  "trainer.engine")
        parts["activations"] = ("update", ranks * activation_bytes(dims, t.pack_tokens,
                                                                   t.grad_checkpointing),
                                "trainer.grad_checkpointing" if not t.grad_checkpointing
                                else "trainer.pack_tokens")
        parts["LM head"] = ("update", ranks * head_bytes(dims, t.pack_tokens, head_chunk_rows),
                            "trainer.pack_tokens")
        tensors = sum(b for p, b, _ in parts.values() if p == "update")
        parts["allocator and compiler"] = ("update", int(UPDATE_OVERHEAD * tensors),
                                           "trainer.pack_tokens")
    return Estimate(parts)


FIXES = {
    "engine.dtype": lambda c: ("set engine.dtype=bfloat16 (half the weights; slow where the CPU "
                               "emulates bf16, see swe_rlvr.precision) or use a smaller model."),
    "engine.prefix_cache_gb": lambda c: (
        f"lower engine.prefix_cache_gb (now {c.engine.prefix_cache_gb}), "
        f"orchestration.max_workers (now {c.orchestration.max_workers}) or agent.context_tokens "
        f"(now {c.agent.context_tokens})."),
    "engine.max_batch": lambda c: (f"lower engine.max_batch (now {c.engine.max_batch}) or "
                                   f"agent.context_tokens (now {c.agent.context_tokens})."),
    "trainer.engine": lambda c: (f"train on a GPU (trainer.device=cuda), run fewer CPU ranks "
                                 f"(trainer.processes, now {c.trainer.processes}), or use a "
                                 f"smaller model."),
    "trainer.grad_checkpointing": lambda c: (
        f"set trainer.grad_checkpointing=true (each layer keeps only its input), or lower "
        f"trainer.pack_tokens (now {c.trainer.pack_tokens})."),
    "trainer.pack_tokens": lambda c: (f"lower trainer.pack_tokens (now {c.trainer.pack_tokens}; "
                                      f"at least the longest episode)."),
}
"""The fix for the part each knob sizes, with the config's current values."""


def model_dims(model_dir: str) -> ModelDims:
    """The dims of the HF model in `model_dir`, from its config alone (no weights are read); built
    once per config file and version (a run checks them in the CLI and again in its flow)."""
    config = Path(model_dir) / "config.json"
    return _model_dims(str(config.parent.resolve()), config.stat().st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _model_dims(model_dir: str, _mtime_ns: int) -> ModelDims:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_dir))
    return ModelDims.of(model)


def engine_dtype_bytes(name: str) -> int:
    """Bytes per weight of the `hf` engine on CPU: engine.dtype, fp32 for "auto"."""
    return DTYPE_BYTES.get(name, 4)


def available_bytes() -> int:
    """Memory this process could still take: MemAvailable, within a cgroup (v2 or v1) limit."""
    avail = _meminfo("MemAvailable")
    for limit, usage in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                         ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                          "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        try:
            with open(limit) as fh:
                text = fh.read().strip()
            with open(usage) as fh:
                used = int(fh.read().strip())
        except (OSError, ValueError):
            continue
        if text.isdigit() and int(text) < 1 << 60:
            avail = min(avail, int(text) - used)
        break
    return avail


def release() -> None:
    """Give freed memory back to the OS: collect reference cycles (an engine's model can sit in
    one), then `malloc_trim(0)`, which returns the free pages of every glibc arena, and `purge`
    for jemalloc or tcmalloc. Without it a stage's freed tensors stay resident (glibc keeps chunks
    under its mmap threshold, up to 32 MiB, in per-thread arenas; jemalloc returns dirty pages
    over ~10 s), and the next stage's peak lands on top of the last one's."""
    gc.collect()
    trim()
    purge()


def purge() -> None:
    """Return the free pages of a preloaded jemalloc (every arena) or tcmalloc now: at stage
    ends, and in a training loop when its resident set reaches its ceiling
    (`kept_under_ceiling`); after every step it would give back pages the next step faults in
    again."""
    process = ctypes.CDLL(None)
    if hasattr(process, "mallctl"):                  # jemalloc: MALLCTL_ARENAS_ALL is 4096
        process.mallctl(b"arena.4096.purge", None, None, None, ctypes.c_size_t(0))
    elif hasattr(process, "MallocExtension_ReleaseFreeMemory"):    # tcmalloc
        process.MallocExtension_ReleaseFreeMemory()


CEILING_POLL_S = 0.01
"""How often `kept_under_ceiling` reads the resident set (100 reads a second, ~10 us each)."""


@contextlib.contextmanager
def kept_under_ceiling(ceiling: int | None = None) -> Iterator[Callable[[], None]]:
    """A training loop's freed pages kept for its next allocations, up to a resident-set ceiling
    (`trainer.keep_freed_pages`, `trainer.freed_pages_ceiling_gb`). Yields the call to make
    after each step.

    Under jemalloc's default decay a training loop gives freed pages back within its own step
    and faults them in again, zeroed, moments later: the quickstart's warm-up SFT made ~2 M page
    faults a step. With decay off, its 14 steps took 80.7 s instead of 127.2 and a DAPO update
    42.3 s instead of 69.4 (2-core AMD EPYC, AVX512-BF16; the process's system time fell from
    53 s to 3), but kept pages fragment: the update's peak rose from 3,411,860 kB to 3,945,500.
    So inside this block every arena keeps its freed pages (decay off), and a watcher thread
    purges them all whenever the resident set exceeds `ceiling` bytes (None: the resident set
    now plus half the memory available now). The resident set then stays under the ceiling, or
    under what the loop holds live where that is more. Leaving the block restores the decay and
    purges. Under glibc the call trims its heap (`trim`)."""
    process = ctypes.CDLL(None)
    if not hasattr(process, "mallctl"):
        yield trim
        return
    if ceiling is None:
        ceiling = _rss_bytes() + available_bytes() // 2
    saved = _set_decay(process, -1)
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(CEILING_POLL_S):
            if _rss_bytes() > ceiling:
                purge()

    watcher = threading.Thread(target=watch, name="freed-pages-ceiling", daemon=True)
    watcher.start()
    try:
        yield lambda: None
    finally:
        stop.set()
        watcher.join()
        _set_decay(process, saved)
        purge()


def _rss_bytes() -> int:
    return int(spans.rss_mb() * 2 ** 20)


_DECAY = (b"dirty_decay_ms", b"muzzy_decay_ms")


def _set_decay(process, value: int | dict[bytes, int]) -> dict[bytes, int]:
    """Set jemalloc's decay times (ms; -1: never) for new arenas and every existing one; returns
    the defaults they replaced. `value`: one time for both, or what a call returned."""
    narenas = ctypes.c_uint(0)
    process.mallctl(b"arenas.narenas", ctypes.byref(narenas), ctypes.byref(ctypes.c_size_t(4)),
                    None, ctypes.c_size_t(0))
    old = {}
    for key in _DECAY:
        now, size = ctypes.c_ssize_t(0), ctypes.c_size_t(ctypes.sizeof(ctypes.c_ssize_t))
        process.mallctl(b"arenas." + key, ctypes.byref(now), ctypes.byref(size), None,
                        ctypes.c_size_t(0))
        old[key] = now.value
        new = ctypes.c_ssize_t(value[key] if isinstance(value, dict) else value)
        for name in [b"arenas." + key, *(b"arena.%d." % i + key for i in range(narenas.value))]:
            process.mallctl(name, None, None, ctypes.byref(new), ctypes.c_size_t(ctypes.sizeof(new)))
    return old                             # (an arena not yet in use refuses the setting: fine)


def trim() -> None:
    """`malloc_trim(0)` alone: for memory that reference counting already freed (a training
    step's activations), without `gc.collect`, which takes ~0.3 s in a process that has imported
    torch, transformers, Prefect and MLflow."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):                  # not glibc: nothing to trim
        pass


def _meminfo(key: str) -> int:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def describe(est: Estimate) -> str:
    """'sampling 1.2 GiB (engine weights 0.5, ...), update 3.1 GiB (...)'."""
    out = []
    for phase in ("sampling", "update"):
        parts = [f"{n} {b / GIB:.1f}" for n, (p, b, _) in est.parts.items() if p == phase]
        if parts:
            out.append(f"{phase} {est.phase(phase) / GIB:.1f} GiB (runtime "
                       f"{RUNTIME_BYTES / GIB:.1f}, {', '.join(parts)})")
    return "; ".join(out)
