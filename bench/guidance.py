"""Agent-RLVR's guidance ablation: the same short training with guidance off and on, per mode.

Every arm is one `flows.api.train` run (RL iterations with their evaluations; no RFT warm-up) on
the built-in suite with fixed seeds, differing only in `guidance.enabled` and `guidance.mode`:
- `strip`: RFT on resolved episodes, guided ones with the hint cut out of the context;
- `keep`:  RFT on resolved episodes, guided ones with the hint kept in context;
- `pairs`: DPO (after an SFT warm-up) on (guided success, unguided failure) pairs.
With guidance off, `strip` and `keep` train on the same unguided episodes (no hint to cut or
keep), and `pairs` has no pairs, so its policy does not change: the off arms are the baselines.

Printed per (policy, mode): the train resolve rate (unguided episodes, mean over iterations), the
guided recovery rate (failed instances that a guided re-attempt resolved, mean over iterations;
"-" with guidance off), held-out pass@1 of the initial and of the final policy, and the on/off
ratio of each. Policies: `hf` samples the model (a tiny random Qwen2 unless --model is given, e.g.
SmolLM2 from `swe-rlvr model smollm2`); `scripted:weak` is the sanity arm (`--sanity`): it fixes
an instance only when a hint names the file, so its recovery must be 1.0 with guidance on, while
its held-out pass@1 stays 0 whatever the training (its replies ignore the weights, so it runs in
`--sanity-modes`, pairs by default, only). Learning rates are raised (RFT/SFT 1e-4, DPO 1e-5) so
that one short iteration can move a policy at all.

    .venv/bin/python bench/guidance.py --sanity                  # tiny model: ~9 min, 2 busy cores
    .venv/bin/python bench/guidance.py --model runs/.models/smollm2 --iterations 2 --limit 8
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from statistics import fmean

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

MODES = ("strip", "keep", "pairs")
ALGORITHM = {"strip": "rft", "keep": "rft", "pairs": "dpo"}
"""guidance.mode -> the update that trains on it (Agent-RLVR trains its pairs with DPO)."""
POLICY_OVERRIDES = {"scripted:weak": ["agent.max_new_tokens=2048"]}
"""The scripted edits write whole hunks in one reply: cut at --max-new-tokens they would be
format errors, so the sanity arm gets room (it costs nothing: the script is not sampled)."""
COLUMNS = ("train_resolve", "recovery", "pass1_start", "pass1_end")


def arm_overrides(policy: str, mode: str, guided: bool) -> list[str]:
    """What distinguishes one arm from the others."""
    return [f"engine.name={policy}", f"guidance.mode={mode}",
            f"guidance.enabled={str(guided).lower()}", f"algorithm.name={ALGORITHM[mode]}",
            *POLICY_OVERRIDES.get(policy, [])]


def arm_name(policy: str, mode: str, guided: bool) -> str:
    return f"{policy.replace(':', '-')}-{mode}-{'on' if guided else 'no'}"


def summarize(metrics: dict[int, dict[str, float]]) -> dict[str, float | None]:
    """A run's metrics by step -> the table's numbers (None where the run logged none)."""
    def mean_of(key: str) -> float | None:
        values = [m[key] for _, m in sorted(metrics.items()) if key in m]
        return fmean(values) if values else None
    evaluated = [m["pass1"] for _, m in sorted(metrics.items()) if "pass1" in m]
    return {"train_resolve": mean_of("train_resolve_rate"),
            "recovery": mean_of("guided_recovery_rate"),
            "pass1_start": evaluated[0] if evaluated else None,
            "pass1_end": evaluated[-1] if evaluated else None}


def ratio(on: float | None, off: float | None) -> str:
    """on/off as text: "-" when either is missing, "=" for 0/0, "inf" for x/0."""
    if on is None or off is None:
        return "-"
    if off == 0:
        return "=" if on == 0 else "inf"
    return f"{on / off:.2f}"


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def table(results: dict[tuple[str, str, bool], dict[str, float | None]]) -> str:
    """One row per (policy, mode): each column off | on | on/off."""
    head = ["policy", "mode"] + [f"{c} off|on|ratio" for c in COLUMNS]
    rows = [head]
    for policy, mode in dict.fromkeys((p, m) for p, m, _ in results):
        off, on = results.get((policy, mode, False), {}), results.get((policy, mode, True), {})
        rows.append([policy, mode] + [f"{_cell(off.get(c))} | {_cell(on.get(c))} | "
                                      f"{ratio(on.get(c), off.get(c))}" for c in COLUMNS])
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def base_overrides(args: argparse.Namespace, root: Path, model: Path) -> list[str]:
    return [f"orchestration.run_root={root}", f"orchestration.iterations={args.iterations}",
            "orchestration.rft_warmup=false", "orchestration.max_workers=1",
            "instances.source=builtin", f"instances.limit={args.limit}",
            f"sandbox.workdir={root / 'work'}", f"sandbox.env_cache={root / 'envs'}",
            f"instances.repo_store={root / 'repos'}", f"engine.model={model}",
            "engine.max_batch=1", "engine.torch_threads=1", f"engine.seed={args.seed}",
            f"trainer.seed={args.seed}", "agent.scaffold=bash", f"agent.max_turns={args.max_turns}",
            "agent.context_tokens=4096", f"agent.max_new_tokens={args.max_new_tokens}",
            f"reward.l_thr={max(1, args.max_turns - 2)}", f"reward.t_max={args.max_turns}",
            f"algorithm.group_size={args.group_size}", f"guidance.attempts={args.attempts}",
            "trainer.sft_batch_size=4", "trainer.dpo_batch_pairs=4", "trainer.pack_tokens=8192",
            "trainer.rft_lr=1e-4", "trainer.lr=1e-5", f"eval.runs={args.eval_runs}",
            f"eval.k={args.eval_runs}", f"eval.limit={args.eval_limit}", *args.overrides]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="", help="HF model dir (default: a tiny random Qwen2)")
    p.add_argument("--work", default="", help="scratch dir for runs (default: a temp dir)")
    p.add_argument("--modes", default=",".join(MODES), help="comma list of strip, keep, pairs")
    p.add_argument("--sanity", action="store_true", help="also run the scripted:weak policy")
    p.add_argument("--sanity-modes", default="pairs",
                   help="modes of the scripted:weak arms (its replies ignore the weights, so "
                        "every mode gives it the same numbers)")
    p.add_argument("--seed", type=int, default=0, help="sampling and trainer seed of every arm")
    p.add_argument("--iterations", type=int, default=1)
    p.add_argument("--limit", type=int, default=4, help="train instances per iteration")
    p.add_argument("--group-size", type=int, default=2, help="G, unguided episodes per instance")
    p.add_argument("--attempts", type=int, default=2, help="G', guided re-attempts per failure")
    p.add_argument("--eval-limit", type=int, default=4, help="held-out (test split) instances")
    p.add_argument("--eval-runs", type=int, default=1, help="evaluation runs per instance")
    p.add_argument("--max-turns", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("overrides", nargs="*", help="dotted config overrides for every arm")
    args = p.parse_args(argv)
    args.modes = [m for m in args.modes.split(",") if m]
    args.sanity_modes = [m for m in args.sanity_modes.split(",") if m]
    unknown = sorted(set(args.modes + args.sanity_modes) - set(MODES))
    if unknown:
        p.error(f"unknown mode(s) {unknown} in --modes or --sanity-modes; choose from: "
                f"{', '.join(MODES)}")
    return args


def main(argv=None) -> str:
    args = parse_args(argv)
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")  # the arms' progress lines suffice
    import torch

    import flows  # noqa: F401 - sets the ephemeral API's start-up timeout before Prefect loads
    from agent.models import build_tiny
    from flows.api import train
    torch.set_num_threads(1)
    root = Path(args.work or tempfile.mkdtemp(prefix="bench-guidance-")).resolve()
    model = Path(args.model).resolve() if args.model else build_tiny(root / "tiny", seed=args.seed)
    base = base_overrides(args, root, model)
    modes = {"hf": args.modes, **({"scripted:weak": args.sanity_modes} if args.sanity else {})}
    arms = [(p, m, g) for p, ms in modes.items() for m in ms for g in (False, True)]
    results: dict[tuple[str, str, bool], dict[str, float | None]] = {}
    start = time.perf_counter()
    for i, (policy, mode, guided) in enumerate(arms, 1):
        name = arm_name(policy, mode, guided)
        t0 = time.perf_counter()
        run = train(None, base + arm_overrides(policy, mode, guided)
                    + [f"orchestration.run_name={name}"])
        results[(policy, mode, guided)] = summarize(run.metrics)
        print(f"[{i}/{len(arms)}] {name}: {results[(policy, mode, guided)]} "
              f"({time.perf_counter() - t0:.0f} s)", flush=True)
    report = table(results)
    print(f"\nguidance ablation: model {model.name}, seed {args.seed}, {args.iterations} "
          f"iteration(s), {args.limit} train instances x G={args.group_size} (+G'={args.attempts} "
          f"guided), {args.eval_limit} held-out x {args.eval_runs} run(s); "
          f"{time.perf_counter() - start:.0f} s; runs under {root}\n")
    print(report)
    return report


if __name__ == "__main__":
    main()
