"""One tiny RL iteration on a device, without Prefect: rollout -> validate -> reward -> update.

    python infra/gpu/e2e_check.py --model DIR --device cuda --work DIR    # step `e2e` of check.sh

The stage tasks (`tasks/`) are Prefect adapters, and Prefect does not travel to the GPU machine,
so this calls the libraries their bodies call, in their order, and passes the rows through the
same versioned Parquet artifacts (`tasks.store`):
- rollout: each of `--instances` built-in instances gets a group of two episodes, one sampled by
  the real `hf` engine on `engine.device` (the tiny random model's replies, cut at `--new-tokens`,
  are malformed: two end its episode), one by the package's scripted `gold` policy (it
  resolves), both through the real agent loop and sandbox;
- validate: `sandbox.grading.grade_many` with the hidden tests;
- reward: `trainer.scoring.reward_rows`, so each group has a signal and DAPO keeps it;
- update: `trainer.launch.train("dapo", ...)` on `trainer.device` (compiled layers on CUDA);
- then the engine loads the new checkpoint and samples once more (the weight sync).
It fails unless every episode was graded without an infrastructure failure, the gold episodes
resolved, the update trained on kept episodes to a finite loss and changed the weights, and the
reloaded engine samples. Simplifications: no guidance stage, no MLflow, one iteration.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE))


def config(model: Path, device: str, work: Path):
    from swe_rlvr.config import load_config
    return load_config(overrides=[
        "engine.name=hf", f"engine.model={model}", f"engine.device={device}",
        f"trainer.device={device}", "algorithm.name=dapo", "algorithm.group_size=2",
        "agent.max_turns=8", "agent.max_new_tokens=256", "agent.context_tokens=8192",
        "trainer.lr=1e-4", f"sandbox.workdir={work / 'sandbox'}",
        # the GPU image has Python 3.12 alone; the built-in instances pin 3.11 and run on 3.12
        "sandbox.python_fallback=true",
        f"sandbox.env_cache={work / 'envs'}", f"orchestration.run_root={work / 'runs'}"])


def rollout(instances, model: Path, cfg, repo_store: Path, workers: int, new_tokens: int):
    """ROLLOUTS rows: sample 0 of each group by the hf engine, sample 1 by the gold script."""
    from transformers import AutoTokenizer

    from agent.engines import make_engine
    from agent.runner import run_rollouts
    from agent.scripted import ScriptedPolicy
    engine = make_engine(dataclasses.replace(cfg.engine, model=str(model)))
    gold = ScriptedPolicy(AutoTokenizer.from_pretrained(model), instances, variant="gold",
                          scaffold=cfg.agent.scaffold)
    noise = dataclasses.replace(cfg.agent, max_new_tokens=new_tokens, max_format_errors=2)
    rows = []
    for sample, (policy, agent) in enumerate(((engine, noise), (gold, cfg.agent))):
        trajs = run_rollouts(instances, policy, agent, cfg.sandbox, repo_store, 1, 0,
                             workers=workers, seed=cfg.engine.seed, max_batch=cfg.engine.max_batch,
                             temperature=cfg.engine.temperature, progress=False)
        rows += [t.to_row(sample=sample, policy_version=0) for t in trajs]
    return engine, rows


def validate(rows, instances, cfg, repo_store: Path, workers: int) -> list[dict]:
    from sandbox.grading import grade_many
    by_id = {i.instance_id: i for i in instances}
    items = [(by_id[r["instance_id"]], r["patch"], r["episode_id"]) for r in rows]
    return [r.to_row() for r in grade_many(items, cfg.sandbox, repo_store, workers, progress=False)]


def roundtrip(run: Path, name: str, rows: list[dict]) -> list[dict]:
    """Write `rows` as the versioned artifact `name` and read them back (schema checked)."""
    from tasks import store
    url = str(run / f"{name}.parquet")
    store.write_table(url, name, rows)
    return store.read_rows(url, name)


def changed(before: Path, after: Path) -> bool:
    from safetensors.torch import load_file
    a, b = load_file(before / "model.safetensors"), load_file(after / "model.safetensors")
    return any(not a[k].equal(b[k].to(a[k].dtype)) for k in a)


def iteration(args) -> list[str]:
    """Run the chain; the list of what went wrong (empty: it passed)."""
    from engine_check import tiny_model

    from agent.engines.base import SamplingParams
    from swe_rlvr.builtin import load_builtin
    from trainer.episodes import episodes_from_rows
    from trainer.launch import train
    from trainer.scoring import reward_rows
    work = args.work.resolve()
    model = tiny_model(args.model.resolve())
    cfg, run, repos = config(model, args.device, work), work / "runs" / "iter_0", work / "repos"
    instances = load_builtin("train", kind="handwritten")[:args.instances]
    clock = Clock()
    from sandbox.isolation import choose_level
    print(f"sandbox isolation: {choose_level(cfg.sandbox.isolation)}", flush=True)
    engine, rows = clock("rollout", rollout, instances, model, cfg, repos, args.workers,
                         args.new_tokens)
    for r in rows:
        print(f"episode {r['episode_id']}: sample {r['sample']}, {len(r['token_ids'])} tokens, "
              f"{r['turns']} turns, termination {r['termination']!r}"
              + (f", error {r['error'][:300]!r}" if r["error"] else ""), flush=True)
    rollouts = roundtrip(run, "rollouts", rows)
    grades = roundtrip(run, "validations",
                       clock("validate", validate, rollouts, instances, cfg, repos, args.workers))
    rewards = roundtrip(run, "rewards", clock(
        "reward", reward_rows, rollouts, grades, cfg.reward, cfg.algorithm,
        cfg.agent.context_tokens, cfg.guidance.mode))
    episodes = episodes_from_rows(rollouts, rewards, kept_only=True)
    result = clock("update", train, "dapo", model, episodes, cfg, work / "update")
    clock("reload", engine.load_weights, str(result.checkpoint))
    prompt = next((r["token_ids"][:32] for r in rows if r["token_ids"]),
                  engine.tokenizer.encode("def add(a, b):"))
    again = engine.generate([prompt], SamplingParams(max_new_tokens=8, seed=1))
    print(clock.line(), flush=True)
    graded = {g["episode_id"]: g for g in grades}
    infra = [f"{e}: {g['infra_reason']}" for e, g in graded.items() if g["infra_failure"]]
    gold = [r["episode_id"] for r in rollouts if r["sample"] == 1]
    losses = [m["loss"] for m in result.metrics if m.get("loss") is not None]
    print(f"{len(rollouts)} episodes ({len(gold)} gold), {sum(g['resolved'] for g in grades)} "
          f"resolved, {len(episodes)} kept for the update; {len(result.metrics)} optimiser steps "
          f"on {args.device}, losses {[round(x, 4) for x in losses]}; checkpoint "
          f"{result.checkpoint.name}")
    broken = [f"episode {r['episode_id']} ended in error: {r['error'][:200]}"
              for r in rollouts if r["error"] and not r["token_ids"]]
    return (broken + [f"infrastructure failure in grading: {x}" for x in infra]
            + [f"gold episode {e} did not resolve" for e in gold if not graded[e]["resolved"]]
            + (["no episode was kept for the update"] if not episodes else [])
            + (["the update logged no finite loss"]
               if not losses or not all(map(math.isfinite, losses)) else [])
            + (["the update left the weights unchanged"]
               if result.checkpoint.resolve() == model or not changed(model, result.checkpoint)
               else [])
            + (["the reloaded engine sampled nothing"] if not again[0].token_ids else []))


class Clock:
    """Calls a stage and keeps its wall time."""

    def __init__(self) -> None:
        self.times: dict[str, float] = {}

    def __call__(self, name: str, fn, *args):
        start = time.perf_counter()
        try:
            return fn(*args)
        finally:
            self.times[name] = time.perf_counter() - start

    def line(self) -> str:
        return "stage seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in self.times.items())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", type=Path, required=True, help="tiny model dir (built if missing)")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                   help="engine.device and trainer.device")
    p.add_argument("--work", type=Path, required=True, help="scratch dir (runs, sandboxes, repos)")
    p.add_argument("--instances", type=int, default=2, help="built-in train instances")
    p.add_argument("--workers", type=int, default=2, help="parallel episodes and gradings")
    p.add_argument("--new-tokens", type=int, default=128, help="hf engine tokens per reply")
    p.add_argument("--wheels", type=Path,
                   help="build the instances' environments from this wheel folder alone "
                        "(PIP_NO_INDEX, PIP_FIND_LINKS): the GPU machine reaches no index")
    args = p.parse_args(argv)
    if args.wheels:
        os.environ.update(PIP_NO_INDEX="1", PIP_FIND_LINKS=str(args.wheels.resolve()))
    import torch
    if args.device == "cuda" and not torch.cuda.is_available():
        print("e2e_check: --device cuda but torch sees no CUDA GPU; use --device cpu")
        return 2
    problems = iteration(args)
    for problem in problems:
        print("FAIL:", problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
