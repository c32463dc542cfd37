"""The hf engine in a process of its own (`engine.process`): the same samples as in this process,
its spans and memory counted here, its failures named, and no child left behind."""

from __future__ import annotations

import gc
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from agent.engines import Engine, SamplingParams, make_engine  # noqa: E402
from agent.engines.process import EngineProcessError, ProcessEngine, stop_spare  # noqa: E402
from agent.models import build_tiny  # noqa: E402
from swe_rlvr import spans  # noqa: E402
from swe_rlvr.config import EngineConfig  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _cfg(model, **kw) -> EngineConfig:
    return EngineConfig(name="hf", model=str(model), torch_threads=1, max_batch=8, **kw)


@pytest.fixture(scope="module", autouse=True)
def no_spare_after():
    """The module's last spare child stops with it, so its memory does not count in the windows
    of later tests in this worker."""
    yield
    stop_spare()
    assert not spans._watched


@pytest.fixture(scope="module")
def pair(tiny_model_dir):
    """The same engine configuration in this process and in a child of its own."""
    torch.set_num_threads(1)
    here = make_engine(_cfg(tiny_model_dir))
    there = make_engine(_cfg(tiny_model_dir, process=True))
    yield here, there
    there.close()


def _prompts(tok) -> list[list[int]]:
    chats = [[{"role": "user", "content": "List the files."}],
             [{"role": "user", "content": "Fix the failing test in utils.py, then submit."}],
             [{"role": "user", "content": "hi"}]]
    return [tok.apply_chat_template(c, add_generation_prompt=True, tokenize=True, return_dict=False)
            for c in chats]


def _alive(pid: int) -> bool:
    """Running, not a zombie (an exited child that nobody waited for yet is gone for our purposes)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:                                   # no such process
        return False


def test_the_child_samples_what_this_process_samples(pair):
    here, there = pair
    assert isinstance(there, ProcessEngine) and isinstance(there, Engine) and there.continuous
    prompts = _prompts(there.tokenizer)
    params = SamplingParams(temperature=0.8, max_new_tokens=12, seed=7)
    ours, theirs = here.generate(prompts, params), there.generate(prompts, params)
    assert [s.token_ids for s in theirs] == [s.token_ids for s in ours]
    assert [s.finish_reason for s in theirs] == [s.finish_reason for s in ours]
    for a, b in zip(theirs, ours):
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5)
    assert there.effective_sampling() == here.effective_sampling()


def test_concurrent_calls_are_answered_and_the_childs_spans_count_here(pair):
    _, there = pair
    prompt = _prompts(there.tokenizer)[1]
    before = spans.totals()
    results: dict[int, list] = {}

    def call(i: int) -> None:
        results[i] = there.generate([prompt], SamplingParams(max_new_tokens=10, seed=100 + i))

    threads = [threading.Thread(target=call, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == list(range(6))
    sampled = sum(len(r[0].token_ids) for r in results.values())
    done = spans.delta(before, spans.totals())
    # Every sampled token but each row's last was fed by a decode step (or its first, by a prefill).
    assert done["prefill"].calls >= 1 and done["decode"].calls >= 1
    assert done["decode"].tokens == sampled - 6
    assert done["decode"].seconds > 0


def test_a_bad_call_fails_alone_and_the_engine_goes_on(pair):
    _, there = pair
    with pytest.raises(ValueError, match="empty prompt"):
        there.generate([[]], SamplingParams(max_new_tokens=4))
    assert len(there.generate(_prompts(there.tokenizer)[:1], SamplingParams(max_new_tokens=4))) == 1


def test_the_childs_memory_counts_in_this_processs_windows(pair):
    _, there = pair
    child = spans.rss_mb(there.pid)
    assert child > 50                                # torch, transformers and the model
    with spans.rss_window() as window:
        pass
    assert window.peak_mb >= spans.rss_mb() + 0.9 * child


def test_new_weights_reach_the_child(pair, tmp_path):
    here, there = pair
    other = tmp_path / "other"
    shutil.copytree(here.cfg.model, other)
    build_tiny(tmp_path / "seed1", seed=1)
    shutil.copy(tmp_path / "seed1" / "model.safetensors", other / "model.safetensors")
    prompt = _prompts(there.tokenizer)[0]
    params = SamplingParams(max_new_tokens=8, seed=2)
    old = there.generate([prompt], params)[0]
    version = there.policy_version
    there.load_weights(str(other))
    fresh = make_engine(_cfg(other))
    new, expected = there.generate([prompt], params)[0], fresh.generate([prompt], params)[0]
    assert there.policy_version == version + 1
    assert new.token_ids == expected.token_ids
    assert torch.allclose(torch.tensor(new.logprobs), torch.tensor(expected.logprobs), atol=1e-5)
    assert not torch.allclose(torch.tensor(new.logprobs[:1]), torch.tensor(old.logprobs[:1]))


def test_a_model_that_does_not_load_is_refused_and_leaves_no_child(tmp_path, tiny_model_dir):
    broken = tmp_path / "broken"
    shutil.copytree(tiny_model_dir, broken)
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")
    children = set(_children())
    with pytest.raises(Exception, match="(?i)safetensors|header|deserializ"):
        make_engine(_cfg(broken, process=True))
    assert not [pid for pid in set(_children()) - children if _alive(pid)]


def test_a_dead_child_fails_its_calls_by_name(tiny_model_dir):
    engine = make_engine(_cfg(tiny_model_dir, process=True))
    os.kill(engine.pid, signal.SIGKILL)
    with pytest.raises(EngineProcessError, match="engine.process=false"):
        engine.generate(_prompts(engine.tokenizer)[:1], SamplingParams(max_new_tokens=4))
    del engine                                           # its release finds the child gone
    gc.collect()


def test_a_dropped_engines_child_is_the_next_ones_and_a_second_spare_stops(tiny_model_dir):
    first = make_engine(_cfg(tiny_model_dir, process=True))
    pid = first.pid
    del first
    gc.collect()
    assert _alive(pid)                                   # kept, its model freed
    again = make_engine(_cfg(tiny_model_dir, process=True, seed=5))
    other = make_engine(_cfg(tiny_model_dir, process=True))
    assert again.pid == pid and other.pid != pid         # the spare served one, once
    prompt = _prompts(again.tokenizer)[:1]
    params = SamplingParams(max_new_tokens=6, seed=1)
    assert again.generate(prompt, params)[0].token_ids == other.generate(prompt, params)[0].token_ids
    pids = (again.pid, other.pid)
    del again, other
    gc.collect()
    assert sum(_alive(p) for p in pids) == 1             # one spare at most


def test_a_script_without_a_main_guard_runs_once(tiny_model_dir, tmp_path):
    """The child is a fresh `python -m agent.engines.process`: it does not import the caller's
    main module again, as multiprocessing's spawn would (starting the caller's run twice)."""
    script = tmp_path / "run.py"
    script.write_text(
        "from agent.engines import SamplingParams, make_engine\n"
        "from swe_rlvr.config import EngineConfig\n"
        "print('started', flush=True)\n"
        f"engine = make_engine(EngineConfig(name='hf', model={str(tiny_model_dir)!r}, process=True,"
        " torch_threads=1))\n"
        "ids = engine.tokenizer('hi')['input_ids']\n"
        "print(len(engine.generate([ids], SamplingParams(max_new_tokens=3))), flush=True)\n")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                         cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["started", "1"]


def test_process_is_for_the_hf_engine_only():
    with pytest.raises(ValueError, match="engine.process"):
        make_engine(EngineConfig(name="vllm", model="m", process=True))


def _children() -> list[int]:
    me = str(os.getpid())
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    if fh.read().split(")")[-1].split()[1] == me:
                        out.append(int(entry))
            except OSError:
                pass
    return out
