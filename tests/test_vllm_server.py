"""The openai engine against vLLM's own OpenAI-compatible server, started here on 127.0.0.1.

The server is `python -m vllm.entrypoints.openai.api_server` (ARCHITECTURE: `vllm serve` fails
because the CPU distribution is named vllm-cpu) with --enforce-eager and --logprobs-mode
processed_logprobs, and VLLM_SERVER_DEV_MODE=1 so `load_weights` can reload it in place. The
fixture starts it in its own session and stops exactly that process (and its group) by PID.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

pytestmark = pytest.mark.vllm
pytest.importorskip("vllm", reason="vllm is not importable here; on CPU run "
                    "infra/vllm-cpu/setup.sh and use .venv-vllm/bin/python")
torch = pytest.importorskip("torch")

transformers = pytest.importorskip("transformers")

from agent.engines import SamplingParams, is_unfiltered, make_engine  # noqa: E402
from agent.models import build_tiny  # noqa: E402
from swe_rlvr.config import EngineConfig  # noqa: E402

LOGPROB_ATOL = 2e-3  # as in test_vllm_engines.py: vLLM CPU kernels vs one HF forward, fp32

STARTUP_TIMEOUT_S = 300  # ~40 s on an idle CPU box (ARCHITECTURE); more when it is shared


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_ready(url: str, proc: subprocess.Popen, log_path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"vLLM server exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{url}/models", timeout=2):
                return
        except OSError:
            time.sleep(1.0)
    raise RuntimeError(f"vLLM server not ready after {STARTUP_TIMEOUT_S} s:\n{log_path.read_text()[-3000:]}")


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM the server we started (its own process group: the engine-core children go too)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def prompts_of(tok) -> list[list[int]]:
    chats = [[{"role": "user", "content": "List the files."}],
             [{"role": "user", "content": "Fix the failing test in utils.py, then submit."}]]
    return [tok.apply_chat_template(c, add_generation_prompt=True, tokenize=True, return_dict=False)
            for c in chats]


def recompute_logprobs(model_dir, prompt, sample_ids, temperature):
    """The trainer's view: one HF forward over prompt+sample, log_softmax(logits / T) gathered."""
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(torch.tensor([prompt + sample_ids])).logits[0, len(prompt) - 1:-1]  # (S, V)
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)                        # (S, V)
    return logp.gather(-1, torch.tensor(sample_ids)[:, None])[:, 0]                       # (S,)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """Untied embeddings: a vLLM 0.32 server reloads those in place correctly (tied ones it does not)."""
    torch.set_num_threads(1)
    model = build_tiny(tmp_path_factory.mktemp("server") / "tiny", seed=0, tie_embeddings=False)
    gen = json.loads((model / "generation_config.json").read_text())
    gen.update(top_k=5, top_p=0.5, repetition_penalty=1.3, min_p=0.2, temperature=0.3)
    (model / "generation_config.json").write_text(json.dumps(gen))
    return model


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    port = _free_port()
    log_path = tmp_path_factory.mktemp("server-log") / "vllm.log"
    env = dict(os.environ, VLLM_SERVER_DEV_MODE="1", VLLM_CPU_KVCACHE_SPACE="1", OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
           "--host", "127.0.0.1", "--port", str(port), "--enforce-eager", "--dtype", "float32",
           "--logprobs-mode", "processed_logprobs", "--generation-config", "vllm",
           "--max-model-len", "1024", "--seed", "0"]
    with open(log_path, "w") as log_file:
        proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        _wait_ready(url, proc, log_path)
        yield url
    finally:
        _stop(proc)


@pytest.fixture(scope="module")
def engine(server, model_dir):
    return make_engine(EngineConfig(name="openai", model=str(model_dir), base_url=server))


def test_token_ids_and_processed_logprobs_over_http(engine, model_dir):
    prompts = prompts_of(engine.tokenizer)
    for temperature in (1.0, 0.6):
        samples = engine.generate(prompts, SamplingParams(temperature=temperature, max_new_tokens=20, seed=3))
        for prompt, sample in zip(prompts, samples):
            assert len(sample.token_ids) == len(sample.logprobs) > 0
            expected = recompute_logprobs(model_dir, prompt, sample.token_ids, temperature)
            diff = (torch.tensor(sample.logprobs) - expected).abs().max().item()
            assert diff < LOGPROB_ATOL, (temperature, diff)
    assert is_unfiltered(engine.effective_sampling())


def test_group_of_identical_prompts_differs_and_stop_id_is_kept(engine):
    prompt = prompts_of(engine.tokenizer)[0]
    group = engine.generate([prompt] * 4, SamplingParams(max_new_tokens=10, seed=5))
    assert len({tuple(s.token_ids) for s in group}) > 1
    stop = group[0].token_ids[2]
    cut = engine.generate([prompt], SamplingParams(max_new_tokens=10, seed=5, stop_token_ids=(stop,)))[0]
    assert cut.finish_reason == "stop" and cut.token_ids == group[0].token_ids[:group[0].token_ids.index(stop) + 1]


def test_load_weights_reloads_the_server(engine, model_dir, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(model_dir, other)
    build_tiny(tmp_path / "seed1", seed=1, tie_embeddings=False)
    shutil.copy(tmp_path / "seed1" / "model.safetensors", other / "model.safetensors")
    engine.load_weights(str(other))
    assert engine.policy_version == 1
    prompt = prompts_of(engine.tokenizer)[0]
    sample = engine.generate([prompt], SamplingParams(max_new_tokens=12, seed=8))[0]
    new = recompute_logprobs(other, prompt, sample.token_ids, 1.0)
    assert (torch.tensor(sample.logprobs) - new).abs().max().item() < LOGPROB_ATOL
    engine.load_weights(str(model_dir))


def test_load_weights_refuses_tied_embeddings(engine, tmp_path):
    tied = build_tiny(tmp_path / "tied", seed=0)
    with pytest.raises(RuntimeError, match="Restart the server"):
        engine.load_weights(str(tied))
