"""The openai engine against vLLM's own OpenAI-compatible server, started here on 127.0.0.1.

The server comes from `vllm_support.vllm_server` (shared with test_teacher_server.py), in dev mode
(VLLM_SERVER_DEV_MODE=1) so `load_weights` can reload it in place; it is started in its own
session and exactly that process (and its group) is stopped by PID.
"""

from __future__ import annotations

import json
import shutil

import pytest

pytestmark = pytest.mark.vllm
pytest.importorskip("vllm", reason="vllm is not importable here; on CPU run "
                    "infra/vllm-cpu/setup.sh and use .venv-vllm/bin/python")
torch = pytest.importorskip("torch")

transformers = pytest.importorskip("transformers")

from agent.engines import SamplingParams, is_unfiltered, make_engine  # noqa: E402
from agent.models import build_tiny  # noqa: E402
from swe_rlvr.config import EngineConfig  # noqa: E402
from vllm_support import vllm_server  # noqa: E402

LOGPROB_ATOL = 2e-3  # as in test_vllm_engines.py: vLLM CPU kernels vs one HF forward, fp32


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
    with vllm_server(model_dir, tmp_path_factory.mktemp("server-log"), dev_mode=True) as url:
        yield url


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
