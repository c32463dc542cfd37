"""The hf engine on a tiny random Qwen2: log-probs the trainer can recompute, filters forced off."""

from __future__ import annotations

import json
import shutil

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from agent.engines import Engine, SamplingParams, is_unfiltered, make_engine  # noqa: E402
from agent.models import build_tiny  # noqa: E402
from swe_rlvr.config import EngineConfig  # noqa: E402

LOGPROB_ATOL = 1e-4  # fp32 on CPU: KV-cached + left-padded vs one fresh forward differ by ~1e-6


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    """The session's tiny Qwen2 (tests/conftest.py: build_tiny with its defaults, seed 0)."""
    torch.set_num_threads(1)  # the CI box is shared; one thread is also the fastest here
    return tiny_model_dir


@pytest.fixture(scope="module")
def engine(tiny):
    return make_engine(EngineConfig(name="hf", model=str(tiny), torch_threads=1, max_batch=8))


def _prompts(tok) -> list[list[int]]:
    chats = [[{"role": "user", "content": "List the files."}],
             [{"role": "system", "content": "You are a careful engineer."},
              {"role": "user", "content": "Fix the failing test in utils.py, then submit."}],
             [{"role": "user", "content": "hi"}]]
    return [tok.apply_chat_template(c, add_generation_prompt=True, tokenize=True, return_dict=False)
            for c in chats]


def _recompute_logprobs(model_dir, prompt, sample_ids, temperature):
    """What the trainer does: one fresh forward over prompt+sample, log_softmax(logits / T) gathered."""
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    ids = torch.tensor([prompt + sample_ids])                              # (1, P+S)
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1:-1].float()          # (S, V): predicts each sampled id
    logp = torch.log_softmax(logits / temperature, dim=-1)                 # (S, V)
    return logp.gather(-1, torch.tensor(sample_ids)[:, None])[:, 0]        # (S,)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_match_a_fresh_forward(engine, tiny, temperature):
    prompts = _prompts(engine.tokenizer)   # three different lengths: exercises left padding
    samples = engine.generate(prompts, SamplingParams(temperature=temperature, max_new_tokens=24, seed=3))
    assert len(samples) == 3
    for prompt, sample in zip(prompts, samples):
        assert len(sample.token_ids) == len(sample.logprobs) > 0
        assert sample.finish_reason in ("stop", "length")
        expected = _recompute_logprobs(tiny, prompt, sample.token_ids, temperature)
        got = torch.tensor(sample.logprobs)
        assert torch.allclose(got, expected, atol=LOGPROB_ATOL), (got - expected).abs().max()


def test_seed_reproduces_and_batches_differ(engine):
    prompt = _prompts(engine.tokenizer)[0]
    params = SamplingParams(max_new_tokens=16, seed=11)
    first = engine.generate([prompt] * 4, params)
    again = engine.generate([prompt] * 4, params)
    assert [s.token_ids for s in first] == [s.token_ids for s in again]
    # G copies of one prompt must not be G copies of one sample (GRPO groups need variety).
    assert len({tuple(s.token_ids) for s in first}) > 1


def test_stops_per_sequence_and_keeps_the_stop_token(engine):
    prompt = _prompts(engine.tokenizer)[0]
    free = engine.generate([prompt] * 4, SamplingParams(max_new_tokens=12, seed=5))
    # Pick a stop id that row 0 sampled at step 3: row 0 must end exactly there, with it kept.
    stop = free[0].token_ids[2]
    stopped = engine.generate([prompt] * 4, SamplingParams(max_new_tokens=12, seed=5, stop_token_ids=(stop,)))
    first = stopped[0]
    cut = first.token_ids.index(stop)
    assert first.token_ids[-1] == stop and len(first.token_ids) == cut + 1 <= 3
    assert first.finish_reason == "stop"
    for sample in stopped:
        assert stop not in sample.token_ids[:-1]
        assert (sample.finish_reason == "stop") == (sample.token_ids[-1] == stop) or \
            sample.token_ids[-1] in engine.eos_ids
        if sample.finish_reason == "length":
            assert len(sample.token_ids) == 12


def test_filters_forced_off_whatever_generation_config_says(tiny, tmp_path):
    """Nebius saw training collapse when an upgrade silently enabled top-k/min-p: ignore them here."""
    noisy = tmp_path / "noisy"
    shutil.copytree(tiny, noisy)
    gen_cfg = json.loads((noisy / "generation_config.json").read_text())
    gen_cfg.update(top_k=5, top_p=0.5, repetition_penalty=1.3, min_p=0.2, temperature=0.3)
    (noisy / "generation_config.json").write_text(json.dumps(gen_cfg))
    engine = make_engine(EngineConfig(name="hf", model=str(noisy), torch_threads=1))
    assert engine.model.generation_config.top_k == 5   # the checkpoint really asks for the filters
    knobs = engine.effective_sampling()
    assert is_unfiltered(knobs) and knobs["temperature"] == 1.0
    prompt = _prompts(engine.tokenizer)[1]
    samples = engine.generate([prompt] * 6, SamplingParams(temperature=1.0, max_new_tokens=20, seed=0))
    for sample in samples:
        expected = _recompute_logprobs(noisy, prompt, sample.token_ids, 1.0)
        assert torch.allclose(torch.tensor(sample.logprobs), expected, atol=LOGPROB_ATOL)
    # With top_k=5 every token would be among the 5 likeliest; a random 2k-vocab model at T=1
    # samples well outside them (probability of all 120 draws landing in the top 5 is ~0).
    ranks = []
    model = engine.model
    for sample in samples:
        ids = torch.tensor([prompt + sample.token_ids])
        with torch.no_grad():
            logits = model(ids).logits[0, len(prompt) - 1:-1]
        ranks += (logits > logits.gather(-1, torch.tensor(sample.token_ids)[:, None])).sum(-1).tolist()
    assert max(ranks) >= 5


def test_load_weights_bumps_version_and_changes_the_policy(tiny, tmp_path):
    engine = make_engine(EngineConfig(name="hf", model=str(tiny), torch_threads=1))
    other = tmp_path / "other"
    shutil.copytree(tiny, other)                      # same tokenizer and shapes ...
    build_tiny(tmp_path / "seed1", seed=1)            # ... other random weights
    shutil.copy(tmp_path / "seed1" / "model.safetensors", other / "model.safetensors")
    assert engine.policy_version == 0
    engine.load_weights(str(other))
    assert engine.policy_version == 1
    prompt = _prompts(engine.tokenizer)[0]
    sample = engine.generate([prompt], SamplingParams(max_new_tokens=8, seed=2))[0]
    got = torch.tensor(sample.logprobs)
    assert torch.allclose(got, _recompute_logprobs(other, prompt, sample.token_ids, 1.0), atol=LOGPROB_ATOL)
    assert not torch.allclose(got, _recompute_logprobs(tiny, prompt, sample.token_ids, 1.0), atol=LOGPROB_ATOL)


def test_hf_engine_satisfies_the_protocol(engine):
    assert isinstance(engine, Engine) and engine.policy_version == 0


def test_unknown_engine_names_the_choices():
    with pytest.raises(ValueError, match="choose one of: hf, vllm, openai"):
        make_engine(EngineConfig(name="vlm"))
