"""The hf engine's model with oneDNN-packed linear weights (`engine.packed_weights`) against the
weights as loaded: a prefill and the decode steps after it.

    python bench/packed_weights.py [--model runs/.models/smollm2] [--rows 8] [--context 600]

Both sides load the model as the engine does on this CPU (its dtype, the grouped decode
attention); the packed side then runs `agent.engines.packed.pack_linears`. Each round prefills
`--rows` random prompts of `--context` tokens into the engine's growing cache and times `--steps`
decode steps; the rounds alternate sides (`--rounds` each), so both see the same machine. Before
timing it checks that the sides compute the same thing: in fp32 every next-token log-prob of the
first decode step within 1e-4 of the plain model's, and in the engine's dtype within 0.05.
Prints per side the prefill's ms and the median ms per decode step (min-max over rounds), and
plain/packed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.engines.attention import register  # noqa: E402
from agent.engines.packed import available, pack_linears  # noqa: E402
from bench.decode_attention import prefill_and_decode  # noqa: E402
from swe_rlvr.precision import cpu_description, engine_dtype  # noqa: E402


def load(model_dir: str, dtype: torch.dtype, packed: bool, rows: int):
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype,
                                                 attn_implementation=register()).eval()
    if packed:
        pack_linears(model, rows)
    return model


def run(model, ids: torch.Tensor, steps: int) -> tuple[torch.Tensor, float, list[float]]:
    """The first decode step's log-probs (B, V), the prefill's seconds and each decode step's."""
    return prefill_and_decode(model, ids, torch.ones_like(ids), steps)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="runs/.models/smollm2")
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--context", type=int, default=600)
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = ap.parse_args(argv)
    if not available():
        raise SystemExit("this torch has no oneDNN linear kernels: nothing to compare")
    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = engine_dtype("auto", torch.device("cpu"))
    ids = torch.randint(0, 30000, (args.rows, args.context), generator=torch.Generator().manual_seed(0))
    print(f"{args.model}: {args.rows} rows x {args.context} tokens, {dtype}, "
          f"{torch.get_num_threads()} threads, CPU {cpu_description()}")
    checks = {}
    for check_dtype, tolerance in ((torch.float32, 1e-4), (dtype, 0.05)):
        plain, _, _ = run(load(args.model, check_dtype, False, args.rows), ids, 1)
        packed, _, _ = run(load(args.model, check_dtype, True, args.rows), ids, 1)
        gap = (packed - plain).abs().max().item()
        if gap > tolerance:
            raise SystemExit(f"packed weights' {check_dtype} log-probs differ from the plain "
                             f"model's by {gap:.2e} (> {tolerance})")
        checks[str(check_dtype).removeprefix("torch.")] = gap
    models = {side: load(args.model, dtype, side == "packed", args.rows) for side in ("plain", "packed")}
    prefill: dict[str, list[float]] = {s: [] for s in models}
    decode: dict[str, list[float]] = {s: [] for s in models}
    for r in range(args.rounds):
        for side in (("plain", "packed") if r % 2 == 0 else ("packed", "plain")):
            _, pre, times = run(models[side], ids, args.steps + 2)
            prefill[side].append(1e3 * pre)
            decode[side].append(1e3 * statistics.median(times[2:]))
    for side in models:
        print(f"{side:7s} prefill {statistics.median(prefill[side]):7.0f} ms  decode "
              f"{statistics.median(decode[side]):6.1f} ms/step "
              f"({min(decode[side]):.1f}-{max(decode[side]):.1f} over {args.rounds} rounds)")
    ratio = [p / q for p, q in zip(decode["plain"], decode["packed"])]
    print(f"decode plain/packed {statistics.median(ratio):.2f} (per round {min(ratio):.2f}-"
          f"{max(ratio):.2f}); prefill plain/packed "
          f"{statistics.median(prefill['plain']) / statistics.median(prefill['packed']):.2f}; "
          f"max |logp packed - plain| " + ", ".join(f"{k} {v:.1e}" for k, v in checks.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
