"""Update loops: RFT/SFT, DAPO (GRPO, Dr.GRPO), DPO. Each returns the new checkpoint + metrics.

- `run_rft`: Nebius RFT, SFT on the policy's own resolved episodes (format-error turns are
  already loss-masked by the agent), `trainer.rft_epochs` (Nebius: 1), LR 5e-6, AdamW wd 0.1,
  cosine schedule.
- `run_dapo`: old log-probs are recomputed with the current weights before the first update (the
  sampler's log-probs serve only the mismatch metric), or with `trainer.old_logprobs: sampler`
  taken from the sampler where they are policy k's (`sampler_is_policy`), then
  `trainer.minibatches` optimiser steps per epoch (Nebius: 1 epoch, LR 1e-6, grad clip 1.0, no
  KL). `algorithm.loss_agg` picks DAPO's token mean, GRPO's sequence mean or Dr.GRPO's
  constant-length sum (`algorithm.name: grpo` needs one of the latter two); SFT follows the same
  setting.
- `run_dpo`: Agent-RLVR, SFT warm-up on the chosen (guided, resolved) episodes, then DPO on the
  (chosen, rejected) pairs against the warmed-up model as reference, at `trainer.lr`.
Guidance is stripped from the context unless `guidance.mode` is `keep`, and every episode loses
the tokens after its last action (`trim_tail`: no loss and no effect on earlier log-probs).

Each loop reads the same way: plan the steps, pack each step's episodes into rows (no padding),
compute the step's `Normaliser` from all its rows, open the engine, compute what the loss needs
that the engine must forward first (old or reference log-probs), build the `MicroBatch`es, and
hand them with a step loss to `trainer.steps.train`. With `trainer.save_every` a resumable
checkpoint lands in `out_dir/checkpoints/step_k`; calling the same function again with the same
arguments resumes after the newest one, bitwise-identically on CPU. Old and reference log-probs
are saved next to it, so a resumed run does not recompute them with moved weights. Under a
launcher (`trainer.launch`) the same loops run on every rank. Left out: value models,
multi-epoch PPO reuse tricks, sampler-mismatch correction.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from swe_rlvr import precision
from swe_rlvr.config import Config, TrainerConfig
from trainer.episodes import Episode, strip_guidance, trim_tail
from trainer.losses import Normaliser
from trainer.microbatch import MicroBatch, dpo_step_loss, pair_logprobs, policy_step_loss, sft_step_loss
from trainer.packing import pack
from trainer.steps import ENGINES, Rows, Run, Steps, TrainResult, cached, no_grad_logprobs, open_run, own_rows, train

__all__ = ["ENGINES", "TrainResult", "aggregation", "attach", "micro_batches", "prepare",
           "run_dapo", "run_dpo", "run_rft", "step_normalisers", "step_plan"]

Pairs = list[tuple[int, int]]
"""(chosen, rejected) indices into one step's flat episode list."""


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


def _pack_plan(episodes: Sequence[Episode], plan: list[list[int]], t: TrainerConfig) -> Rows:
    """Per optimiser step of the plan: its episodes packed into rows (trainer.pack_tokens,
    trainer.share_prefix)."""
    return [pack([episodes[i] for i in idx], t.pack_tokens, share_prefix=t.share_prefix)
            for idx in plan]


def aggregation(cfg: Config) -> str:
    """`algorithm.loss_agg`, refused where it contradicts `algorithm.name` (grpo: per sequence)."""
    a = cfg.algorithm
    if a.name == "grpo" and a.loss_agg == "token_mean":
        raise ValueError("algorithm.name grpo averages per sequence, but algorithm.loss_agg is "
                         "token_mean; set algorithm.loss_agg=seq_mean (GRPO) or "
                         "seq_mean_token_sum_norm (Dr.GRPO), or algorithm.name=dapo.")
    return a.loss_agg


def step_normalisers(cfg: Config, rows: Rows, plan: list[list[int]]) -> list[Normaliser]:
    """Per optimiser step: the aggregation and the whole step's action-token and sequence counts
    (all its rows, whichever rank runs them)."""
    mode = aggregation(cfg)
    return [Normaliser(mode, num_tokens=sum(b.num_actions for b in step), num_seqs=len(idx),
                       max_len=cfg.agent.context_tokens) for step, idx in zip(rows, plan)]


def micro_batches(rows: Rows, own: list[list[int | None]], norms: list[Normaliser]) -> Steps:
    """Per step: a MicroBatch for each of this rank's rows (`own`), with the step's normaliser."""
    return [[MicroBatch.of(step[0 if j is None else j], norm, filler=j is None) for j in js]
            for step, js, norm in zip(rows, own, norms)]


def attach(steps: Steps, **fields: list[list]) -> Steps:
    """The micro-batches with each field set from its per-step, per-micro-batch values."""
    return [[dataclasses.replace(mb, **{name: v[k][i] for name, v in fields.items()})
             for i, mb in enumerate(step)] for k, step in enumerate(steps)]


def _sft(phase: str, model_dir: Path, episodes: list[Episode], cfg: Config, out_dir: Path,
         on_step) -> TrainResult:
    t = cfg.trainer
    plan = step_plan(len(episodes), t.sft_batch_size, t.rft_epochs, t.seed)
    rows = _pack_plan(episodes, plan, t)
    norms = step_normalisers(cfg, rows, plan)
    run = open_run(phase, model_dir, cfg, out_dir, lr=t.rft_lr, total_steps=len(rows),
                   schedule=t.schedule, on_step=on_step)
    return train(run, micro_batches(rows, own_rows(run, rows), norms), sft_step_loss)


def run_rft(model_dir: Path, episodes: Sequence[Episode], cfg: Config, out_dir: Path, *,
            on_step: Callable[[int], None] | None = None) -> TrainResult:
    """RFT: SFT on the resolved episodes. No resolved episode: the model is returned unchanged."""
    chosen = [e for e in prepare(episodes, cfg.guidance.mode) if e.resolved and e.num_actions]
    if not chosen:
        return TrainResult(Path(model_dir), [])
    return _sft("rft", Path(model_dir), chosen, cfg, Path(out_dir), on_step)


def sampler_is_policy(cfg: Config, same_context: list[bool]) -> list[bool]:
    """Per episode: may its sampler log-probs stand for policy k's (trainer.old_logprobs=sampler,
    a real sampler at temperature 1 with the trainer's numerics, and the context it sampled in is
    the one trained on)?"""
    usable = (cfg.trainer.old_logprobs == "sampler" and cfg.engine.temperature == 1.0
              and same_numerics(cfg))
    return [usable and same for same in same_context]


def same_numerics(cfg: Config) -> bool:
    """Do the sampler and the trainer compute log-probs alike: fp32 weights on both sides, no
    autocast? A bf16 sampler's log-probs differ from fp32's by ~1e-3 per token (up to ~6e-3, the
    GPU engine check), so they are recomputed (a no-grad forward), not trusted as policy k's.
    Both dtypes follow `swe_rlvr.precision`'s rules."""
    return (precision.compute_dtype(cfg.trainer) == "float32"
            and precision.sampling_dtype(cfg.engine) == "float32")


def old_logprobs(run: Run, steps: Steps, plan: list[list[int]],
                 exact: list[bool]) -> list[list[torch.Tensor]]:
    """Per step, per micro-batch: policy k's (T,) log-probs on its row, the sampler's where every
    episode of the row has exact ones (`exact`, by episode index), else a no-grad forward."""
    def one(k: int, mb) -> torch.Tensor:
        if not mb.filler and all(exact[plan[k][j]] for j in mb.row.episodes):
            return mb.sampler_logprobs
        return no_grad_logprobs(run, [[mb]])[0][0]
    return [[one(k, mb) for mb in step] for k, step in enumerate(steps)]


def _reference_logprobs(run: Run, ref_model_dir: Path, steps: Steps) -> list[list[torch.Tensor]]:
    """Log-probs of a frozen reference model on this rank's rows (for the k3 KL term)."""
    from trainer.engine_torch import load_model
    from trainer.forward import packed_logprobs
    model = load_model(ref_model_dir, run.engine.device, grad_checkpointing=False,
                       attention=run.cfg.trainer.attention).eval()
    with torch.no_grad():
        return [[packed_logprobs(model, mb.row)[0].cpu() for mb in step] for step in steps]


def run_dapo(model_dir: Path, episodes: Sequence[Episode], cfg: Config, out_dir: Path, *,
             on_step: Callable[[int], None] | None = None,
             ref_model_dir: Path | None = None) -> TrainResult:
    """DAPO (or GRPO, Dr.GRPO) update on episodes that carry their advantages.

    With `algorithm.kl_coef > 0` the k3 KL is taken against `ref_model_dir` (default: model_dir,
    the policy this iteration started from).
    """
    t, a = cfg.trainer, cfg.algorithm
    kept = [(e, p) for e, p in zip(episodes, prepare(episodes, cfg.guidance.mode)) if p.num_actions]
    if not kept:
        return TrainResult(Path(model_dir), [])
    eps = [p for _, p in kept]
    plan = step_plan(len(eps), math.ceil(len(eps) / max(t.minibatches, 1)), t.epochs, t.seed)
    rows = _pack_plan(eps, plan, t)
    norms = step_normalisers(cfg, rows, plan)
    run = open_run("grpo" if a.name == "grpo" else "dapo", model_dir, cfg, out_dir, lr=t.lr,
                   total_steps=len(rows), schedule="constant", on_step=on_step)
    steps = micro_batches(rows, own_rows(run, rows), norms)
    exact = sampler_is_policy(cfg, [e.guidance_span is None or cfg.guidance.mode == "keep"
                                    for e, _ in kept])
    old = cached(run, "old_logprobs.pt", lambda: old_logprobs(run, steps, plan, exact))
    steps = attach(steps, old_logprobs=old)
    if a.kl_coef:
        ref = cached(run, "ref_logprobs.pt", lambda: _reference_logprobs(
            run, Path(ref_model_dir or model_dir), steps))
        steps = attach(steps, ref_logprobs=ref)
    loss = functools.partial(policy_step_loss, clip_low=a.clip_low, clip_high=a.clip_high,
                             kl_coef=a.kl_coef)
    return train(run, steps, loss)


def _pair_rows(pairs: Sequence[tuple[Episode, Episode]],
               cfg: Config) -> tuple[list[list[int]], Rows, list[Pairs]]:
    """Per step: its pairs' episodes as one flat list packed with each pair in one row, and
    which flat indices are (chosen, rejected)."""
    t = cfg.trainer
    plan = step_plan(len(pairs), t.dpo_batch_pairs, t.epochs, t.seed)
    rows, roles = [], []
    for idx in plan:
        flat: list[Episode] = []
        step_roles: Pairs = []
        for i in idx:
            step_roles.append((len(flat), len(flat) + 1))
            flat += pairs[i]
        rows.append(pack(flat, t.pack_tokens, groups=[list(p) for p in step_roles],
                         share_prefix=t.share_prefix))
        roles.append(step_roles)
    return plan, rows, roles


def _with_pairs(steps: Steps, roles: list[Pairs], sizes: list[int]) -> Steps:
    """The micro-batches with the (chosen, rejected) roles of the pairs their rows hold, and
    the step's number of pairs."""
    def fields(mb: MicroBatch, step_roles: Pairs, n: int) -> dict:
        held = [(c, r) for c, r in step_roles if c in mb.row.episodes]
        return {"chosen": tuple(c for c, _ in held), "rejected": tuple(r for _, r in held),
                "num_pairs": n}
    return [[dataclasses.replace(mb, **fields(mb, step_roles, n)) for mb in step]
            for step, step_roles, n in zip(steps, roles, sizes)]


def _reference_pairs(run: Run, steps: Steps) -> dict[str, list[list[torch.Tensor]]]:
    """The reference's (the model before DPO) sequence log-probs of each micro-batch's pairs."""
    sums = [[pair_logprobs(lp, mb) for mb, lp in zip(step, lps)]
            for step, lps in zip(steps, no_grad_logprobs(run, steps))]
    return {"ref_chosen": [[c for c, _ in step] for step in sums],
            "ref_rejected": [[r for _, r in step] for step in sums]}


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
    plan, rows, roles = _pair_rows(pairs, cfg)
    run = open_run("dpo", model_dir, cfg, Path(out_dir) / "dpo", lr=cfg.trainer.lr,
                   total_steps=len(rows), schedule="constant", on_step=on_step)
    norms = [Normaliser() for _ in rows]      # DPO's mean is over the step's pairs (`num_pairs`)
    steps = _with_pairs(micro_batches(rows, own_rows(run, rows), norms), roles,
                        [len(idx) for idx in plan])
    ref = cached(run, "ref_pair_logprobs.pt", lambda: _reference_pairs(run, steps))
    steps = attach(steps, **ref)
    loss = functools.partial(dpo_step_loss, beta=cfg.algorithm.dpo_beta)
    result = train(run, steps, loss)
    return TrainResult(result.checkpoint, warm_rows + result.metrics)
