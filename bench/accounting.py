"""What a stage manifest's spans count for (`bench.iteration`'s tables): the FLOPs and bytes of the
work an iteration cannot skip, per stage and per span, the stages' windows and overlaps, and the
CPU the stages' processes used.

The minimum counts generation (prefill, decode; a server's `generate`) and the update's
forward+backward passes; old log-probs are overhead (the sampler's log-probs of policy k are what
they recompute). A decode step must read every weight and its attended keys' cache, so its
roofline floor is the memory's (`swe_rlvr.compute.forward_bytes`).
"""

from __future__ import annotations

import os

GENERATION = ("prefill", "decode", "generate")   # hf engine; a server engine
TRAINING = ("forward_backward",)
KV_CACHED = ("decode",)       # one-token forwards whose every attended key is read from the cache
FORWARD_ONLY = ("old_logprobs",)
SPAN_ORDER = ("model_load", "server_start", "prefill", "decode", "batch", "generate", "old_logprobs",
              "forward_backward", "optimizer", "checkpoint")


def span_flops(shape, name: str, t) -> float:
    """FLOPs of span `name`'s work `t` (a `swe_rlvr.spans.Total`): a training pass or a forward."""
    from swe_rlvr.compute import forward_flops, training_flops
    flops = training_flops if name in TRAINING else forward_flops
    return flops(shape, t.tokens, t.logits, t.keys)


def span_bytes(dims, dtype_bytes: int, name: str, t) -> float:
    """The bytes span `name`'s work `t` must read (`forward_bytes`): the weights once per call of
    the engine's forwards, and the KV cache of a decode step's keys. A server engine's `generate`
    counts requests, not forwards, and training is bound by its arithmetic: 0 for them."""
    from swe_rlvr.compute import forward_bytes
    if name not in ("prefill", "decode"):
        return 0.0
    cached = t.keys if name in KV_CACHED else 0
    return forward_bytes(dims.shape, dims.kv_dim, dtype_bytes, t.calls, cached)


def work(manifest: dict) -> dict:
    """A stage manifest's spans as `swe_rlvr.spans.Total`s."""
    from swe_rlvr.spans import Total
    return {name: Total(**t) for name, t in manifest.get("spans", {}).items()}


def stage_rows(manifests: dict, shape, rate: float, own_rate=None, read_s=None) -> list[dict]:
    """Per stage: wall, peak RSS, tokens, FLOPs of the necessary work and its minimum time at
    `rate` (fp32's: `min_s`), at `own_rate(span)`, the rate of the precision that span computed
    in (`min_own_s`; default `rate`), and the roofline's (`roof_s`, see `necessary`); and
    `outside_s`, the wall time outside every span of the engine and trainer (loading, prefill,
    decode, the `hf` engine's batch assembly, the update's passes): the episodes' own time
    (opening sandboxes, their commands, parsing and prompting) and grading, while the model ran
    nothing, so wall/roof <= 2 needs outside_s <= roof_s. For a stage beside another it counts
    both stages' spans, so it is 0 or too small. `cpu_s` is the CPU seconds this process (with
    an engine's child process) used meanwhile, `others_cpu_s` the rest of the machine's (the
    sandboxes' commands, test runs, Prefect's server, and any other load), both None in a manifest
    from before they were recorded."""
    rows = []
    ordered = sorted(manifests.items(), key=lambda kv: kv[1]["finished_at"])
    for name, m in ordered:
        beside = any(other is not m and overlaps(m, other) for _, other in ordered)
        spans_ = work(m)
        model_s = sum(t.seconds for t in spans_.values())
        rows.append({"stage": name, "wall_s": m["wall_s"], "peak_rss_mb": m.get("peak_rss_mb", 0.0),
                     "beside": beside, "outside_s": max(0.0, m["wall_s"] - model_s),
                     "cpu_s": m.get("cpu_s"), "others_cpu_s": others_cpu_s(m),
                     **necessary(spans_, shape, rate, own_rate, read_s)})
    return rows


def necessary(spans_: dict, shape, rate: float, own_rate=None, read_s=None) -> dict:
    """The tokens of `spans_` (name -> Total) and the FLOPs of the work an iteration cannot skip,
    with its minimum time at `rate`, at `own_rate(span)`, and on the roofline: per span the
    larger of its time at its own rate and `read_s(span, Total)`, the time to read what it must
    (default: nothing). A span's totals stand for all its calls, so max(sum, sum) <= sum of max:
    still a lower bound."""
    own_rate = own_rate or (lambda span: rate)
    read_s = read_s or (lambda span, t: 0.0)
    needed = {k: span_flops(shape, k, t) for k, t in spans_.items() if k in GENERATION + TRAINING}
    tokens = sum(t.tokens for k, t in spans_.items() if k in GENERATION + TRAINING + FORWARD_ONLY)
    return {"tokens": tokens, "gflop": sum(needed.values()) / 1e9,
            "min_s": sum(needed.values()) / rate,
            "min_own_s": sum(f / own_rate(k) for k, f in needed.items()),
            "roof_s": sum(max(f / own_rate(k), read_s(k, spans_[k])) for k, f in needed.items())}


def window(manifest: dict) -> tuple[float, float]:
    """(start, end) of a stage, in epoch seconds."""
    return manifest["finished_at"] - manifest["wall_s"], manifest["finished_at"]


def overlaps(a: dict, b: dict) -> bool:
    """Whether two stages' windows overlap (by more than a scheduling hiccup)."""
    (a0, a1), (b0, b1) = window(a), window(b)
    return min(a1, b1) - max(a0, b0) > 0.5


def covered_s(manifests: dict) -> float:
    """Seconds during which at least one of the stages ran (the union of their windows)."""
    total, end = 0.0, float("-inf")
    for start, stop in sorted(window(m) for m in manifests.values()):
        total += max(0.0, stop - max(start, end))
        end = max(end, stop)
    return total


def span_rows(sums: dict, shape, rate: float, exec_s: float, read_bytes=None,
              bandwidth: float = 0.0) -> list[dict]:
    """Per span name (`sums`: the run's name -> Total): busy seconds, calls, tokens, FLOPs,
    tokens/s, and the bytes it must read (`read_bytes(span, Total)`) with their time at
    `bandwidth` bytes/s."""
    read_bytes = read_bytes or (lambda span, t: 0.0)
    rows = []
    for name in sorted(sums, key=lambda n: SPAN_ORDER.index(n) if n in SPAN_ORDER else 99):
        t = sums[name]
        flops = span_flops(shape, name, t) if t.tokens else 0.0
        read = read_bytes(name, t)
        rows.append({"span": name, "busy_s": t.seconds, "calls": t.calls, "tokens": t.tokens,
                     "gflop": flops / 1e9, "min_s": flops / rate, "read_gb": read / 1e9,
                     "read_s": read / bandwidth if bandwidth else 0.0,
                     "tok_s": t.tokens / t.seconds if t.seconds else 0.0})
    rows.append({"span": "sandbox commands", "busy_s": exec_s, "calls": 0, "tokens": 0,
                 "gflop": 0.0, "min_s": 0.0, "read_gb": 0.0, "read_s": 0.0, "tok_s": 0.0})
    return rows


def others_cpu_s(manifest: dict) -> float | None:
    """The machine's busy CPU seconds during a stage that were not its process's (None: not
    recorded)."""
    if manifest.get("cpu_s") is None or manifest.get("machine_cpu_s") is None:
        return None
    return max(0.0, manifest["machine_cpu_s"] - manifest["cpu_s"])


def cores() -> int:
    """The machine's cores (what /proc/stat's busy time is shared among)."""
    return os.cpu_count() or 1


def cpu_columns(row: dict) -> str:
    """A stage row's cpu_s, others_cpu_s and busy (their sum over the cores' time), or dashes."""
    if row.get("cpu_s") is None or row.get("others_cpu_s") is None:
        return f"{'-':>7} {'-':>9} {'-':>5}"
    used = row["cpu_s"] + row["others_cpu_s"]
    busy = used / (cores() * row["wall_s"]) if row["wall_s"] else 0.0
    return f"{row['cpu_s']:7.1f} {row['others_cpu_s']:9.1f} {busy:5.0%}"
