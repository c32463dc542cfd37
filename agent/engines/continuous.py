"""Continuous batching for the `hf` engine: a request joins the decode batch at any step and
leaves it the step it stops.

Episode threads call `HFEngine.generate` concurrently (the engine is `continuous`, so the
`Batcher` passes each call straight through). Each prompt becomes a `Request`, and one scheduler
thread owns the model. Each round it admits waiting requests (up to `engine.max_batch` rows in
all): it prefills them, from the prefix cache where an earlier turn left their context, and merges
them into the batch. Then it samples one token for every row and feeds the running rows one step.
A row that stops (a stop id or `max_new_tokens`) resolves its request at once, and its KV cache
goes to the prefix cache for the episode's next turn.

With `engine.overlap_prefill` (by default on a CPU) the prefills run on a second thread
(`Beside`): the decode loop hands it the admitted requests and keeps stepping the running rows,
and joins each prefill's rows at the first step after it finishes. Without it, every running row
waits for each joining turn's prefill (a continuation of 100-300 tokens over a cached context of
about 1,200 took 0.2-0.5 s on two cores, 5-10 decode steps). While both run, each takes one torch
thread, so the two cores work on both; alone, each takes its configured threads
(`engine.torch_threads`, `engine.decode_threads`).

A static batch held every row until its longest one finished, and a turn that became ready
meanwhile waited for all of it. On a CPU a decode step of a small model costs about the same for
2 rows as for 16 (it reads all the weights either way), so rows per step are the throughput.

Each request samples from its own generator, seeded per request, so its sample does not depend on
which rows shared its steps (except through the float rounding of a batched forward). A stopped
row stays in the batch, stepping on padding with its output unused, until at most half of the batch
still runs or new rows join; both rebuild the batch without it. The thread runs while there is
work and exits when there is none, so an idle engine holds no thread and no batch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import queue
import threading
import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import torch

from agent.engines.base import Sample, SamplingParams
from agent.engines.kvcache import batch_cache, keep_rows, row_slice, row_view
from swe_rlvr import spans
from swe_rlvr.compute import prefill_work


@dataclasses.dataclass(eq=False)
class Request:
    """One prompt in flight: what it asked for, what it sampled so far, and where the answer goes."""

    prompt: list[int]
    params: SamplingParams
    stops: frozenset[int]
    generator: torch.Generator
    future: Future = dataclasses.field(default_factory=Future)
    tokens: list[int] = dataclasses.field(default_factory=list)
    logps: list[float] = dataclasses.field(default_factory=list)
    done: bool = False

    def sample(self) -> Sample:
        stopped = bool(self.tokens) and self.tokens[-1] in self.stops
        return Sample(token_ids=self.tokens, logprobs=self.logps,
                      finish_reason="stop" if stopped else "length")


@dataclasses.dataclass
class Batch:
    """The rows being decoded: batch position -> request, their left-padded KV cache, the mask
    (b, W) over its columns, each row's left padding, and the logits (b, V) of each row's next
    token."""

    rows: list[Request] = dataclasses.field(default_factory=list)
    cache: Any = None
    mask: torch.Tensor | None = None
    pads: list[int] = dataclasses.field(default_factory=list)
    logits: torch.Tensor | None = None

    @property
    def running(self) -> list[int]:
        return [i for i, r in enumerate(self.rows) if not r.done]

    @property
    def width(self) -> int:
        return 0 if self.mask is None else self.mask.shape[1]

    def layers(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [(layer.keys, layer.values) for layer in self.cache.layers]


class Scheduler:
    """The decode loop of one `HFEngine`; `lock` is held while it runs the model.

    It holds no reference to the engine: only its running thread does, so an engine dropped by
    its stage is freed at once (an engine <-> scheduler cycle would keep its weights until the
    next full garbage collection)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self._prefill_lock = threading.Lock()
        self._cond = threading.Condition()
        self._waiting: deque[Request] = deque()
        self._thread: threading.Thread | None = None

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """No model call runs while the block does (`HFEngine.load_weights` swaps the model)."""
        with self.lock, self._prefill_lock:
            yield

    def submit(self, engine, requests: list[Request]) -> None:
        with self._cond:
            self._waiting.extend(requests)
            self._cond.notify_all()
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, args=(engine,), name="hf-engine",
                                                daemon=True)
                self._thread.start()

    def _admissions(self, engine, batch: Batch, side: Beside | None) -> list[Request] | None:
        """The waiting requests that fit beside the batch's running rows and those being
        prefilled beside; None: no work at all (the thread then ends)."""
        with self._cond:
            pending = side.pending if side is not None else 0
            if not self._waiting and not batch.running and not pending:
                return None
            room = _capacity(engine) - len(batch.running) - pending
            return [self._waiting.popleft() for _ in range(min(max(room, 0), len(self._waiting)))]

    def _run(self, engine) -> None:
        """Serve until there is no work, then end (a request that came meanwhile is served)."""
        while True:
            self._serve(engine)
            with self._cond:
                if not self._waiting:
                    self._thread = None
                    return

    def _serve(self, engine) -> None:
        batch = Batch()
        side = Beside(engine, self._cond, self._prefill_lock) if engine.overlap else None
        try:
            with torch.inference_mode():
                while (new := self._admissions(engine, batch, side)) is not None:
                    if side is None:
                        batch = self._round(engine, batch, new)
                    else:
                        batch = self._round_beside(engine, batch, new, side)
        finally:
            if side is not None:
                side.close()

    def _round(self, engine, batch: Batch, new: list[Request]) -> Batch:
        """Prefill `new` (if any), join it to the batch, step the batch once."""
        try:
            with self.lock:
                if new:
                    _use_threads(engine.threads)
                    batch = self._join(engine, batch, new, prefill(engine, new))
                _use_threads(engine.decode_threads)
                return self._step(engine, batch)
        except Exception as exc:  # the model failed: fail this batch's requests, go on
            _fail(batch.rows + new, exc)
            return Batch()

    def _round_beside(self, engine, batch: Batch, new: list[Request], side: Beside) -> Batch:
        """Hand `new` to the prefill thread; join what it has finished (waiting for it when no
        row runs); step the batch once, on one thread while a prefill runs beside."""
        side.decoding = bool(batch.running)
        if new:
            side.submit(new)
        room = _capacity(engine)
        with self._cond:
            if not batch.running:   # nothing to decode: wait for a prefill, or a request with room
                self._cond.wait_for(lambda: side.ready or (self._waiting and side.pending < room))
            done = side.take()
        joining = [r for job, _ in done for r in job]
        try:
            with self.lock:
                if done:
                    _use_threads(1 if side.busy else engine.threads)
                    batch = self._join(engine, batch, joining, _concat([p for _, p in done]))
                side.decoding = bool(batch.running)
                if not batch.running:
                    return batch
                _use_threads(1 if side.busy else engine.decode_threads)
                return self._step(engine, batch)
        except Exception as exc:  # the model failed: fail this batch's requests, go on
            _fail(batch.rows + joining, exc)
            return Batch()

    def _join(self, eng, batch: Batch, new: list[Request], prefilled: Prefilled) -> Batch:
        """Rebuild the batch from its running rows and the prefilled `new` ones (stopped rows
        drop)."""
        rows, logits = prefilled
        with spans.span("batch"):   # the running rows' caches and the new ones copied into one
            keep = batch.running
            old = [row_view(batch.layers(), i, batch.pads[i], batch.width) for i in keep]
            requests = [batch.rows[i] for i in keep] + new
            room = max(r.params.max_new_tokens - len(r.tokens) for r in requests)  # no regrowth
            cache, pads = batch_cache(eng.model.config, old + rows, reserve=room)
            mask = torch.ones(len(pads), cache.layers[0].keys.shape[2], dtype=torch.long,
                              device=eng.device)                                  # (b, W)
            for row, pad in enumerate(pads):
                mask[row, :pad] = 0
            parts = ([batch.logits[keep]] if keep else []) + [logits]
            return Batch(requests, cache, mask, pads, torch.cat(parts))

    def _step(self, eng, batch: Batch) -> Batch:
        """Sample every row's next token; finish the rows that stop; feed the others one step."""
        t0 = time.perf_counter()
        token, logp = sample_rows(batch.logits, batch.rows)                     # (b,), (b,)
        for i, (request, t, lp) in enumerate(zip(batch.rows, token.tolist(), logp.tolist())):
            if request.done:
                continue
            request.tokens.append(t)
            request.logps.append(lp)
            if t in request.stops or len(request.tokens) >= request.params.max_new_tokens:
                _finish(eng.prefix_cache, batch, i)
        running = batch.running
        if not running:
            return Batch()
        if 2 * len(running) <= len(batch.rows):                        # drop the stopped rows
            index = torch.tensor(running, device=eng.device)
            keep_rows(batch.cache, index)
            batch = Batch([batch.rows[i] for i in running], batch.cache, batch.mask[index],
                          [batch.pads[i] for i in running], None)
            token = token[index]
        done = torch.tensor([r.done for r in batch.rows], device=eng.device)
        token = torch.where(done, torch.full_like(token, eng.pad_id), token)    # (b,)
        mask = torch.cat([batch.mask, torch.ones_like(batch.mask[:, :1])], dim=1)  # (b, W+1)
        batch.mask, batch.logits = mask, eng.decode(token, mask, batch.cache)
        width = mask.shape[1]
        running = batch.running
        spans.record("decode", time.perf_counter() - t0, tokens=len(running), logits=len(running),
                     keys=sum(width - batch.pads[i] for i in running))
        return batch


Prefilled = tuple[list, torch.Tensor]
"""What a prefill hands the batch: each request's KV cache (`RowKV` views) and its next-token
logits (n, V)."""


def prefill(eng, requests: list[Request]) -> Prefilled:
    """Run `requests`' prompts through the model (`HFEngine.prefill_rows`), recording the work."""
    prompts = [r.prompt for r in requests]
    with spans.span("prefill") as work:
        rows, logits, cached = eng.prefill_rows(prompts)
        work.tokens, work.keys = prefill_work([len(p) for p in prompts], cached)
        work.logits = sum(c < len(p) for p, c in zip(prompts, cached))
    return rows, logits


def _concat(parts: list[Prefilled]) -> Prefilled:
    if len(parts) == 1:
        return parts[0]
    return [row for rows, _ in parts for row in rows], torch.cat([logits for _, logits in parts])


def _fail(requests: list[Request], exc: Exception) -> None:
    for request in requests:
        if not request.future.done():
            request.future.set_exception(exc)


class Beside:
    """Prefills on a thread of their own, beside the decode steps (`engine.overlap_prefill`).

    Without it, a turn that joins stops every running row for its prefill. With it, the decode
    loop hands the new requests here and keeps stepping; it joins each finished prefill at its next
    step. Each round's admissions are a prefill of their own, run in the order they came, so a
    group's equal first turns run once only when they are admitted in one round. (Merging what
    queued into one prefill, handing back each row as it ended, measured slower.) While both
    run, each takes one torch thread, so the two cores work on both; alone, each takes its
    configured threads. `pending` (requests handed over and not yet taken back or failed) counts
    against `engine.max_batch`. A prefill that raises fails its own requests here. The scheduler's
    condition `cond` guards `ready` and `pending` and wakes the decode loop when a prefill ends;
    `lock` is held while a prefill runs the model."""

    def __init__(self, engine, cond: threading.Condition, lock: threading.Lock) -> None:
        self._cond, self._lock = cond, lock
        self._jobs: queue.SimpleQueue[list[Request] | None] = queue.SimpleQueue()
        self.ready: list[tuple[list[Request], Prefilled]] = []
        self.pending = 0
        self.busy = False
        """A prefill is running (the decode loop then steps on one thread)."""
        self.decoding = False
        """The decode loop has rows to step (a prefill then starts on one thread)."""
        self._thread = threading.Thread(target=self._run, args=(engine,), name="hf-prefill",
                                        daemon=True)
        self._thread.start()

    def submit(self, requests: list[Request]) -> None:
        with self._cond:
            self.pending += len(requests)
        self._jobs.put(requests)

    def take(self) -> list[tuple[list[Request], Prefilled]]:
        """The finished prefills (call with `cond` held)."""
        done, self.ready = self.ready, []
        self.pending -= sum(len(job) for job, _ in done)
        return done

    def close(self) -> None:
        self._jobs.put(None)
        self._thread.join()

    def _run(self, engine) -> None:
        with torch.inference_mode():
            while (job := self._jobs.get()) is not None:
                self.busy = True
                result: Prefilled | None = None
                try:
                    with self._lock:
                        _use_threads(1 if self.decoding else engine.threads)
                        result = prefill(engine, job)
                except Exception as exc:  # the model failed: fail this job's requests
                    _fail(job, exc)
                with self._cond:
                    self.busy = False
                    if result is None:
                        self.pending -= len(job)
                    else:
                        self.ready.append((job, result))
                    self._cond.notify_all()


def _capacity(engine) -> int:
    """Most rows decoding or being prefilled at once (`engine.max_batch`)."""
    return max(1, engine.cfg.max_batch)


def overlaps(choice: str, device: torch.device) -> bool:
    """`engine.overlap_prefill` -> whether prefills run beside the decode steps (`Beside`): auto
    takes it on a CPU, where it was measured."""
    return choice == "beside" or (choice == "auto" and device.type == "cpu")


def _use_threads(n: int) -> None:
    """torch's CPU threads from now on: prefills, whose matmuls keep every core busy, may use more
    than decode steps, whose thousands of small ops stall two threads on any load beside them."""
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)


def _finish(cache, batch: Batch, i: int) -> None:
    """Row i stopped: its KV cache (the prompt and every sampled token but the last, which was
    never fed) goes to the prefix cache `cache` (None: off), and its request is answered."""
    request = batch.rows[i]
    request.done = True
    if cache is not None:
        cache.put(request.prompt + request.tokens[:-1],
                  row_slice(batch.layers(), i, batch.pads[i], batch.width))
    request.future.set_result(request.sample())


def sample_rows(logits: torch.Tensor, rows: list[Request]) -> tuple[torch.Tensor, torch.Tensor]:
    """One id per row from softmax(logits / T_row), each from its own request's generator, and
    its log-prob under that same law. A row at T <= 0 takes the argmax, its log-prob at T = 1."""
    temps = [r.params.temperature for r in rows]
    scale = torch.tensor([t if t > 0 else 1.0 for t in temps], device=logits.device)
    logp_all = torch.log_softmax(logits.float() / scale[:, None], dim=-1)      # (b, V)
    u = torch.cat([torch.rand(1, generator=r.generator, device=r.generator.device) for r in rows])
    token = inverse_cdf(logp_all.exp(), u.to(logits.device))                   # (b,)
    greedy = torch.tensor([t <= 0 for t in temps], device=logits.device)
    if bool(greedy.any()):
        token = torch.where(greedy, logp_all.argmax(dim=-1), token)
    return token, logp_all.gather(-1, token[:, None])[:, 0]                    # (b,), (b,)


def inverse_cdf(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """One id per row drawn from `probs` (B, V) with the uniforms `u` (B,) in [0, 1): the first id
    whose cumulative probability exceeds u * total. The same law as torch.multinomial, from one
    uniform per row instead of an exponential per vocabulary entry (on CPU those cost ~1 ms per
    row and step at V = 49k). `right=True` never lands on a zero-probability id: its cumulative
    value equals its predecessor's."""
    cdf = probs.cumsum(-1)                                                      # (B, V)
    token = torch.searchsorted(cdf, u[:, None].to(cdf.dtype) * cdf[:, -1:], right=True)[:, 0]
    return token.clamp_(max=probs.shape[-1] - 1)
