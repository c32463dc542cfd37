"""Decode steps of the hf engine's model: the grouped decode attention against transformers' sdpa.

    python bench/decode_attention.py [--model runs/.models/smollm2] [--rows 8] [--context 1200]

For each kernel (`engine.decode_attention`: grouped, sdpa) and each batch shape (one row left-
padded, as a continuous batch mostly is; no padding, as a lone row is), it prefills `--rows`
random prompts of `--context` tokens into the engine's growing cache and times `--steps` decode
steps, in the engine's dtype (bf16 where the CPU has it). Before timing, it checks that both
kernels compute the same step: in fp32, every next-token log-prob within 1e-3 of sdpa's. Prints
ms per step, sdpa/grouped, and each bf16 kernel's largest log-prob deviation from fp32 sdpa.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.engines.attention import ATTENTION, register  # noqa: E402
from agent.engines.kvcache import growing_cache  # noqa: E402
from agent.engines.lean import LeanDecoder  # noqa: E402
from swe_rlvr.precision import cpu_description, engine_dtype  # noqa: E402

KERNELS = {"grouped": ATTENTION, "sdpa": "sdpa"}


@functools.cache
def load(model_dir: str, impl: str, dtype: torch.dtype):
    """The model with attention `impl` in `dtype`, loaded once for every batch shape."""
    from transformers import AutoModelForCausalLM
    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, attn_implementation=impl).eval()


class Decoder:
    """A batch prefilled into the engine's growing cache under `mask` (None: no padding), then
    fed one token per row a step, through transformers' forward or, with `lean`, the engine's
    lean decode step (`agent.engines.lean`)."""

    def __init__(self, model, ids: torch.Tensor, mask: torch.Tensor | None = None,
                 lean: bool = False) -> None:
        self.model, self.mask = model, torch.ones_like(ids) if mask is None else mask
        self.lean = LeanDecoder(model) if lean else None
        out = model(input_ids=ids, attention_mask=self.mask,
                    position_ids=(self.mask.cumsum(-1) - 1).clamp(min=0),
                    past_key_values=growing_cache(model.config), use_cache=True, logits_to_keep=1)
        self.cache, self.logits = out.past_key_values, out.logits[:, -1]

    def step(self, token: torch.Tensor | None = None) -> torch.Tensor:
        """Feed each row `token` (B,) (None: its argmax); returns the tokens fed."""
        token = self.logits.argmax(-1) if token is None else token
        self.mask = torch.cat([self.mask, torch.ones_like(self.mask[:, :1])], dim=1)
        if self.lean is not None:
            self.logits = self.lean.step(token, self.mask, self.cache)
            return token
        out = self.model(input_ids=token[:, None], attention_mask=self.mask,
                         position_ids=self.mask.sum(-1, keepdim=True) - 1,
                         past_key_values=self.cache, use_cache=True)
        self.logits = out.logits[:, -1]
        return token

    def capacity(self) -> int:
        """Columns of the KV buffers the decode attention multiplies over (>= the cache's length)."""
        keys = self.cache.layers[0].keys
        return keys.stride(1) // keys.shape[-1]


def prefill_and_decode(model, ids: torch.Tensor, mask: torch.Tensor, steps: int
                       ) -> tuple[torch.Tensor, float, list[float]]:
    """Prefill `ids` (B, W) under `mask` into the engine's growing cache, then run `steps` decode
    steps: the first step's log-probs (B, V), the prefill's seconds and each step's seconds."""
    with torch.inference_mode():
        t0 = time.perf_counter()
        decoder = Decoder(model, ids, mask)
        prefill = time.perf_counter() - t0
        times, first = [], None
        for _ in range(steps):
            t0 = time.perf_counter()
            decoder.step(ids[:, -1])
            times.append(time.perf_counter() - t0)
            first = decoder.logits.float().log_softmax(-1) if first is None else first
    return first, prefill, times


def decode_steps(model_dir: str, impl: str, dtype: torch.dtype, ids: torch.Tensor, pad: int,
                 steps: int) -> tuple[torch.Tensor, list[float]]:
    """The first decode step's log-probs (B, V) and the seconds of each later step."""
    mask = torch.ones(ids.shape, dtype=torch.long)
    mask[0, :pad] = 0
    first, _, times = prefill_and_decode(load(model_dir, impl, dtype), ids, mask, steps + 1)
    return first, times[1:]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="runs/.models/smollm2")
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--context", type=int, default=1200)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    register()
    dtype = engine_dtype("auto", torch.device("cpu"))
    ids = torch.randint(0, 30000, (args.rows, args.context), generator=torch.Generator().manual_seed(0))
    print(f"{args.model}: {args.rows} rows x {args.context} tokens, {dtype}, "
          f"{torch.get_num_threads()} threads, CPU {cpu_description()}")
    for pad, label in ((args.context // 6, "row 0 padded"), (0, "no padding")):
        ref, _ = decode_steps(args.model, "sdpa", torch.float32, ids, pad, 0)
        check, _ = decode_steps(args.model, ATTENTION, torch.float32, ids, pad, 0)
        gap = (check - ref).abs().max().item()
        if gap > 1e-3:
            raise SystemExit(f"grouped attention's fp32 log-probs differ from sdpa's by {gap:.2e} ({label})")
        ms, dev = {}, {}
        for name, impl in KERNELS.items():
            logp, times = decode_steps(args.model, impl, dtype, ids, pad, args.steps)
            ms[name], dev[name] = 1e3 * statistics.median(times), (logp - ref).abs().max().item()
        print(f"{label:14s} grouped {ms['grouped']:7.1f} ms/step  sdpa {ms['sdpa']:7.1f} ms/step  "
              f"sdpa/grouped {ms['sdpa'] / ms['grouped']:.2f}  (fp32 check {gap:.1e}; "
              f"max |logp - fp32| grouped {dev['grouped']:.3f}, sdpa {dev['sdpa']:.3f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
