"""Does a small policy learn? Base model vs warm-up (SFT on expert trajectories) vs one RFT pass.

The ladder, each stage measured with the hf engine at temperature 1.0 (Nebius's sampling):
1. `base`: the model as given.
2. `sft`: SFT on expert trajectories of the *train* split (agent.expert: the gold fix replayed
   through the real loop in the policy's own tokens), with `--sft-lr` / `--sft-epochs`.
3. `rft`: the warmed-up model rolls out `algorithm.group_size` episodes per train instance; its
   own resolved episodes are SFT'd once at `trainer.rft_lr` (Nebius RFT).
Each stage is evaluated on the held-out test split (`eval.runs` samples per instance: pass@1 is
their mean) and, with `--train-eval`, on the train split (the signal RL would see).

Per row: format-error rate (malformed turns / turns), submit rate, mean turns, patch rate
(submitted with a non-empty diff), pass@1 and the instances resolved at least once.

    python -m bench.warmup --model MODEL_DIR --work SCRATCH_DIR --config configs/ladder.yaml \
        [--stages base,sft,rft] [--seeds 0] [--sft-lr 1e-4] [--sft-epochs 3] [--train-eval] \
        [agent.scaffold=bash agent.one_shot_demo=true eval.runs=2 ...]

Simplifications: one seed gives one sampling stream per stage (the Batcher's batches follow thread
timing, so reruns differ slightly); evaluation reuses the rollout runner and grading in-process
instead of the Prefect flow; no DAPO stage (RFT is where the signal first shows).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import statistics
import time
from pathlib import Path

COLUMNS = ("stage", "seed", "split", "episodes", "fmt_err", "submit", "turns", "patch",
           "pass@1", "solved", "minutes")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="HF model dir (e.g. agent.models.convert_smollm2)")
    p.add_argument("--work", required=True, help="scratch dir for checkpoints, repos and results")
    p.add_argument("--config", default=None, help="YAML config (e.g. configs/ladder.yaml)")
    p.add_argument("--stages", default="base,sft,rft", help="comma list of base, sft, rft")
    p.add_argument("--seeds", default="0", help="comma list of seeds (sampling and trainer)")
    p.add_argument("--sft-lr", type=float, default=None, help="warm-up LR (default trainer.rft_lr)")
    p.add_argument("--sft-epochs", type=int, default=None, help="warm-up epochs (default trainer.rft_epochs)")
    p.add_argument("--expert-samples", type=int, default=1, help="expert episodes per train instance")
    p.add_argument("--train-eval", action="store_true", help="also evaluate on the train split")
    p.add_argument("--tiers", default="", help="restrict train and test to these difficulties")
    p.add_argument("--test-limit", type=int, default=0, help="evaluate on at most N test instances")
    p.add_argument("--sft-model", default="", help="skip the warm-up and use this checkpoint")
    p.add_argument("overrides", nargs="*", help="dotted config overrides, e.g. agent.max_turns=8")
    return p.parse_args(argv)


def episode_stats(trajs, reports) -> dict:
    """Per-episode rates over one evaluation (reports in the same order as trajs)."""
    turns = sum(t.turns for t in trajs)
    resolved_by: dict[str, list[bool]] = {}
    for t, r in zip(trajs, reports):
        resolved_by.setdefault(t.instance_id, []).append(bool(r.resolved))
    n = max(len(trajs), 1)
    return {"episodes": len(trajs),
            "fmt_err": sum(t.format_errors for t in trajs) / max(turns, 1),
            "submit": sum(t.termination == "submitted" for t in trajs) / n,
            "turns": turns / n,
            "patch": sum(bool(t.patch.strip()) for t in trajs) / n,
            "pass@1": statistics.mean(statistics.mean(v) for v in resolved_by.values()) if trajs else 0.0,
            "solved": sum(any(v) for v in resolved_by.values()),
            "terminations": {k: sum(t.termination == k for t in trajs)
                             for k in sorted({t.termination for t in trajs})}}


def rollout_and_grade(engine, instances, cfg, store, samples: int, seed: int):
    from agent.runner import run_rollouts
    from sandbox.grading import grade_many

    workers = max(cfg.orchestration.max_workers, len(instances) * samples)  # everyone in one batch
    trajs = run_rollouts(instances, engine, cfg.agent, cfg.sandbox, store, group_size=samples,
                         iteration=0, workers=workers, seed=seed, max_batch=cfg.engine.max_batch,
                         temperature=cfg.engine.temperature, progress=False)
    by_id = {i.instance_id: i for i in instances}
    reports = grade_many([(by_id[t.instance_id], t.patch) for t in trajs], cfg.sandbox, store,
                         cfg.orchestration.max_workers, progress=False)
    return trajs, reports


def evaluate(model_dir, splits: dict, cfg, store, seed: int, stage: str, log_rows: list,
             out: Path) -> dict:
    """Roll out and grade `model_dir` on each split; {split: (trajs, reports)}. Rollouts are saved
    under `out` for inspection."""
    from agent.engines import make_engine
    from agent.runner import write_rollouts

    engine = make_engine(dataclasses.replace(cfg.engine, model=str(model_dir), seed=seed))
    kept = {}
    for split, (instances, samples) in splits.items():
        began = time.monotonic()
        trajs, reports = rollout_and_grade(engine, instances, cfg, store, samples, seed)
        row = {"stage": stage, "seed": seed, "split": split, **episode_stats(trajs, reports),
               "minutes": (time.monotonic() - began) / 60}
        log_rows.append(row)
        print(fmt_row(row), "  ", row["terminations"], flush=True)
        kept[split] = (trajs, reports)
        write_rollouts(out / f"{stage}_{split}.parquet", trajs)
    return kept


def warm_up(model_dir, train, cfg, store, args, seed: int, out: Path):
    """Expert trajectories of the train split -> SFT; returns (checkpoint, minutes, metrics)."""
    from agent.engines.served import release_all
    from agent.expert import expert_trajectories
    from trainer.episodes import expert_episodes
    from trainer.loops import run_rft

    began = time.monotonic()
    trajs = expert_trajectories(train, model_dir, cfg.agent, cfg.sandbox, store,
                                samples=args.expert_samples, workers=cfg.orchestration.max_workers,
                                style=cfg.orchestration.expert_style)
    episodes = expert_episodes([t.to_row() for t in trajs])
    tokens = sum(len(e.token_ids) for e in episodes)
    actions = sum(e.num_actions for e in episodes)
    t = dataclasses.replace(cfg.trainer, seed=seed,
                            rft_lr=args.sft_lr if args.sft_lr is not None else cfg.trainer.rft_lr,
                            rft_epochs=args.sft_epochs if args.sft_epochs is not None
                            else cfg.trainer.rft_epochs)
    collect_min = (time.monotonic() - began) / 60
    release_all()   # an inference server of the evaluation gives its memory to the trainer
    result = run_rft(Path(model_dir), episodes, dataclasses.replace(cfg, trainer=t), out / "sft",
                     on_step=lambda k: print(f"  sft step {k} at {(time.monotonic() - began) / 60:.1f} min",
                                             flush=True))
    minutes = (time.monotonic() - began) / 60
    losses = [round(r["loss"], 3) for r in result.metrics]
    print(f"  warm-up: {len(episodes)} expert episodes, {tokens} tokens ({actions} action), "
          f"collect {collect_min:.1f} min, total {minutes:.1f} min, lr {t.rft_lr}, epochs {t.rft_epochs}, "
          f"{len(losses)} steps, loss {losses[:2]} .. {losses[-2:]}", flush=True)
    return result.checkpoint


def rft_pass(model_dir, train_run, cfg, seed: int, out: Path):
    """Nebius RFT on the warmed-up model's own resolved train episodes (at trainer.rft_lr)."""
    from agent.engines.served import release_all
    from trainer.episodes import episodes_from_rows
    from trainer.loops import run_rft

    trajs, reports = train_run
    rollouts = [t.to_row(sample=k) for k, t in enumerate(trajs)]
    rewards = [{"episode_id": r["episode_id"], "reward_resolved": float(g.resolved),
                "reward": float(g.resolved), "advantage": 0.0, "kept": True}
               for r, g in zip(rollouts, reports)]
    episodes = episodes_from_rows(rollouts, rewards)
    chosen = sum(e.resolved for e in episodes)
    began = time.monotonic()
    t = dataclasses.replace(cfg.trainer, seed=seed, rft_epochs=1)
    release_all()   # as in warm_up
    result = run_rft(Path(model_dir), episodes, dataclasses.replace(cfg, trainer=t), out / "rft")
    print(f"  rft: {chosen} resolved of {len(episodes)} train episodes, "
          f"{(time.monotonic() - began) / 60:.1f} min", flush=True)
    return result.checkpoint, chosen


def fmt_row(row: dict) -> str:
    cells = []
    for key in COLUMNS:
        v = row.get(key, "")
        cells.append(f"{v:.2f}" if isinstance(v, float) else str(v))
    return " | ".join(f"{c:>8}" for c in cells)


def select(instances, tiers: str, limit: int = 0):
    keep = [i for i in instances if not tiers or i.difficulty in tiers.split(",")]
    return keep[:limit] if limit else keep


def main(argv=None) -> list[dict]:
    import torch

    from swe_rlvr.builtin import load_builtin
    from swe_rlvr.config import load_config, to_dict

    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    cfg = load_config(args.config, args.overrides)
    torch.set_num_threads(max(cfg.engine.torch_threads, 1))
    work = Path(args.work)
    store = work / "repos"
    sandbox = dataclasses.replace(cfg.sandbox, workdir=cfg.sandbox.workdir or str(work / "sandboxes"),
                                  env_cache=cfg.sandbox.env_cache or str(work / "envs"))
    cfg = dataclasses.replace(cfg, sandbox=sandbox)
    train = select(load_builtin(cfg.instances.train_split), args.tiers)
    test = select(load_builtin(cfg.eval.split), args.tiers, args.test_limit)
    stages = args.stages.split(",")
    print(json.dumps({"agent": to_dict(cfg.agent), "trainer": to_dict(cfg.trainer),
                      "args": {k: v for k, v in vars(args).items() if k != "overrides"},
                      "overrides": args.overrides}))
    print(" | ".join(f"{c:>8}" for c in COLUMNS))
    rows: list[dict] = []
    for seed in [int(s) for s in args.seeds.split(",")]:
        out = work / f"seed{seed}"
        splits = {"test": (test, cfg.eval.runs)}
        if "base" in stages:
            evaluate(args.model, {**splits, **({"train": (train, 1)} if args.train_eval else {})},
                     cfg, store, seed, "base", rows, out)
        if "sft" not in stages and "rft" not in stages:
            continue
        warm = args.sft_model or warm_up(args.model, train, cfg, store, args, seed, out)
        wanted = {**splits, "train": (train, cfg.algorithm.group_size)} if (
            args.train_eval or "rft" in stages) else splits
        runs = evaluate(warm, wanted, cfg, store, seed, "sft", rows, out)
        if "rft" in stages:
            ckpt, chosen = rft_pass(warm, runs["train"], cfg, seed, out)
            if chosen:
                evaluate(ckpt, {**splits, **({"train": (train, 1)} if args.train_eval else {})},
                         cfg, store, seed, "rft", rows, out)
    (work / "results.json").parent.mkdir(parents=True, exist_ok=True)
    (work / "results.json").write_text(json.dumps(rows, indent=1))
    return rows


if __name__ == "__main__":
    main()
