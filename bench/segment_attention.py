"""The trainer's attention of one packed segment: `trainer.blockwise` against causal SDPA.

    python bench/segment_attention.py [--lengths 512,832,1536,3072] [--heads 9 --kv-heads 3
        --head-dim 64] [--threads 2] [--rounds 5] [--dtype auto]

SmolLM2-135M's attention shape by default (9 query heads over 3 KV heads of 64). For each
segment length it times forward + backward of each kernel (`trainer.attention`: blockwise, sdpa)
as the trainer calls them (`trainer.forward._causal_segment`, padded to a multiple of 64), in the
trainer's autocast dtype (bf16 where the CPU multiplies it natively), rounds interleaved, and
prints the median ms of each, sdpa/blockwise, and the kernels' achieved GFLOP/s (causal: the
forward's two matmuls are 4 L^2 D H / 2 FLOPs, and backward's four twice that). Before timing, it checks that the
two agree in fp32 (outputs and gradients within 1e-4) and prints each bf16 kernel's largest
output error from the fp32 result.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from swe_rlvr.precision import autocast_enabled, cpu_description  # noqa: E402
from trainer.forward import _causal_segment  # noqa: E402

KERNELS = ("blockwise", "sdpa")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lengths", default="512,832,1536,3072", help="segment lengths, comma-separated")
    p.add_argument("--heads", type=int, default=9)
    p.add_argument("--kv-heads", type=int, default=3)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=5, help="timed rounds per kernel (after a warm-up)")
    p.add_argument("--dtype", default="auto", choices=("auto", "bf16", "fp32"),
                   help="trainer.autocast's rule: auto is bf16 where the CPU has it")
    return p.parse_args(argv)


def inputs(args, length: int, dtype: torch.dtype, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(1, h, length, args.head_dim, generator=g).to(dtype).requires_grad_()
            for h in (args.heads, args.kv_heads, args.kv_heads)]


def step(kernel: str, q, k, v, dout) -> list[torch.Tensor]:
    """Forward and backward of one kernel: [out, dq, dk, dv]."""
    out = _causal_segment(q, k, v, None, q.shape[1] != k.shape[1], kernel == "blockwise")
    return [out, *torch.autograd.grad(out, (q, k, v), dout)]


def check(args, length: int) -> None:
    """fp32: the kernels agree; raises when they do not (a wrong kernel is not timed)."""
    q, k, v = inputs(args, length, torch.float32)
    dout = torch.randn(q.shape, generator=torch.Generator().manual_seed(1))
    a, b = (step(kernel, q, k, v, dout) for kernel in KERNELS)
    for name, x, y in zip(("out", "dq", "dk", "dv"), a, b):
        err = (x - y).abs().max().item()
        if err > 1e-4:
            raise SystemExit(f"blockwise and sdpa disagree at L={length}: {name} differs by {err:.2e}")


def bf16_errors(args, length: int) -> dict[str, float]:
    """Each kernel's largest bf16 output error from the fp32 result."""
    q, k, v = inputs(args, length, torch.float32)
    exact = step("sdpa", q, k, v, torch.ones_like(q))[0]
    low = [x.detach().bfloat16().requires_grad_() for x in (q, k, v)]
    return {kernel: (step(kernel, *low, torch.ones_like(low[0]))[0].float() - exact).abs().max().item()
            for kernel in KERNELS}


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    bf16 = autocast_enabled(args.dtype, torch.device("cpu"))
    dtype = torch.bfloat16 if bf16 else torch.float32
    lengths = [int(x) for x in args.lengths.split(",")]
    print(f"CPU: {cpu_description()}; {args.threads} threads; {dtype}; heads {args.heads} over "
          f"{args.kv_heads} KV heads of {args.head_dim}")
    for length in sorted({min(length, 700) for length in lengths}):   # long ones: checked at 700
        check(args, length)
    print("fp32 check: blockwise and sdpa agree (outputs and gradients within 1e-4)")
    if bf16:
        errs = bf16_errors(args, 512)
        print("bf16 largest output error from fp32 at L=512: "
              + ", ".join(f"{k} {e:.1e}" for k, e in errs.items()))
    print(f"{'L':>6} {'blockwise ms':>13} {'sdpa ms':>9} {'sdpa/blockwise':>15} "
          f"{'blockwise GF/s':>15} {'sdpa GF/s':>10}")
    for length in lengths:
        q, k, v = inputs(args, length, dtype)
        dout = torch.randn(q.shape, generator=torch.Generator().manual_seed(1)).to(dtype)
        times: dict[str, list[float]] = {kernel: [] for kernel in KERNELS}
        for r in range(args.rounds + 1):
            for kernel in (KERNELS if r % 2 else KERNELS[::-1]):      # interleaved, order alternating
                t0 = time.perf_counter()
                step(kernel, q, k, v, dout)
                if r:
                    times[kernel].append(time.perf_counter() - t0)
        ms = {kernel: statistics.median(t) * 1e3 for kernel, t in times.items()}
        flops = 3 * 4 * length * length * args.head_dim * args.heads / 2
        print(f"{length:>6} {ms['blockwise']:>13.1f} {ms['sdpa']:>9.1f} {ms['sdpa'] / ms['blockwise']:>15.2f} "
              f"{flops / ms['blockwise'] / 1e6:>15.0f} {flops / ms['sdpa'] / 1e6:>10.0f}")


if __name__ == "__main__":
    main()
