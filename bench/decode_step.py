"""Where one decode step of the hf engine goes, against the memory roofline of the same step.

    python bench/decode_step.py [--model runs/.models/smollm2] [--rows 6] [--context 600]

It loads the model as the engine does on this CPU: its dtype (bf16 where the CPU multiplies it),
the grouped decode attention and the oneDNN-packed linears. A step runs through transformers'
forward (`hf`) or the engine's lean decode step (`lean`, `agent.engines.lean`); `--forward both`
(the default) runs each over a cache of its own, timed in interleaved rounds, and prints the
ratio of their medians. It prefills `--rows` random prompts of `--context` tokens into the
engine's growing cache and checks that a decode step of each forward over that cache computes what
a forward over the whole sequence computes (in fp32: every next-token log-prob within 1e-3).
Then it times `--steps` decode steps plainly (twice, interleaved, with both forwards), and
profiles as many more under torch.profiler, which splits a step's op time (self time, per step)
into
- linears: the packed weights' `mkldnn::_linear_pointwise` (or `aten::addmm`/`aten::mm` when
  unpacked), with the rate at which they read the weights;
- attention: `aten::bmm`, the grouped decode attention's two products per layer, with the rate at
  which they read the KV buffers (whole buffers: their capacity, not only the attended keys);
- other ops: every other op (norms, rotary, casts, cache writes, the mask, the sampling's argmax),
  and how many op calls a step makes;
- the rest of a plain step's wall time: Python and dispatch between the ops (a lower bound: the
  profiler's own cost per op lands in the ops' self time).
The roofline is `swe_rlvr.compute.forward_bytes` for one step (every weight once, and each
attended key's cache) at the read bandwidth measured in the same run (`bench.iteration`).

`--beside N` then times the steps again with N Python threads beside them, each busy in pure
Python for `--duty` of every 2 ms and asleep for the rest (the engine's episode threads parsing,
prompting and waiting on sandboxes share its process and its GIL); then with N processes doing the
same, which share the cores but not the GIL; and once more alone after.
"""

from __future__ import annotations

import argparse
import multiprocessing
import queue
import statistics
import sys
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.engines.packed import ROWS_HINT, available, pack_linears  # noqa: E402
from bench import packed_weights  # noqa: E402
from bench.decode_attention import Decoder  # noqa: E402
from bench.iteration import read_bandwidth  # noqa: E402
from swe_rlvr.compute import forward_bytes  # noqa: E402
from swe_rlvr.memory import ModelDims  # noqa: E402
from swe_rlvr.precision import cpu_description, engine_dtype  # noqa: E402

FORWARDS = ("hf", "lean")
"""A decode step through transformers' modules, and through `agent.engines.lean`."""
LINEARS = ("mkldnn::_linear_pointwise", "aten::addmm", "aten::mm")
ATTENTION = ("aten::bmm",)


def load(model_dir: str, dtype: torch.dtype, packed: bool):
    """The model as the engine loads it (`bench.packed_weights.load`), and its dimensions, taken
    before packing: packed weights are no longer parameters."""
    model = packed_weights.load(model_dir, dtype, False, ROWS_HINT)
    dims = ModelDims.of(model)
    if packed:
        pack_linears(model)
    return model, dims


def check(model_dir: str, ids: torch.Tensor) -> float:
    """The largest gap, in fp32, between a decode step's next-token log-probs over the cache (each
    forward's) and a forward over the whole sequence; refuses a gap above 1e-3."""
    model, _ = load(model_dir, torch.float32, available())
    gaps = []
    with torch.inference_mode():
        for forward in FORWARDS:
            decoder = Decoder(model, ids, lean=forward == "lean")
            token = decoder.step()
            stepped = decoder.logits.float().log_softmax(-1)
            whole = model(input_ids=torch.cat([ids, token[:, None]], dim=1)).logits[:, -1]
            gaps.append((stepped - whole.float().log_softmax(-1)).abs().max().item())
            if gaps[-1] > 1e-3:
                raise SystemExit(f"a decode step's fp32 log-probs ({forward} forward) differ from "
                                 f"a whole forward's by {gaps[-1]:.2e}")
    return max(gaps)


def timed(decoder: Decoder, steps: int) -> list[float]:
    """The ms of each of `steps` decode steps."""
    walls = []
    for _ in range(steps):
        start = time.perf_counter()
        decoder.step()
        walls.append(1e3 * (time.perf_counter() - start))
    return walls


def busy_python(stop, ready, duty: float, period: float = 0.002) -> None:
    """Says it is `ready`, then runs pure Python for `duty` of every `period` seconds, asleep for
    the rest, until `stop`."""
    ready.put(True)
    while not stop.is_set():
        start = time.perf_counter()
        while time.perf_counter() - start < duty * period:
            sum(range(200))
        time.sleep((1 - duty) * period)


def beside(decoder: Decoder, steps: int, workers_n: int, duty: float, processes: bool) -> float:
    """The median ms of a decode step with `workers_n` busy-Python threads (or processes, which
    do not share its GIL) running beside it."""
    spawn = multiprocessing.get_context("spawn")
    stop, ready = (spawn.Event(), spawn.Queue()) if processes else (threading.Event(), queue.Queue())
    kind = spawn.Process if processes else threading.Thread
    workers = [kind(target=busy_python, args=(stop, ready, duty), daemon=True)
               for _ in range(workers_n)]
    for worker in workers:
        worker.start()
    for _ in workers:                        # a spawned interpreter takes seconds to import
        ready.get(timeout=300)
    try:
        return statistics.median(timed(decoder, steps))
    finally:
        stop.set()
        for worker in workers:
            worker.join()


def profile(decoder: Decoder, steps: int) -> dict[str, float]:
    """Per step: ms of self time in linears, attention and other ops, and op calls."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile
    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            decoder.step()
    split = {"linears": 0.0, "attention": 0.0, "other": 0.0, "calls": 0.0}
    for event in prof.key_averages():
        part = ("linears" if event.key in LINEARS else "attention" if event.key in ATTENTION
                else "other")
        split[part] += event.self_cpu_time_total / 1e3 / steps
        split["calls"] += event.count / steps
    return split


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="runs/.models/smollm2")
    ap.add_argument("--rows", type=int, default=6)
    ap.add_argument("--context", type=int, default=600)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--beside", type=int, default=0, help="busy Python threads beside the steps")
    ap.add_argument("--duty", type=float, default=0.1, help="share of the time each is busy")
    ap.add_argument("--forward", choices=("both", *FORWARDS), default="both",
                    help="the step through transformers' forward, the lean step, or both")
    args = ap.parse_args(argv)
    if not 0 < args.duty <= 1:
        raise SystemExit(f"--duty is the share of the time a thread is busy, in (0, 1] "
                         f"(got {args.duty})")
    if args.threads:
        torch.set_num_threads(args.threads)
    from agent.models import ensure_recipe_model
    ensure_recipe_model(args.model)            # the recipes' SmolLM2 (no download), built once
    dtype = engine_dtype("auto", torch.device("cpu"))
    from transformers import AutoConfig
    vocab = min(30000, AutoConfig.from_pretrained(args.model).vocab_size)
    ids = torch.randint(0, vocab, (args.rows, args.context), generator=torch.Generator().manual_seed(0))
    gap = check(args.model, ids)
    bandwidth = read_bandwidth()
    model, dims = load(args.model, dtype, available())
    forwards = FORWARDS if args.forward == "both" else (args.forward,)
    with torch.inference_mode():
        decoders = {name: Decoder(model, ids, lean=name == "lean") for name in forwards}
        walls: dict[str, list[float]] = {name: [] for name in forwards}
        for decoder in decoders.values():
            decoder.step(), decoder.step()
        for _ in range(len(forwards)):        # interleaved rounds: each sees the machine's moods
            for name, decoder in decoders.items():
                walls[name] += timed(decoder, args.steps)
        first = decoders[forwards[0]]
        length, capacity = first.mask.shape[1], first.capacity()   # what the timed steps read
        results = {name: measure(decoder, args) for name, decoder in decoders.items()}
    size = torch.finfo(dtype).bits // 8
    weights = forward_bytes(dims.shape, dims.kv_dim, size, 1, 0)
    attended = forward_bytes(dims.shape, dims.kv_dim, size, 0, args.rows * length)
    buffers = forward_bytes(dims.shape, dims.kv_dim, size, 0, args.rows * capacity)
    roof = 1e3 * (weights + attended) / bandwidth
    print(f"{args.model}: {args.rows} rows over {length} cached tokens (buffers of {capacity}), "
          f"{dtype}, {torch.get_num_threads()} threads, CPU {cpu_description()}; read bandwidth "
          f"{bandwidth / 1e9:.1f} GB/s; fp32 check {gap:.1e}")
    for name in forwards:
        print(f"-- {name} forward")
        report(walls[name], results[name], args, weights, buffers, attended, roof, bandwidth)
    if len(forwards) == 2:
        hf, leaned = (statistics.median(walls[name]) for name in FORWARDS)
        print(f"lean/hf      {leaned / hf:7.2f}    (the steps' medians, {leaned:.1f} against "
              f"{hf:.1f} ms)")
    return 0


def measure(decoder: Decoder, args) -> dict[str, float]:
    """The profile's split of a step, then (with `--beside`) its median ms beside busy threads,
    beside busy processes, and alone after them."""
    result = profile(decoder, args.steps)
    if args.beside:
        result["crowded"] = beside(decoder, args.steps, args.beside, args.duty, processes=False)
        result["apart"] = beside(decoder, args.steps, args.beside, args.duty, processes=True)
        result["after"] = statistics.median(timed(decoder, args.steps))
    return result


def report(walls: list[float], split: dict[str, float], args, weights: int, buffers: int,
           attended: int, roof: float, bandwidth: float) -> None:
    """One forward's lines: its step, the split, the roofline, and the steps beside busy work."""
    wall = statistics.median(walls)
    rest = wall - split["linears"] - split["attention"] - split["other"]
    rate = lambda nbytes, ms: nbytes / ms / 1e6                                  # noqa: E731
    print(f"step         {wall:7.1f} ms  (median of {len(walls)}; {min(walls):.1f}-{max(walls):.1f})")
    print(f"linears      {split['linears']:7.1f} ms  {weights / 1e6:6.0f} MB of weights at "
          f"{rate(weights, split['linears']):5.1f} GB/s")
    print(f"attention    {split['attention']:7.1f} ms  {buffers / 1e6:6.0f} MB of KV buffers at "
          f"{rate(buffers, split['attention']):5.1f} GB/s ({attended / 1e6:.0f} MB attended)")
    print(f"other ops    {split['other']:7.1f} ms  ({split['calls']:.0f} op calls a step in all)")
    print(f"python/rest  {rest:7.1f} ms")
    print(f"roofline     {roof:7.2f} ms  ({(weights + attended) / 1e6:.0f} MB at "
          f"{bandwidth / 1e9:.1f} GB/s): wall/roof {wall / roof:.1f}")
    if args.beside:
        print(f"beside       {split['crowded']:7.1f} ms  with {args.beside} Python thread(s) busy "
              f"{args.duty:.0%} of the time: {split['crowded'] / wall:.2f}x the step alone "
              f"({split['after']:.1f} ms alone after)")
        print(f"apart        {split['apart']:7.1f} ms  with {args.beside} Python process(es) busy "
              f"as much (the cores shared, not the GIL): {split['apart'] / wall:.2f}x")

if __name__ == "__main__":
    raise SystemExit(main())
