"""Batched generation across concurrent episodes.

Episode threads call `Batcher.generate([prompt], params)` as if it were the engine (the Batcher
satisfies the `Engine` protocol). A dispatcher thread collects pending prompts and calls the real
engine once per batch of up to `max_batch` prompts with equal sampling params. It dispatches when
every live episode is waiting, the batch is full, or `max_wait_s` has passed since it started
collecting (an episode busy in its sandbox does not hold the others up for longer than that).

An engine that batches continuously itself (`continuous = True`: the `hf` engine, a vLLM server)
gets each call straight from its episode's thread, concurrently, with no gathering: a static batch
would hold every episode until its longest sample finished.

If a batch raises, its prompts are retried one by one, so one bad prompt fails only its own
episode. With `seed` set, batch k is generated with seed `seed + (prompts dispatched before it)`;
runs are then reproducible when the batches are (which thread timing does not guarantee).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any

from agent.engines.base import Engine, Sample, SamplingParams


@dataclasses.dataclass(eq=False)
class _Request:
    prompt: list[int]
    params: SamplingParams
    future: Future


class Batcher:
    """Engine facade that batches single-prompt calls from many threads; use as a context manager."""

    def __init__(self, engine: Engine, max_batch: int = 16, max_wait_s: float = 0.02,
                 seed: int | None = None):
        self.engine, self.max_batch, self.max_wait_s, self.seed = engine, max(1, max_batch), max_wait_s, seed
        self.continuous = bool(getattr(engine, "continuous", False))
        self.tokenizer: Any = engine.tokenizer
        self.batch_sizes: list[int] = []
        self._pending: list[_Request] = []
        self._cond = threading.Condition()
        self._live, self._closed, self._dispatched = 0, False, 0
        self._thread = threading.Thread(target=self._loop, name="batcher", daemon=True)

    @property
    def policy_version(self) -> int:
        return self.engine.policy_version

    def load_weights(self, checkpoint_dir: str) -> None:
        self.engine.load_weights(checkpoint_dir)

    def effective_sampling(self) -> dict:
        return self.engine.effective_sampling()

    def end_episode(self, ids: list[int]) -> None:
        end = getattr(self.engine, "end_episode", None)
        if end is not None:
            end(ids)

    def __enter__(self) -> Batcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join()

    @contextmanager
    def episode(self) -> Iterator[None]:
        """Count an episode as live while it runs, so the dispatcher knows whom to wait for."""
        with self._cond:
            self._live += 1
        try:
            yield
        finally:
            with self._cond:
                self._live -= 1
                self._cond.notify_all()

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Sample]:
        if self.continuous:
            with self._cond:
                params = self._seeded(params, len(prompts))
                self.batch_sizes.append(len(prompts))
            return self.engine.generate(prompts, params)
        requests = [_Request(p, params, Future()) for p in prompts]
        with self._cond:
            if self._closed:
                raise RuntimeError("The Batcher is closed; generate inside its `with` block.")
            self._pending += requests
            self._cond.notify_all()
        return [r.future.result() for r in requests]

    def _loop(self) -> None:
        while (batch := self._next_batch()) is not None:
            self._run(batch)

    def _next_batch(self) -> list[_Request] | None:
        with self._cond:
            self._cond.wait_for(lambda: self._pending or self._closed)
            if not self._pending:
                return None
            deadline = time.monotonic() + self.max_wait_s
            while not self._closed and len(self._pending) < min(self.max_batch, self._live):
                if (left := deadline - time.monotonic()) <= 0 or not self._cond.wait(left):
                    break
            params = self._pending[0].params
            batch = [r for r in self._pending if r.params == params][:self.max_batch]
            taken = {id(r) for r in batch}
            self._pending = [r for r in self._pending if id(r) not in taken]
            return batch

    def _run(self, batch: list[_Request]) -> None:
        params = self._seeded(batch[0].params, len(batch))
        self.batch_sizes.append(len(batch))
        try:
            samples = self.engine.generate([r.prompt for r in batch], params)
            if len(samples) != len(batch):
                raise RuntimeError(f"The engine returned {len(samples)} samples for {len(batch)} prompts.")
        except Exception as exc:  # the batch boundary: retry alone, so only the bad prompt fails
            if len(batch) == 1:
                batch[0].future.set_exception(exc)
            for request in batch if len(batch) > 1 else []:
                self._run([request])
            return
        for request, sample in zip(batch, samples):
            request.future.set_result(sample)

    def _seeded(self, params: SamplingParams, n: int) -> SamplingParams:
        if self.seed is None:
            return params
        self._dispatched += n
        return dataclasses.replace(params, seed=self.seed + self._dispatched - n)
