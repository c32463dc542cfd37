"""The optimiser-step loop every update shares: engine, resume, accumulation, metrics, checkpoints.

`open_run` builds the engine from the newest step checkpoint under `out_dir` (resume) or from the
model (fresh, seeded). `train` runs each step's micro-batches through `one_step`: forward, the
step loss, backward (accumulating), then one engine `step` (all-reduce, clip, update), and writes a
resumable checkpoint every `trainer.save_every` steps and the final HF checkpoint.

Several ranks (`trainer.launch`): every rank packs every step, so the normalisers hold global
counts, but runs only the rows its engine's `shard` gives it; the metrics are summed over the
ranks (`Totals.reduce`), so every rank returns the same rows, and rank 0 alone writes files.
Per-rank inputs computed once (old and reference log-probs) are cached per rank.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import torch

from swe_rlvr import memory, spans
from swe_rlvr.config import Config
from trainer.checkpoint import latest_checkpoint, prune, rng_state, set_rng_state, step_dir
from trainer.microbatch import LossFn, MicroBatch
from trainer.packing import PackedBatch

ENGINES = {"torch": "trainer.engine_torch:TorchEngine",
           "deepspeed": "trainer.engine_deepspeed:DeepSpeedEngine"}
METRIC_KEYS = ("clip_frac_low", "clip_frac_high", "entropy", "approx_kl", "sampler_mismatch")

Rows = list[list[PackedBatch]]
"""Per optimiser step: all its packed rows (every rank holds all of them)."""
Steps = list[list[MicroBatch]]
"""Per optimiser step: this rank's micro-batches."""


class Engine(Protocol):
    """What the step loop needs of an engine (`ENGINES`: TorchEngine, DeepSpeedEngine)."""

    rank: int
    world: int
    device: torch.device

    def shard(self, n: int) -> list[int | None]: ...
    def logprobs(self, batch: PackedBatch) -> tuple[torch.Tensor, torch.Tensor]: ...
    def backward(self, loss: torch.Tensor) -> None: ...
    def step(self) -> float: ...
    def lr(self) -> float: ...
    def reduce(self, values: list[float]) -> list[float]: ...
    def save(self, dst: Path, *, tokenizer_src: Path, train_state: dict | None) -> Path: ...
    def load_state(self, ckpt: Path) -> dict: ...


@dataclass
class TrainResult:
    """The new HF checkpoint directory and one TRAIN_METRICS row per optimiser step."""

    checkpoint: Path
    metrics: list[dict] = field(default_factory=list)


@dataclass
class Run:
    """One update phase in progress: its engine, where it writes, and the steps done so far."""

    phase: str
    engine: Engine
    cfg: Config
    out_dir: Path
    tokenizer_src: Path
    on_step: Callable[[int], None] | None
    start: int = 0
    rows: list[dict] = field(default_factory=list)

    @property
    def main(self) -> bool:
        """Rank 0: the one that writes files and shows progress."""
        return self.engine.rank == 0


def make_engine(name: str, model_dir: Path, cfg: Config, *, lr: float, total_steps: int,
                schedule: str):
    """Engine by name from ENGINES, imported lazily (DeepSpeed stays out of CPU-only imports)."""
    if name not in ENGINES:
        raise ValueError(f"Unknown trainer.engine {name!r}; choose one of: {', '.join(ENGINES)}.")
    module, cls = ENGINES[name].split(":")
    return getattr(importlib.import_module(module), cls)(
        model_dir, cfg.trainer, lr=lr, total_steps=total_steps, schedule=schedule)


def open_run(phase: str, model_dir: Path, cfg: Config, out_dir: Path, *, lr: float,
             total_steps: int, schedule: str, on_step) -> Run:
    """Engine from the newest step checkpoint under out_dir (resume) or from model_dir (fresh).
    The caller frees any inference server first (`tasks.update`): the trainer knows none."""
    out_dir = Path(out_dir)
    ckpt = latest_checkpoint(out_dir / "checkpoints")
    engine = make_engine(cfg.trainer.engine, ckpt or Path(model_dir), cfg, lr=lr,
                         total_steps=total_steps, schedule=schedule)
    run = Run(phase, engine, cfg, out_dir, Path(model_dir), on_step)
    if ckpt is None:
        random.seed(cfg.trainer.seed)
        torch.manual_seed(cfg.trainer.seed)
    else:
        state = engine.load_state(ckpt)
        set_rng_state(state["rng"])
        run.start, run.rows = state["step"], state["rows"]
    return run


def own_rows(run: Run, rows: Rows) -> list[list[int | None]]:
    """Per step: the indices of this rank's rows (None: a filler, see `MicroBatch.filler`)."""
    return [run.engine.shard(len(r)) for r in rows]


def cached(run: Run, name: str, compute: Callable[[], object]):
    """Load `name` under out_dir if a previous (killed) run saved it, else compute, save
    atomically, return. Several ranks keep one file each (each holds its own rows)."""
    rank, world = run.engine.rank, run.engine.world
    path = run.out_dir / (name if world == 1 else f"{Path(name).stem}.rank{rank}of{world}.pt")
    if path.is_file():
        return torch.load(path, weights_only=False)
    value = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    torch.save(value, tmp)
    os.replace(tmp, path)
    return value


def no_grad_logprobs(run: Run, steps: Steps) -> list[list[torch.Tensor]]:
    """Per step, per micro-batch: the engine's (T,) log-probs on its row, without gradients."""
    with torch.no_grad():
        return [[_traced_logprobs(run, mb.row) for mb in step] for step in steps]


def _traced_logprobs(run: Run, row: PackedBatch) -> torch.Tensor:
    with spans.span("old_logprobs", row.num_tokens) as work:
        work.logits, work.keys = row.num_actions, row.attended_keys
        return run.engine.logprobs(row)[0].detach().cpu()


class Totals:
    """Action-token-weighted sums of one step's metrics over its micro-batches (and ranks)."""

    def __init__(self) -> None:
        self.loss, self.actions, self.tokens = 0.0, 0, 0
        self.sums: dict[str, float] = {}

    def add(self, loss: torch.Tensor, metrics: dict, entropy: torch.Tensor, b: PackedBatch) -> None:
        n = b.num_actions
        self.loss += float(loss.detach())
        self.actions += n
        self.tokens += b.episode_tokens
        metrics = {**metrics, "entropy": float((entropy.detach().cpu() * b.loss_mask).sum() / max(n, 1))}
        for key, value in metrics.items():
            self.sums[key] = self.sums.get(key, 0.0) + value * n

    def reduce(self, engine) -> None:
        """Sum over the ranks (a no-op on one): the step's loss, counts and METRIC_KEYS."""
        if engine.world == 1:
            return
        keys = list(METRIC_KEYS)
        values = engine.reduce([self.loss, self.actions, self.tokens]
                               + [self.sums.get(k, 0.0) for k in keys]
                               + [float(k in self.sums) for k in keys])
        self.loss, self.actions, self.tokens = values[0], int(values[1]), int(values[2])
        n = len(keys)
        self.sums = {k: s for k, s, seen in zip(keys, values[3:3 + n], values[3 + n:]) if seen}

    def mean(self, key: str) -> float | None:
        return self.sums[key] / max(self.actions, 1) if key in self.sums else None


def one_step(run: Run, k: int, batches: Sequence[MicroBatch], loss_fn: LossFn) -> dict:
    """Accumulate the step loss's gradient over this rank's micro-batches, then step once."""
    t0 = time.perf_counter()
    lr = run.engine.lr()
    totals = Totals()
    for mb in batches:
        with spans.span("forward_backward", mb.row.num_tokens) as work:
            work.logits, work.keys = mb.row.num_actions, mb.row.attended_keys
            logp, ent = run.engine.logprobs(mb.row)
            loss, metrics = loss_fn(mb.to(logp.device), logp)
            run.engine.backward(loss * 0.0 if mb.filler else loss)
        if not mb.filler:
            totals.add(loss, metrics, ent, mb.row)
    with spans.span("optimizer"):
        grad_norm = run.engine.step()
    totals.reduce(run.engine)
    dt = time.perf_counter() - t0
    return {"step": k, "phase": run.phase, "loss": totals.loss,
            **{key: totals.mean(key) for key in METRIC_KEYS},
            "grad_norm": grad_norm, "lr": lr, "tokens": totals.tokens,
            "tokens_per_s": totals.tokens / dt if dt > 0 else 0.0}


def train(run: Run, steps: Steps, loss_fn: LossFn) -> TrainResult:
    """The step loop: skip finished steps, train, checkpoint, final save."""
    from tqdm import tqdm
    bar = tqdm(total=len(steps), initial=min(run.start, len(steps)), desc=f"{run.phase} update",
               unit="step", disable=not run.main)
    # Without trainer.keep_freed_pages each step ends with `memory.trim`: a step's freed
    # activations stay resident as glibc heap fragments, and the next step's peak lands on top
    # of them (SFT of 32 expert episodes peaked at 5.1 GB, 4.5-4.6 with it).
    t = run.cfg.trainer
    kept = memory.kept_under_ceiling(int(t.freed_pages_ceiling_gb * memory.GIB) or None) \
        if t.keep_freed_pages else contextlib.nullcontext(memory.trim)
    with kept as after_step:
        _steps(run, steps, loss_fn, bar, after_step)
    bar.close()
    with spans.span("checkpoint"):
        final = run.engine.save(run.out_dir / "final", tokenizer_src=run.tokenizer_src,
                                train_state=None)
    return TrainResult(final, run.rows)


def _steps(run: Run, steps: Steps, loss_fn: LossFn, bar, after_step: Callable[[], None]) -> None:
    """`train`'s loop: each step not yet done, its row, its checkpoint every `save_every`."""
    every = run.cfg.trainer.save_every
    for k, batches in enumerate(steps, 1):
        if k <= run.start:
            continue
        run.rows.append(one_step(run, k, batches, loss_fn))
        after_step()
        bar.update(1)
        bar.set_postfix(loss=f"{run.rows[-1]['loss']:.4f}",
                        tok_s=f"{run.rows[-1]['tokens_per_s']:.0f}")
        if every and (k % every == 0 or k == len(steps)):
            state = {"step": k, "rows": run.rows, "rng": rng_state(), "phase": run.phase}
            with spans.span("checkpoint"):
                run.engine.save(step_dir(run.out_dir / "checkpoints", k),
                                tokenizer_src=run.tokenizer_src, train_state=state)
            if run.main:
                prune(run.out_dir / "checkpoints", run.cfg.trainer.keep_checkpoints)
        if run.on_step is not None:
            run.on_step(k)
