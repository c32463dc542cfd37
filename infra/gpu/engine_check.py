"""The `hf` engine's batched generation on a device, checked against a plain forward on CPU.

    python infra/gpu/engine_check.py --model DIR --device cuda     # step `engine` of check.sh

For each dtype (float32, and bfloat16 on CUDA), the engine samples two turns of a batch of
prompts of different lengths at T = 1: turn 1 runs the left-padded batch prefill, turn 2 extends
every prompt with its reply and a few observation tokens, so it runs the prefix-cache path (each
row prefilled alone from its cached KV, then decoded as one batch). Each sampled token's log-prob
is then recomputed on CPU in float32 by one teacher-forced forward over the row, without padding
or cache, as the trainer recomputes it. The mean and largest gap are reported with the engine's
generation speed (generated tokens per second of turn 1), and the step fails when a gap exceeds
the dtype's tolerance.

Tolerances: float32 on any device agrees to rounding (1e-3). bfloat16 (what `engine.dtype: auto`
picks on CUDA) is judged on the mean gap (0.01 nats) and the largest (0.06): about ten times
what the first H200 run measured on the tiny random model (1.1e-3 and 6.2e-3). DIR is built with
`agent.models.build_tiny` when it does not exist yet.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

TOLERANCE = {"float32": (1e-3, 1e-3), "bfloat16": (0.01, 0.06)}
"""dtype -> (largest mean |gap|, largest single |gap|) in nats. bf16: about 10x the gaps of the first
H200 run (mean 1.1e-3, max 6.2e-3)."""


def tiny_model(path: Path) -> Path:
    """The tiny random Qwen2 at `path`, built there first when missing."""
    if not (path / "config.json").exists():
        from agent.models import build_tiny
        build_tiny(path)
    return path


def prompts(n: int, vocab: int, seed: int) -> list[list[int]]:
    """n prompts of 8 to 8 + 7 (n - 1) random ids (avoiding the special ids 0-2)."""
    import torch
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, vocab, (8 + 7 * i,), generator=g).tolist() for i in range(n)]


def reference_gaps(model, rows: list[list[int]], samples, temperature: float) -> list[float]:
    """|engine log-prob - CPU float32 recomputation| of every sampled token."""
    import torch
    gaps = []
    with torch.no_grad():
        for prompt, sample in zip(rows, samples):
            ids = torch.tensor([prompt + sample.token_ids])                       # (1, P + T)
            logits = model(input_ids=ids).logits[0, len(prompt) - 1:-1].float()  # (T, V)
            logp = torch.log_softmax(logits / temperature, dim=-1)
            want = logp.gather(-1, torch.tensor(sample.token_ids)[:, None])[:, 0]  # (T,)
            gaps += (want - torch.tensor(sample.logprobs)).abs().tolist()
    return gaps


def run_dtype(model_dir: Path, device: str, dtype: str, args, reference) -> dict:
    """Two sampled turns on (device, dtype); their gaps to the CPU reference and turn 1's speed."""
    import torch

    from agent.engines.base import SamplingParams
    from agent.engines.hf import HFEngine
    from swe_rlvr.config import EngineConfig
    engine = HFEngine(EngineConfig(name="hf", model=str(model_dir), device=device, dtype=dtype,
                                   max_batch=args.batch, seed=args.seed))
    params = SamplingParams(temperature=1.0, max_new_tokens=args.new_tokens, seed=args.seed)
    vocab = len(engine.tokenizer)
    engine.generate(prompts(args.batch, vocab, args.seed + 7), params)  # warm-up, timed shapes
    first = prompts(args.batch, vocab, args.seed)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sync()
    start = time.perf_counter()
    turn1 = engine.generate(first, params)
    sync()
    seconds = time.perf_counter() - start
    if args.profile:
        print_profile(engine, prompts(args.batch, vocab, args.seed + 9), params, device, dtype)
    obs = prompts(args.batch, vocab, args.seed + 1)
    second = [p + s.token_ids + o[:5] for p, s, o in zip(first, turn1, obs)]
    hits = engine.prefix_cache.hits if engine.prefix_cache is not None else 0
    turn2 = engine.generate(second, params)
    hits = (engine.prefix_cache.hits if engine.prefix_cache is not None else 0) - hits
    gaps = (reference_gaps(reference, first, turn1, 1.0)
            + reference_gaps(reference, second, turn2, 1.0))
    mean_tol, max_tol = TOLERANCE[dtype]
    mean_gap, max_gap = sum(gaps) / len(gaps), max(gaps)
    tokens = sum(len(s.token_ids) for s in turn1)
    steps = max(len(s.token_ids) for s in turn1)     # decode steps: every row runs each of them
    return {"device": device, "dtype": dtype, "batch": args.batch, "tokens": tokens,
            "tokens_per_s": round(tokens / seconds, 1), "seconds": round(seconds, 3),
            "steps": steps, "mean_gap": mean_gap, "max_gap": max_gap,
            "turn2_cache_hits": hits,
            "ok": mean_gap <= mean_tol and max_gap <= max_tol and hits == args.batch}


def print_profile(engine, batch: list[list[int]], params, device: str, dtype: str) -> None:
    """One more turn under torch.profiler; its costliest ops, for a speed that looks wrong."""
    from torch.profiler import ProfilerActivity, profile
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities) as prof:
        engine.generate(batch, params)
    key = "self_cuda_time_total" if device == "cuda" else "self_cpu_time_total"
    print(f"profile {device} {dtype}, by {key}:")
    print(prof.key_averages().table(sort_by=key, row_limit=12, max_name_column_width=60))
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=8,
                                    max_name_column_width=60), flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", type=Path, required=True, help="tiny model dir (built if missing)")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--batch", type=int, default=16, help="prompts per turn")
    p.add_argument("--new-tokens", type=int, default=128, help="tokens sampled per prompt and turn")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, help="also write the results here")
    p.add_argument("--profile", action="store_true",
                   help="print torch.profiler's costliest ops of one more turn per dtype")
    args = p.parse_args(argv)

    import torch
    from transformers import AutoModelForCausalLM
    if args.device == "cuda" and not torch.cuda.is_available():
        print("engine_check: --device cuda but torch sees no CUDA GPU; use --device cpu")
        return 2
    model_dir = tiny_model(args.model)
    reference = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    dtypes = ["float32", "bfloat16"] if args.device == "cuda" else ["float32"]
    results = [run_dtype(model_dir, args.device, d, args, reference) for d in dtypes]
    for r in results:
        tol = TOLERANCE[r["dtype"]]
        print(f"{'ok  ' if r['ok'] else 'FAIL'} {r['device']} {r['dtype']:<8} batch {r['batch']}: "
              f"{r['tokens_per_s']:9.1f} tok/s ({r['tokens']} tokens, {r['steps']} steps, "
              f"{r['seconds']:.2f} s); log-prob gap to CPU float32 mean {r['mean_gap']:.2e} "
              f"(tol {tol[0]:g}), max {r['max_gap']:.2e} (tol {tol[1]:g}); turn 2 took "
              f"{r['turn2_cache_hits']} of {r['batch']} rows from the prefix cache")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    print(f"{'' if all(r['ok'] for r in results) else 'FAIL: '}{args.device}: " + "; ".join(
        f"{r['dtype']} {r['tokens_per_s']:.0f} tok/s, gap mean {r['mean_gap']:.1e} max "
        f"{r['max_gap']:.1e}, cache {r['turn2_cache_hits']}/{r['batch']}" for r in results))
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
