"""One quickstart-sized RL iteration, stage by stage: where the time and the memory go, against the
compute-bound minimum of the same work measured in the same run.

In this process, with the real Prefect flows (an ephemeral API under a private PREFECT_HOME):
  1. the matmul rates: GEMMs of the policy's MLP shape on every core (GFLOP/s) in fp32 and in
     each precision the run computes in (engine.dtype; bf16 under trainer.autocast);
  2. `rl_iteration` (iteration 0) of the config (default configs/quickstart.yaml) from --policy,
     by default engine.model after the config's expert warm-up (as the quickstart's RL starts; the
     warm-up runs once, untimed, and is kept under runs/.bench; SmolLM2 is converted once when
     missing): rollouts, grading, guidance, guided re-attempts, rewards, the DAPO update;
  3. one evaluation (eval.limit instances x eval.runs), as the config runs it: by default
     `evaluate_policy` of the new policy, afterwards; with `orchestration.eval_beside=true` the
     starting policy's, beside the iteration's rollouts on one engine.
Per stage (from its manifest): wall seconds, the process's peak RSS while it ran, the tokens the
model ran, their FLOPs (`swe_rlvr.compute`) and the compute-bound minimum, FLOPs / fp32's rate
(`own_s`: each span's FLOPs / the rate of the precision it ran in, the stricter bound), and the
roofline minimum (`roof_s`): per span the larger of `own_s` and the bytes it must read (every
weight once per forward, and a decode step's KV cache: `swe_rlvr.compute.forward_bytes`) at the
read bandwidth measured in the same run. Decoding a few rows per step reads far more bytes per
FLOP than the matmul rate can use, so its floor is the memory's, which the FLOP minimum leaves
out. A stage
that ran beside another (marked *) counts the work both did meanwhile; the totals and the span
table count the process's work once. The minimum counts only the work an iteration cannot skip:
generation (prefill, decode) and the update's forward+backward. Old log-probs are counted as
overhead, since the sampler's log-probs of policy k are what they recompute. Then where the time
went, by span (busy seconds: the sandbox commands of concurrent episodes add up), and Prefect's
share: each flow's wall time minus the time its stages covered. The figure to drive down is the
last line, wall / minimum (target <= 2); wall / roof is how far the run is from what this
machine's memory and arithmetic allow.

Then what the episodes' MLflow traces cost against the stages that made them (`bench.tracing`).

It checks that what it timed did the right thing: every episode was sampled and graded without an
infrastructure failure, the update trained (some group had mixed rewards) and wrote a checkpoint,
and the evaluation scored every episode.

    .venv/bin/python -m bench.iteration                     # the quickstart recipe
    .venv/bin/python -m bench.iteration --policy runs/<run>/warmup/checkpoint trainer.pack_tokens=4096
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.accounting import (  # noqa: E402
    TRAINING,
    cores,
    covered_s,
    cpu_columns,
    necessary,
    span_bytes,
    span_rows,
    stage_rows,
)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("overrides", nargs="*", help="dotted KEY=VALUE config overrides")
    p.add_argument("--config", default="configs/quickstart.yaml")
    p.add_argument("--policy", default="",
                   help="the policy to start from (default: engine.model after the config's expert "
                        "warm-up, run once and kept under runs/.bench; see --cold)")
    p.add_argument("--cold", action="store_true",
                   help="start from engine.model as it is (a base model resolves nothing, so the "
                        "update has nothing to train on)")
    p.add_argument("--no-eval", action="store_true", help="skip the evaluation of the new policy")
    p.add_argument("--json", default="", help="also write the figures to this JSON file")
    return p.parse_args(argv)


def matmul_rate(shape, seconds: float = 1.0, dtype: str = "float32") -> float:
    """FLOP/s of (512, d) @ (d, 4d)-sized GEMMs in `dtype` on every core, best of 3 timed runs."""
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(os.cpu_count() or 1)
    try:
        d, inner = shape.hidden, 4 * shape.hidden
        a, b = (torch.randn(n, m, dtype=getattr(torch, dtype)) for n, m in ((512, d), (d, inner)))
        flops = 2.0 * 512 * d * inner
        best = 0.0
        for _ in range(3):
            n, start = 0, time.perf_counter()
            while time.perf_counter() - start < seconds / 3:
                torch.mm(a, b)
                n += 1
            best = max(best, n * flops / (time.perf_counter() - start))
        return best
    finally:
        torch.set_num_threads(threads)


def read_bandwidth(mib: int = 512, seconds: float = 1.0) -> float:
    """Bytes/s that every core reads from memory: sums over a `mib` MiB fp32 tensor (far larger
    than the caches), best of 3 timed runs."""
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(os.cpu_count() or 1)
    try:
        x = torch.ones(mib * 2 ** 20 // 4)
        best = 0.0
        for _ in range(3):
            n, start = 0, time.perf_counter()
            while time.perf_counter() - start < seconds / 3:
                x.sum()
                n += 1
            best = max(best, n * x.numel() * 4 / (time.perf_counter() - start))
        return best
    finally:
        torch.set_num_threads(threads)


def warm_policy(cfg, base: str) -> str:
    """The config's expert warm-up of `base` (untimed), kept under runs/.bench: a rerun finds its
    stages done and returns at once."""
    from flows.warmup import expert_warmup
    start = time.perf_counter()
    policy = expert_warmup(cfg, str(Path("runs/.bench/warmup").resolve()), base)
    print(f"warm policy {policy} ({time.perf_counter() - start:.0f} s, not timed)", flush=True)
    return policy


def precision_rates(cfg, shape) -> tuple[dict, object]:
    """The matmul rate of fp32 and of each precision the run computes in, and span -> the rate
    of its precision: generation in the engine's weights' dtype, training in the trainer's
    (`swe_rlvr.precision`)."""
    from swe_rlvr.precision import compute_dtype, sampling_dtype
    sampling = sampling_dtype(cfg.engine) or "float32"
    training = compute_dtype(cfg.trainer)
    rates = {dtype: matmul_rate(shape, dtype=dtype) for dtype in {"float32", sampling, training}}
    return rates, lambda span: rates[training if span in TRAINING else sampling]


def check(run_dir: str, cfg, eval_step: int | None) -> dict:
    """What the timed run did, refused unless it did the right thing."""
    from swe_rlvr.artifacts import outcomes
    from tasks import store
    it = store.join(run_dir, "iter_0")
    rolls = store.read_rows(store.join(it, "rollouts.parquet"), "rollouts")
    grades = store.read_rows(store.join(it, "validations.parquet"), "validations")
    expected = cfg.instances.limit * cfg.algorithm.group_size
    infra = sum(1 for o in outcomes(rolls, grades) if o.drop_reason == "infra_failure")
    if len(rolls) != expected or len(grades) != expected or infra:
        raise SystemExit(f"bench: the iteration did not do its work: {len(rolls)} episodes, "
                         f"{len(grades)} grades (expected {expected}), {infra} infra failures")
    if not store.exists(store.join(it, "checkpoint", store.SUCCESS)):
        raise SystemExit("bench: the update wrote no sealed checkpoint")
    trained = store.exists(store.join(it, "train_metrics.parquet")) and store.read_rows(
        store.join(it, "train_metrics.parquet"), "train_metrics")
    if not trained:
        raise SystemExit("bench: the update trained on nothing (no group had mixed rewards), so "
                         "its time means nothing; start from a policy that resolves some "
                         "instances (drop --cold, or pass --policy)")
    out = {"episodes": len(rolls), "resolved": sum(bool(g["resolved"]) for g in grades),
           "train_steps": len(trained)}
    if eval_step is not None:
        evals = store.read_rows(store.join(run_dir, f"iter_{eval_step}", "eval.parquet"), "eval")
        if len(evals) != cfg.eval.limit * cfg.eval.runs:
            raise SystemExit(f"bench: the evaluation scored {len(evals)} episodes, expected "
                             f"{cfg.eval.limit * cfg.eval.runs}")
        out["eval_episodes"] = len(evals)
    return out


def exec_seconds(run_dir: str) -> float:
    from tasks import store
    total = 0.0
    for k in (0, 1):
        for name in ("rollouts", "rollouts_guided", "eval_rollouts"):
            url = store.join(run_dir, f"iter_{k}", f"{name}.parquet")
            if store.exists(url):
                total += sum(r["exec_s"] for r in store.read_rows(url, "rollouts"))
    return total


def print_tables(stages: list[dict], spans_: list[dict], flows: dict, total: dict, peak_mb: float,
                 rates: dict, bandwidth: float, done: dict) -> dict:
    print("\nmatmul rate " + ", ".join(f"{r / 1e9:.1f} GFLOP/s ({dtype})" for dtype, r in rates.items())
          + f" on {os.cpu_count()} threads; read bandwidth {bandwidth / 1e9:.1f} GB/s; "
          + f"{done['episodes']} episodes ({done['resolved']} resolved)"
          + (f", {done['eval_episodes']} evaluated" if "eval_episodes" in done else ""))
    print("min_s: the work at fp32's rate; own_s: each span at the rate of the precision it ran "
          "in; roof_s: each span at the larger of own_s and the time to read its weights and KV cache; "
          "outside_s: the stage's wall time outside every model span (the episodes' sandboxes and "
          "prompts, grading), so wall/roof <= 2 needs outside_s <= roof_s; cpu_s: CPU seconds of "
          "this process (the model, the episodes' Python); others_s: the rest of the machine's "
          f"(the sandboxes' commands, Prefect's server); busy: both over the {cores()} cores' time. "
          "What others_s takes, the model cannot have: wall >= (cpu_s + others_s) / cores")
    print(f"\n{'stage':18} {'wall_s':>8} {'rss_GB':>7} {'tokens':>8} {'GFLOP':>8} {'min_s':>7} "
          f"{'wall/min':>8} {'own_s':>7} {'wall/own':>8} {'roof_s':>7} {'wall/roof':>9} "
          f"{'outside_s':>9} {'cpu_s':>7} {'others_s':>9} {'busy':>5}")
    for r in stages:
        ratios = [f"{r['wall_s'] / r[k]:8.1f}" if r[k] else f"{'-':>8}"
                  for k in ("min_s", "min_own_s", "roof_s")]
        name = r["stage"] + (" *" if r["beside"] else "")
        print(f"{name:18} {r['wall_s']:8.1f} {r['peak_rss_mb'] / 1024:7.2f} {r['tokens']:8d} "
              f"{r['gflop']:8.0f} {r['min_s']:7.1f} {ratios[0]} {r['min_own_s']:7.1f} {ratios[1]} "
              f"{r['roof_s']:7.1f} {ratios[2]:>9} {r['outside_s']:9.1f} {cpu_columns(r)}")
    if any(r["beside"] for r in stages):
        print("* ran beside another stage: its tokens and minimum include the work of both "
              "meanwhile (the totals count it once)")
    print(f"\n{'span (busy)':18} {'busy_s':>8} {'calls':>7} {'tokens':>8} {'tok/s':>8} {'GFLOP':>8} "
          f"{'min_s':>7} {'read_GB':>8} {'read_s':>7}")
    for r in spans_:
        print(f"{r['span']:18} {r['busy_s']:8.1f} {r['calls']:7d} {r['tokens']:8d} "
              f"{r['tok_s']:8.0f} {r['gflop']:8.0f} {r['min_s']:7.1f} {r['read_gb']:8.1f} "
              f"{r['read_s']:7.1f}")
    wall = sum(f["wall_s"] for f in flows.values())
    minimum, own, roof = total["min_s"], total["min_own_s"], total["roof_s"]
    for name, f in flows.items():
        print(f"{'prefect ' + name:18} {f['wall_s'] - f['stages_s']:8.1f}   (flow wall "
              f"{f['wall_s']:.1f} s - the time its stages covered {f['stages_s']:.1f} s)")
    print(f"\ntotal wall {wall:.1f} s, compute-bound minimum {minimum:.1f} s at fp32's rate: "
          f"wall/min {wall / minimum if minimum else float('inf'):.1f} (target <= 2); at each "
          f"span's own precision {own:.1f} s: wall/own {wall / own if own else float('inf'):.1f}; "
          f"on the roofline (memory reads too) {roof:.1f} s: wall/roof "
          f"{wall / roof if roof else float('inf'):.1f}; peak RSS {peak_mb / 1024:.2f} GB")
    return {"wall_s": wall, "min_s": minimum, "ratio": wall / minimum if minimum else None,
            "min_own_s": own, "ratio_own": wall / own if own else None, "roof_s": roof,
            "ratio_roof": wall / roof if roof else None, "peak_rss_mb": peak_mb}


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.policy and not (Path(args.policy) / "config.json").is_file():
        raise SystemExit(f"--policy {args.policy}: no model checkpoint there (no config.json); "
                         f"pass a checkpoint directory, e.g. runs/<run>/warmup/iter_0/checkpoint, "
                         f"or drop --policy to warm up engine.model first")
    tmp = Path(tempfile.mkdtemp(prefix="bench-iteration-"))
    os.environ.setdefault("PREFECT_HOME", str(tmp / "prefect"))
    os.environ.pop("PREFECT_API_URL", None)
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    import flows  # noqa: F401 - sets the ephemeral API's start-up timeout before Prefect loads
    from flows.iteration import evaluate_policy, rl_iteration
    from swe_rlvr import spans
    from swe_rlvr.config import load_config
    from swe_rlvr.memory import DTYPE_BYTES, model_dims
    from swe_rlvr.precision import sampling_dtype
    from tasks import store

    cfg = load_config(args.config, [f"orchestration.run_root={tmp / 'runs'}",
                                    "orchestration.cache=false", *args.overrides])
    policy = args.policy or cfg.engine.model
    from agent.models import ensure_recipe_model
    ensure_recipe_model(policy)             # the shipped recipes' SmolLM2 only, built once
    if not args.policy and not args.cold:
        policy = warm_policy(cfg, policy)
    dims = model_dims(policy)
    shape = dims.shape
    rates, own_rate = precision_rates(cfg, shape)
    rate = rates["float32"]
    bandwidth = read_bandwidth()
    weight_bytes = DTYPE_BYTES[sampling_dtype(cfg.engine) or "float32"]
    read_bytes = lambda span, t: span_bytes(dims, weight_bytes, span, t)   # noqa: E731
    read_s = lambda span, t: read_bytes(span, t) / bandwidth               # noqa: E731
    run_dir = str(tmp / "runs" / "bench")
    beside = cfg.orchestration.eval_beside and not args.no_eval
    eval_step = None if args.no_eval else 0 if beside else 1
    flows_out, manifests = {}, {}
    before, start = spans.totals(), time.perf_counter()
    new_policy = rl_iteration(cfg, run_dir, 0, policy, evaluate=beside)
    flows_out["iteration"] = {"wall_s": time.perf_counter() - start}
    manifests["iteration"] = store.stage_manifests(store.join(run_dir, "iter_0"))
    if eval_step == 1:
        start = time.perf_counter()
        evaluate_policy(cfg, run_dir, 1, new_policy)
        flows_out["evaluation"] = {"wall_s": time.perf_counter() - start}
        manifests["evaluation"] = store.stage_manifests(store.join(run_dir, "iter_1"))
    run_work = spans.delta(before, spans.totals())
    for name, f in flows_out.items():
        f["stages_s"] = covered_s(manifests[name])
    done = check(run_dir, cfg, eval_step)
    stages = [dict(r, flow=name) for name, ms in manifests.items()
              for r in stage_rows(ms, shape, rate, own_rate, read_s)]
    span_table = span_rows(run_work, shape, rate, exec_seconds(run_dir), read_bytes, bandwidth)
    total = necessary(run_work, shape, rate, own_rate, read_s)
    summary = print_tables(stages, span_table, flows_out, total, spans.peak_rss_mb(), rates,
                           bandwidth, done)
    from bench.tracing import print_tracing, tracing_rows
    tracing = tracing_rows(cfg, run_dir, manifests, tmp)
    print_tracing(tracing)
    if args.json:
        Path(args.json).write_text(json.dumps({"rate_flops": rate, "rates_flops": rates,
                                               "read_bandwidth": bandwidth,
                                               "shape": asdict(shape),
                                               "stages": stages, "spans": span_table,
                                               "flows": flows_out, "checks": done,
                                               "tracing": tracing, **summary},
                                              indent=1))


if __name__ == "__main__":
    main()
