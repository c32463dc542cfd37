"""Continuous batching in the hf engine: rows join a running batch, leave it when they stop, and
sample from their own generators; an idle or dropped engine holds nothing."""

from __future__ import annotations

import dataclasses
import time

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from agent.engines import SamplingParams, make_engine  # noqa: E402
from swe_rlvr.config import EngineConfig  # noqa: E402
from test_engines import LOGPROB_ATOL, _prompts, _recompute_logprobs, engine, tiny  # noqa: E402,F401


def test_a_call_joins_the_running_batch_and_returns_before_it(tiny):
    """Continuous batching: a call made while another is mid-decode joins its batch (the two
    share decode steps), returns as soon as its own rows stop, and both calls' log-probs are a
    fresh forward's, although the rows were re-padded into one batch when it joined."""
    import threading
    eng = make_engine(EngineConfig(name="hf", model=str(tiny), torch_threads=1, max_batch=8,
                                   prefix_cache_gb=1.0))
    prompts = _prompts(eng.tokenizer)
    started = threading.Event()
    real_step = eng.scheduler._step

    def step(engine, batch):
        started.set()
        return real_step(engine, batch)

    eng.scheduler._step = step
    long_result: dict = {}
    long_call = threading.Thread(target=lambda: long_result.setdefault("samples", eng.generate(
        prompts[:2], SamplingParams(max_new_tokens=200, seed=1))))
    long_call.start()
    assert started.wait(30)
    short = eng.generate([prompts[2]], SamplingParams(max_new_tokens=3, seed=2))
    assert long_call.is_alive(), "the short call waited for the long one's batch to end"
    long_call.join()
    assert len(short[0].token_ids) <= 3
    for prompt, sample in zip(prompts, long_result["samples"] + short):
        expected = _recompute_logprobs(tiny, prompt, sample.token_ids, 1.0)
        assert torch.allclose(torch.tensor(sample.logprobs), expected, atol=LOGPROB_ATOL)


def test_a_request_samples_the_same_alone_or_among_others(tiny):
    """Each request draws from its own seeded generator: prompt i of a call at seed s samples what
    a call of that prompt alone at seed s + i samples, whatever else shares its steps."""
    eng = make_engine(EngineConfig(name="hf", model=str(tiny), torch_threads=1, max_batch=8,
                                   prefix_cache_gb=0))
    prompts = _prompts(eng.tokenizer)
    params = SamplingParams(max_new_tokens=16, seed=7)
    together = eng.generate(prompts, params)
    for i, prompt in enumerate(prompts):
        alone = eng.generate([prompt], dataclasses.replace(params, seed=7 + i))[0]
        assert alone.token_ids == together[i].token_ids


@pytest.mark.parametrize("overlap", ["beside", "inline"])
def test_more_prompts_than_max_batch_are_admitted_as_rows_leave(tiny, overlap):
    """max_batch 2, five prompts: never more than two rows decode at once, and every prompt is
    answered in its place, whether prefills run beside the decode steps or between them."""
    eng = make_engine(EngineConfig(name="hf", model=str(tiny), torch_threads=1, max_batch=2,
                                   prefix_cache_gb=0, overlap_prefill=overlap))
    widths = []
    real_step = eng.scheduler._step
    eng.scheduler._step = lambda engine, batch: (widths.append(len(batch.running)),
                                                 real_step(engine, batch))[1]
    prompts = _prompts(eng.tokenizer)
    prompts += prompts[:2]
    samples = eng.generate(prompts, SamplingParams(max_new_tokens=6, seed=3))
    assert len(samples) == 5 and max(widths) == 2
    alone = [eng.generate([p], SamplingParams(max_new_tokens=6, seed=3 + i))[0]
             for i, p in enumerate(prompts)]
    assert [s.token_ids for s in samples] == [s.token_ids for s in alone]


def test_a_joining_prefill_runs_while_the_batch_keeps_decoding(tiny, monkeypatch):
    """`engine.overlap_prefill`: the second call's prefill runs on the prefill thread and does not
    finish until the first call's rows have taken 3 more decode steps, which they could not if
    the prefill ran between the steps (the call would then time out). Both calls' log-probs are
    still a fresh forward's."""
    import threading

    import agent.engines.continuous as continuous
    eng = make_engine(EngineConfig(name="hf", model=str(tiny), torch_threads=1, max_batch=8,
                                   prefix_cache_gb=1.0, overlap_prefill="beside"))
    prompts = _prompts(eng.tokenizer)
    steps, started = [], threading.Event()
    real_step, real_prefill = eng.scheduler._step, continuous.prefill

    def step(engine, batch):
        steps.append(threading.current_thread().name)
        started.set()
        return real_step(engine, batch)

    def prefill(engine, requests):
        threads = {"prefill": threading.current_thread().name}
        if requests[0].prompt == prompts[2]:
            seen = len(steps)
            deadline = time.monotonic() + 30
            while len(steps) < seen + 3 and time.monotonic() < deadline:
                time.sleep(0.01)
            threads["steps_beside"] = len(steps) - seen
        calls.append(threads)
        return real_prefill(engine, requests)

    calls: list = []
    eng.scheduler._step = step
    monkeypatch.setattr(continuous, "prefill", prefill)
    call, first = _in_background(lambda: eng.generate(prompts[:2], SamplingParams(
        max_new_tokens=300, seed=1)))
    assert started.wait(30)
    second = eng.generate([prompts[2]], SamplingParams(max_new_tokens=3, seed=2))
    call.join()
    assert {c["prefill"] for c in calls} == {"hf-prefill"} and set(steps) == {"hf-engine"}
    assert calls[-1]["steps_beside"] >= 3
    for prompt, sample in zip(prompts, first["result"] + second):
        expected = _recompute_logprobs(tiny, prompt, sample.token_ids, 1.0)
        assert torch.allclose(torch.tensor(sample.logprobs), expected, atol=LOGPROB_ATOL)


def test_a_failed_prefill_fails_its_own_call_and_the_batch_goes_on(tiny, monkeypatch):
    """A prefill that raises on the prefill thread answers its requests with the error; the rows
    already decoding finish, and the engine serves the next call."""
    import threading

    import agent.engines.continuous as continuous
    eng = make_engine(EngineConfig(name="hf", model=str(tiny), torch_threads=1, max_batch=8,
                                   prefix_cache_gb=0, overlap_prefill="beside"))
    prompts = _prompts(eng.tokenizer)
    real_prefill, started = continuous.prefill, threading.Event()

    def prefill(engine, requests):
        if requests[0].prompt == prompts[2]:
            raise RuntimeError("prefill broke")
        return real_prefill(engine, requests)

    real_step = eng.scheduler._step
    eng.scheduler._step = lambda engine, batch: (started.set(), real_step(engine, batch))[1]
    monkeypatch.setattr(continuous, "prefill", prefill)
    call, first = _in_background(lambda: eng.generate(prompts[:1], SamplingParams(
        max_new_tokens=100, seed=1)))
    assert started.wait(30)
    with pytest.raises(RuntimeError, match="prefill broke"):
        eng.generate([prompts[2]], SamplingParams(max_new_tokens=3, seed=2))
    call.join()
    assert first["result"][0].token_ids
    assert eng.generate([prompts[1]], SamplingParams(max_new_tokens=3, seed=3))[0].token_ids


def test_prefills_run_beside_the_decode_steps_on_a_cpu_unless_told_otherwise():
    from agent.engines.continuous import overlaps
    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    assert overlaps("auto", cpu) and not overlaps("auto", gpu)
    assert overlaps("beside", gpu) and not overlaps("inline", cpu)


def _in_background(call):
    """Start `call` on a thread of its own: (the thread, a dict that gets its "result")."""
    import threading
    out: dict = {}
    thread = threading.Thread(target=lambda: out.setdefault("result", call()))
    thread.start()
    return thread, out


def test_an_idle_engine_holds_no_thread(engine):
    """The decode thread ends with its work: an engine dropped between stages frees its memory."""
    engine.generate(_prompts(engine.tokenizer)[:1], SamplingParams(max_new_tokens=2, seed=1))
    thread = engine.scheduler._thread
    if thread is not None:
        thread.join(5)
    assert engine.scheduler._thread is None


def test_a_dropped_engine_is_freed_without_a_garbage_collection(tiny):
    """No reference cycle holds an engine: the last reference gone, its weights go with it."""
    import gc
    import weakref
    eng = make_engine(EngineConfig(name="hf", model=str(tiny), torch_threads=1))
    eng.generate(_prompts(eng.tokenizer)[:2], SamplingParams(max_new_tokens=3, seed=1))
    thread = eng.scheduler._thread
    if thread is not None:
        thread.join(5)
    ref = weakref.ref(eng)
    gc.disable()
    try:
        del eng
        assert ref() is None
    finally:
        gc.enable()


def test_stages_on_one_policy_hold_one_engine_until_the_last_lets_go(tiny):
    """`agent.engines.held`: two stages holding the same engine config get one engine (one copy of
    the weights, one decode batch for both), which outlives the first holder and is dropped with
    the last; another policy directory gets its own."""
    import threading

    from agent.engines.held import held, holders
    cfg = EngineConfig(name="hf", model=str(tiny), torch_threads=1, max_batch=8, prefix_cache_gb=0)
    other = dataclasses.replace(cfg, model=str(tiny) + "/")
    with held(cfg) as first:
        with held(dataclasses.replace(cfg)) as second, held(other) as third:
            assert second is first and third is not first
            assert holders(cfg) == 2 and holders(other) == 1
            prompts = _prompts(first.tokenizer)
            out: dict = {}
            call = threading.Thread(target=lambda: out.setdefault("a", second.generate(
                prompts[:1], SamplingParams(max_new_tokens=8, seed=3))))
            call.start()
            b = first.generate(prompts[1:2], SamplingParams(max_new_tokens=8, seed=4))
            call.join()
            assert out["a"][0].token_ids and b[0].token_ids
        assert holders(cfg) == 1 and holders(other) == 0
    assert holders(cfg) == 0
    with held(cfg) as fresh:
        assert fresh is not first
