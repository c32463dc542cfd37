"""Update loops: RFT/SFT, DAPO (and GRPO), DPO. Each returns the new checkpoint + metrics rows.

- `run_rft`: Nebius RFT, SFT on the policy's own resolved episodes (format-error turns are
  already loss-masked by the agent), `trainer.rft_epochs` (Nebius: 1), LR 5e-6, AdamW wd 0.1,
  cosine schedule.
- `run_dapo`: old log-probs are recomputed with the current weights before the first update (the
  sampler's log-probs serve only the mismatch metric), then `trainer.minibatches` optimiser steps
  per epoch (Nebius: 1 epoch, LR 1e-6, grad clip 1.0, no KL). `algorithm.name: grpo` swaps in the
  sequence-mean loss.
- `run_dpo`: Agent-RLVR, SFT warm-up on the chosen (guided, resolved) episodes, then DPO on the
  (chosen, rejected) pairs against the warmed-up model as reference, at `trainer.lr`.
Guidance is stripped from the context unless `guidance.mode` is `keep`, and every episode loses
the tokens after its last action (`trim_tail`: no loss and no effect on earlier log-probs).

Every step packs its episodes (no padding), accumulates gradients over the packed rows with the
loss normalised by the step's global count, and clips and steps once. With `trainer.save_every`
a resumable checkpoint lands in `out_dir/checkpoints/step_k`; calling the same function again
with the same arguments resumes after the newest one, bitwise-identically on CPU. Old and
reference log-probs are saved next to it, so a resumed run does not recompute them with moved
weights. Left out: value models, multi-epoch PPO reuse tricks, sampler-mismatch correction.
"""

from __future__ import annotations

import importlib
import math
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from swe_rlvr.config import Config, TrainerConfig
from trainer.checkpoint import latest_checkpoint, prune, rng_state, set_rng_state, step_dir
from trainer.episodes import Episode, strip_guidance, trim_tail
from trainer.losses import dapo_loss, dpo_loss, grpo_loss, mismatch_metrics, sft_loss
from trainer.packing import PackedBatch, pack

ENGINES = {"torch": "trainer.engine_torch:TorchEngine",
           "deepspeed": "trainer.engine_deepspeed:DeepSpeedEngine"}
METRIC_KEYS = ("clip_frac_low", "clip_frac_high", "entropy", "approx_kl", "sampler_mismatch")


@dataclass
class TrainResult:
    """The new HF checkpoint directory and one TRAIN_METRICS row per optimiser step."""

    checkpoint: Path
    metrics: list[dict] = field(default_factory=list)


@dataclass
class _Run:
    phase: str
    engine: object
    cfg: Config
    out_dir: Path
    tokenizer_src: Path
    on_step: Callable[[int], None] | None
    start: int = 0
    rows: list[dict] = field(default_factory=list)


def make_engine(name: str, model_dir: Path, cfg: Config, *, lr: float, total_steps: int,
                schedule: str):
    """Engine by name from ENGINES, imported lazily (DeepSpeed stays out of CPU-only imports)."""
    if name not in ENGINES:
        raise ValueError(f"Unknown trainer.engine {name!r}; choose one of: {', '.join(ENGINES)}.")
    module, cls = ENGINES[name].split(":")
    return getattr(importlib.import_module(module), cls)(
        model_dir, cfg.trainer, lr=lr, total_steps=total_steps, schedule=schedule)


def step_plan(n: int, per_step: int, epochs: int, seed: int) -> list[list[int]]:
    """Seeded shuffles of range(n), one per epoch, cut into steps of `per_step` items."""
    gen = torch.Generator().manual_seed(seed)
    plan: list[list[int]] = []
    for _ in range(epochs):
        order = torch.randperm(n, generator=gen).tolist()
        plan += [order[i:i + per_step] for i in range(0, n, max(per_step, 1))]
    return plan


def prepare(episodes: Sequence[Episode], mode: str) -> list[Episode]:
    """Strip guidance spans unless guidance mode is `keep`; cut every episode after its last action."""
    return [trim_tail(e if mode == "keep" else strip_guidance(e)) for e in episodes]


def _open(phase: str, model_dir: Path, cfg: Config, out_dir: Path, *, lr: float,
          total_steps: int, schedule: str, on_step) -> _Run:
    """Engine from the newest step checkpoint under out_dir (resume) or from model_dir (fresh)."""
    out_dir = Path(out_dir)
    ckpt = latest_checkpoint(out_dir / "checkpoints")
    engine = make_engine(cfg.trainer.engine, ckpt or Path(model_dir), cfg, lr=lr,
                         total_steps=total_steps, schedule=schedule)
    run = _Run(phase, engine, cfg, out_dir, Path(model_dir), on_step)
    if ckpt is None:
        random.seed(cfg.trainer.seed)
        torch.manual_seed(cfg.trainer.seed)
    else:
        state = engine.load_state(ckpt)
        set_rng_state(state["rng"])
        run.start, run.rows = state["step"], state["rows"]
    return run


def _cached(path: Path, compute: Callable[[], object]):
    """Load `path` if a previous (killed) run saved it, else compute, save atomically, return."""
    if path.is_file():
        return torch.load(path, weights_only=False)
    value = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    torch.save(value, tmp)
    os.replace(tmp, path)
    return value


def _no_grad_logprobs(engine, steps: list[list[PackedBatch]]) -> list[list[torch.Tensor]]:
    with torch.no_grad():
        return [[engine.logprobs(b)[0].detach().cpu() for b in batches] for batches in steps]


class _Totals:
    """Action-token-weighted sums of the step's metrics over its micro-batches."""

    def __init__(self) -> None:
        self.loss, self.actions, self.tokens, self.sums = 0.0, 0, 0, {}

    def add(self, loss: torch.Tensor, metrics: dict, entropy: torch.Tensor, b: PackedBatch) -> None:
        n = b.num_actions
        self.loss += float(loss.detach())
        self.actions += n
        self.tokens += b.episode_tokens
        metrics = {**metrics, "entropy": float((entropy.detach().cpu() * b.loss_mask).sum() / max(n, 1))}
        for key, value in metrics.items():
            self.sums[key] = self.sums.get(key, 0.0) + value * n

    def mean(self, key: str) -> float | None:
        return self.sums[key] / max(self.actions, 1) if key in self.sums else None


def _one_step(run: _Run, k: int, batches: list[PackedBatch], loss_fn) -> dict:
    t0 = time.perf_counter()
    lr = run.engine.lr()
    totals = _Totals()
    for j in run.engine.shard(len(batches)):
        b = batches[j]
        logp, ent = run.engine.logprobs(b)
        loss, metrics = loss_fn(k, j, b, logp)
        run.engine.backward(loss)
        totals.add(loss, metrics, ent, b)
    grad_norm = run.engine.step()
    dt = time.perf_counter() - t0
    return {"step": k, "phase": run.phase, "loss": totals.loss,
            **{key: totals.mean(key) for key in METRIC_KEYS},
            "grad_norm": grad_norm, "lr": lr, "tokens": totals.tokens,
            "tokens_per_s": totals.tokens / dt if dt > 0 else 0.0}


def _train(run: _Run, steps: list[list[PackedBatch]], loss_fn) -> TrainResult:
    """The shared step loop: skip finished steps, train, checkpoint, final save."""
    from tqdm import tqdm
    every = run.cfg.trainer.save_every
    bar = tqdm(total=len(steps), initial=min(run.start, len(steps)), desc=f"{run.phase} update",
               unit="step")
    for k, batches in enumerate(steps, 1):
        if k <= run.start:
            continue
        run.rows.append(_one_step(run, k, batches, loss_fn))
        bar.update(1)
        bar.set_postfix(loss=f"{run.rows[-1]['loss']:.4f}",
                        tok_s=f"{run.rows[-1]['tokens_per_s']:.0f}")
        if every and (k % every == 0 or k == len(steps)):
            state = {"step": k, "rows": run.rows, "rng": rng_state(), "phase": run.phase}
            run.engine.save(step_dir(run.out_dir / "checkpoints", k),
                            tokenizer_src=run.tokenizer_src, train_state=state)
            prune(run.out_dir / "checkpoints", run.cfg.trainer.keep_checkpoints)
        if run.on_step is not None:
            run.on_step(k)
    bar.close()
    final = run.engine.save(run.out_dir / "final", tokenizer_src=run.tokenizer_src, train_state=None)
    return TrainResult(final, run.rows)


def _pack_plan(episodes: Sequence[Episode], plan: list[list[int]],
               t: TrainerConfig) -> list[list[PackedBatch]]:
    """Per optimiser step of the plan: its episodes packed into rows (trainer.pack_tokens,
    trainer.share_prefix)."""
    return [pack([episodes[i] for i in idx], t.pack_tokens, share_prefix=t.share_prefix)
            for idx in plan]


def _sft(phase: str, model_dir: Path, episodes: list[Episode], cfg: Config, out_dir: Path,
         on_step) -> TrainResult:
    t = cfg.trainer
    plan = step_plan(len(episodes), t.sft_batch_size, t.rft_epochs, t.seed)
    steps = _pack_plan(episodes, plan, t)
    counts = [sum(b.num_actions for b in batches) for batches in steps]
    run = _open(phase, model_dir, cfg, out_dir, lr=t.rft_lr, total_steps=len(steps),
                schedule=t.schedule, on_step=on_step)

    def loss_fn(k, j, b, logp):
        loss, metrics = sft_loss(logp, b.loss_mask.to(logp.device), num_tokens=counts[k - 1])
        return loss, {**metrics, **mismatch_metrics(logp.cpu(), b.sampler_logprobs, b.loss_mask)}
    return _train(run, steps, loss_fn)


def run_rft(model_dir: Path, episodes: Sequence[Episode], cfg: Config, out_dir: Path, *,
            on_step: Callable[[int], None] | None = None) -> TrainResult:
    """RFT: SFT on the resolved episodes. No resolved episode: the model is returned unchanged."""
    chosen = [e for e in prepare(episodes, cfg.guidance.mode) if e.resolved and e.num_actions]
    if not chosen:
        return TrainResult(Path(model_dir), [])
    return _sft("rft", Path(model_dir), chosen, cfg, Path(out_dir), on_step)


def _policy_loss_fn(cfg: Config, steps, old, sizes, ref=None):
    a = cfg.algorithm
    counts = [sum(b.num_actions for b in batches) for batches in steps]

    def loss_fn(k, j, b, logp):
        dev = logp.device
        old_lp, mask, adv = old[k - 1][j].to(dev), b.loss_mask.to(dev), b.advantages.to(dev)
        if a.name == "grpo":
            loss, m = grpo_loss(logp, old_lp, adv, mask, seq_ids=b.seq_ids.to(dev),
                                num_seqs=sizes[k - 1], clip_low=a.clip_low, clip_high=a.clip_high)
        else:
            ref_lp = ref[k - 1][j].to(dev) if ref is not None else None
            loss, m = dapo_loss(logp, old_lp, adv, mask, num_tokens=counts[k - 1],
                                clip_low=a.clip_low, clip_high=a.clip_high,
                                ref_logprobs=ref_lp, kl_coef=a.kl_coef)
        return loss, {**m, **mismatch_metrics(old[k - 1][j], b.sampler_logprobs, b.loss_mask)}
    return loss_fn


def _reference_logprobs(ref_model_dir: Path, steps, device) -> list[list[torch.Tensor]]:
    """Log-probs of a frozen reference model on every packed row (for the k3 KL term)."""
    from trainer.engine_torch import load_model
    from trainer.forward import packed_logprobs
    model = load_model(ref_model_dir, device, grad_checkpointing=False).eval()
    with torch.no_grad():
        return [[packed_logprobs(model, b)[0].cpu() for b in batches] for batches in steps]


def run_dapo(model_dir: Path, episodes: Sequence[Episode], cfg: Config, out_dir: Path, *,
             on_step: Callable[[int], None] | None = None,
             ref_model_dir: Path | None = None) -> TrainResult:
    """DAPO (or GRPO) update on episodes that carry their advantages.

    With `algorithm.kl_coef > 0` the k3 KL is taken against `ref_model_dir` (default: model_dir,
    the policy this iteration started from).
    """
    t = cfg.trainer
    eps = [e for e in prepare(episodes, cfg.guidance.mode) if e.num_actions]
    if not eps:
        return TrainResult(Path(model_dir), [])
    per_step = math.ceil(len(eps) / max(t.minibatches, 1))
    plan = step_plan(len(eps), per_step, t.epochs, t.seed)
    steps = _pack_plan(eps, plan, t)
    phase = "grpo" if cfg.algorithm.name == "grpo" else "dapo"
    run = _open(phase, model_dir, cfg, out_dir, lr=t.lr, total_steps=len(steps),
                schedule="constant", on_step=on_step)
    old = _cached(Path(out_dir) / "old_logprobs.pt", lambda: _no_grad_logprobs(run.engine, steps))
    ref = None
    if cfg.algorithm.kl_coef:
        ref = _cached(Path(out_dir) / "ref_logprobs.pt", lambda: _reference_logprobs(
            Path(ref_model_dir or model_dir), steps, next(run.engine.model.parameters()).device))
    return _train(run, steps, _policy_loss_fn(cfg, steps, old, [len(i) for i in plan], ref))


def _pair_steps(pairs, cfg: Config):
    """Per step: the flat episode list [c0, r0, c1, r1, ...] packed with pairs kept together."""
    t = cfg.trainer
    plan = step_plan(len(pairs), t.dpo_batch_pairs, t.epochs, t.seed)
    flats = [[e for i in idx for e in pairs[i]] for idx in plan]
    return plan, [pack(f, t.pack_tokens, groups=[[2 * p, 2 * p + 1] for p in range(len(f) // 2)],
                       share_prefix=t.share_prefix) for f in flats]


def _sequence_sums(logp: torch.Tensor, b: PackedBatch) -> dict[int, torch.Tensor]:
    """Per local episode index in the row: the sum of its action-token log-probs."""
    mask = b.loss_mask.to(logp.device)
    ids = b.seq_ids.to(logp.device)
    sums = torch.zeros(int(ids.max()) + 1, device=logp.device).index_add(0, ids, logp * mask)
    return {i: sums[i] for i in b.episodes}


def run_dpo(model_dir: Path, pairs: Sequence[tuple[Episode, Episode]], cfg: Config,
            out_dir: Path, *, on_step: Callable[[int], None] | None = None) -> TrainResult:
    """Agent-RLVR: optional SFT warm-up on the chosen episodes, then DPO on the pairs."""
    mode = cfg.guidance.mode
    pairs = [(c, r) for c, r in ((prepare([c], mode)[0], prepare([r], mode)[0]) for c, r in pairs)
             if c.num_actions and r.num_actions]
    if not pairs:
        return TrainResult(Path(model_dir), [])
    warm_rows: list[dict] = []
    if cfg.trainer.dpo_sft_warmup:
        warm = _sft("sft", Path(model_dir), [c for c, _ in pairs], cfg, Path(out_dir) / "sft", None)
        model_dir, warm_rows = warm.checkpoint, warm.metrics
    plan, steps = _pair_steps(pairs, cfg)
    run = _open("dpo", model_dir, cfg, Path(out_dir) / "dpo", lr=cfg.trainer.lr,
                total_steps=len(steps), schedule="constant", on_step=on_step)
    ref = _cached(Path(out_dir) / "dpo" / "ref_logprobs.pt", lambda: [
        [{i: float(v) for i, v in _sequence_sums(lp, b).items()} for lp, b in zip(lps, bs)]
        for lps, bs in zip(_no_grad_logprobs(run.engine, steps), steps)])

    def loss_fn(k, j, b, logp):
        sums, r = _sequence_sums(logp, b), ref[k - 1][j]
        chosen = [i for i in b.episodes if i % 2 == 0]
        pick = lambda src, off: torch.stack([torch.as_tensor(src[i + off]) for i in chosen])  # noqa: E731
        return dpo_loss(pick(sums, 0), pick(sums, 1), pick(r, 0).to(logp.device),
                        pick(r, 1).to(logp.device), beta=cfg.algorithm.dpo_beta,
                        num_pairs=len(plan[k - 1]))
    result = _train(run, steps, loss_fn)
    return TrainResult(result.checkpoint, warm_rows + result.metrics)
