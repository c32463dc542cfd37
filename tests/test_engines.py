"""The hf engine on a tiny random Qwen2: log-probs the trainer can recompute, filters forced off."""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from agent.engines import Engine, SamplingParams, is_unfiltered, make_engine  # noqa: E402
from agent.models import build_tiny  # noqa: E402
from swe_rlvr.config import EngineConfig  # noqa: E402
from swe_rlvr.precision import cpu_bf16  # noqa: E402

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


# --------------------------------------------------------------------------- the prefix cache


def _two_turns(model_dir, prefix_cache_gb: float, stop: tuple[int, ...] = ()):
    """Turn 1 on three prompts, then turn 2 on prompt + reply + an observation, each call with a
    fixed sampling seed (the tiny model's greedy reply repeats one token)."""
    eng = make_engine(EngineConfig(name="hf", model=str(model_dir), torch_threads=1, max_batch=8,
                                   prefix_cache_gb=prefix_cache_gb))
    params = SamplingParams(temperature=1.0, max_new_tokens=16, stop_token_ids=stop, seed=5)
    first = _prompts(eng.tokenizer)
    replies = eng.generate(first, params)
    second = [p + r.token_ids + [40, 41, 42] for p, r in zip(first, replies)]
    return eng, first, replies, eng.generate(second, dataclasses.replace(params, seed=6))


def test_prefix_cache_runs_only_new_tokens_and_samples_what_a_full_prefill_samples(tiny):
    """Turn 2 continues each row from its turn-1 cache (prompt + the 15 reply tokens fed back;
    the 16th was sampled last, never fed) and samples the same tokens as without the cache."""
    plain = _two_turns(tiny, 0.0)
    eng, first, replies, second = _two_turns(tiny, 1.0)
    assert eng.prefix_cache.hits == 3 and eng.prefix_cache.misses == 3    # turn 1 found nothing
    fed = [min(len(r.token_ids), 15) for r in replies]
    assert eng.prefix_cache.reused_tokens == sum(len(p) + n for p, n in zip(first, fed))
    for cached, full in zip(second, plain[3]):
        assert cached.token_ids == full.token_ids
        assert max(abs(a - b) for a, b in zip(cached.logprobs, full.logprobs)) < LOGPROB_ATOL


def test_prefix_cache_keeps_only_what_a_row_really_fed(tiny):
    """Rows that stop early keep stepping on padding; their cache entry ends at their stop
    token. A stop id from row 0's reply (its first occurrence there at index k >= 1)
    makes the rows end at different steps."""
    _, _, replies, _ = _two_turns(tiny, 0.0)
    row0 = replies[0].token_ids
    for k in (k for k in range(1, len(row0)) if row0[k] not in row0[:k]):
        plain = _two_turns(tiny, 0.0, (row0[k],))
        if len({len(r.token_ids) for r in plain[2]}) > 1:
            break
    else:
        pytest.fail("no stop id from row 0's reply makes the rows end at different steps")
    eng, first, cut, second = _two_turns(tiny, 1.0, (row0[k],))
    assert cut[0].finish_reason == "stop" and len(cut[0].token_ids) == k + 1
    assert eng.prefix_cache.hits == 3
    for cached, full in zip(second, plain[3]):
        assert cached.token_ids == full.token_ids


def test_prefix_cache_batches_new_prompts_beside_continued_ones(tiny):
    """A call mixing continued rows (cache hits, run alone) with new prompts (misses, run as
    one padded batch) samples what the same call samples without the cache."""
    def run(prefix_cache_gb: float):
        eng = make_engine(EngineConfig(name="hf", model=str(tiny), torch_threads=1, max_batch=8,
                                       prefix_cache_gb=prefix_cache_gb))
        params = SamplingParams(temperature=1.0, max_new_tokens=12, seed=5)
        first = _prompts(eng.tokenizer)
        replies = eng.generate(first[:2], params)
        mixed = [first[0] + replies[0].token_ids + [40, 41], first[2],
                 first[1] + replies[1].token_ids + [42], first[2][:-1] + [43, 44, 45]]
        return eng, eng.generate(mixed, dataclasses.replace(params, seed=6))

    plain = run(0.0)[1]
    eng, cached = run(1.0)
    assert eng.prefix_cache.hits == 2 and eng.prefix_cache.misses == 2 + 2
    for got, want in zip(cached, plain):
        assert got.token_ids == want.token_ids
        assert max(abs(a - b) for a, b in zip(got.logprobs, want.logprobs)) < LOGPROB_ATOL


def test_equal_prompts_are_prefilled_once_and_sample_as_their_own_rows(tiny, monkeypatch):
    """A group's G first turns are one prompt: the padded prefill runs it once (plus the other
    prompt), each copy still samples from its own seed, and each copy's log-probs are a fresh
    forward's. The recorded prefill work counts the tokens that ran, not the copies."""
    from swe_rlvr import spans
    eng = make_engine(EngineConfig(name="hf", model=str(tiny), torch_threads=1, max_batch=8))
    prompts = _prompts(eng.tokenizer)
    group = [prompts[0]] * 3 + [prompts[1]]
    widths: list[int] = []
    real = eng._prefill_padded
    monkeypatch.setattr(eng, "_prefill_padded", lambda ps: widths.append(len(ps)) or real(ps))
    before = spans.totals()
    got = eng.generate(group, SamplingParams(max_new_tokens=10, seed=11))
    assert widths == [2]
    prefill = spans.delta(before, spans.totals())["prefill"]
    assert (prefill.tokens, prefill.logits) == (len(prompts[0]) + len(prompts[1]), 2)
    assert len({tuple(s.token_ids) for s in got[:3]}) > 1, "the copies sampled alike: one seed"
    for i, (prompt, sample) in enumerate(zip(group, got)):
        alone = eng.generate([prompt], SamplingParams(max_new_tokens=10, seed=11 + i))[0]
        assert alone.token_ids == sample.token_ids
        expected = _recompute_logprobs(tiny, prompt, sample.token_ids, 1.0)
        assert torch.allclose(torch.tensor(sample.logprobs), expected, atol=LOGPROB_ATOL)


def test_new_weights_empty_the_prefix_cache(tiny):
    eng, *_ = _two_turns(tiny, 1.0)
    assert len(eng.prefix_cache) == 3
    eng.load_weights(str(tiny))
    assert len(eng.prefix_cache) == 0


def test_prefix_cache_takes_the_longest_proper_prefix_and_keeps_to_its_budget():
    from agent.engines.kvcache import PrefixCache
    kv = lambda n: [(torch.zeros(1, 1, n, 2), torch.zeros(1, 1, n, 2))]  # noqa: E731  16 n bytes
    cache = PrefixCache(budget_bytes=16 * 10)                # room for 10 cached tokens
    cache.put([1, 2], kv(2))
    cache.put([1, 2, 3], kv(3))
    assert cache.bytes == 16 * 5
    n, got = cache.take([1, 2, 3, 4])                        # the longest proper prefix: [1, 2, 3]
    assert n == 3 and got[0][0].shape[2] == 3 and cache.bytes == 16 * 2
    assert cache.take([1, 2]) == (0, None)                   # nothing is left to run after [1, 2]
    cache.put([7] * 9, kv(9))                                # 2 + 9 tokens > 10: [1, 2] goes
    assert len(cache) == 1 and cache.bytes == 16 * 9
    assert cache.take([5, 6]) == (0, None) and cache.misses == 2 and cache.hits == 1


def test_a_finished_episode_frees_its_prefix_cache_entries():
    """The last turn's entry would never be continued; it goes when the episode ends, other
    episodes' entries stay."""
    from agent.engines.kvcache import PrefixCache
    kv = lambda n: [(torch.zeros(1, 1, n, 2), torch.zeros(1, 1, n, 2))]  # noqa: E731  16 n bytes
    cache = PrefixCache(budget_bytes=16 * 100)
    cache.put([1, 2, 3], kv(3))                              # episode A, after its last reply
    cache.put([1, 9], kv(2))                                 # episode B (shares token 1 only)
    assert cache.discard([1, 2, 3, 4, 5]) == 16 * 3          # A ends with an observation on top
    assert len(cache) == 1 and cache.bytes == 16 * 2 and cache.take([1, 9, 7])[0] == 2


def test_engine_drops_an_ended_episodes_cache(tiny):
    eng, *_ = _two_turns(tiny, 1.0)
    ids = max((entry[0] for entry in eng.prefix_cache._entries.values()), key=len)
    before = len(eng.prefix_cache)
    eng.end_episode(list(ids) + [5])
    assert len(eng.prefix_cache) < before


def test_growing_layers_hold_what_concatenation_would():
    """Appends of 5, 1, 1 and 200 positions (the last past the first capacity, max(2*5, 5+64) =
    69) read back exactly as the concatenated tensors, the cache's length included."""
    from transformers import Qwen2Config

    from agent.engines.kvcache import GrowingLayer, growing_cache
    cache = growing_cache(Qwen2Config(num_hidden_layers=2, num_attention_heads=2,
                                      num_key_value_heads=1, hidden_size=8))
    assert all(isinstance(layer, GrowingLayer) for layer in cache.layers)
    parts = [torch.randn(2, 1, n, 4) for n in (5, 1, 1, 200)]
    for part in parts:
        keys, values = cache.update(part, -part, 1)
    assert torch.equal(keys, torch.cat(parts, dim=2)) and torch.equal(values, -keys)
    assert cache.get_seq_length(1) == 207 and cache.layers[1]._kbuf.shape[2] == 2 * 207


def test_inverse_cdf_sampling_draws_each_id_at_its_probability():
    """probs (0.1, 0, 0.6, 0.3): 40,000 draws land within 4 standard errors of each probability
    (sd of a frequency at p = 0.6: sqrt(0.24 / 40000) = 0.0024); the zero-probability id and a
    one-hot row's other ids are never drawn."""
    from agent.engines.continuous import inverse_cdf
    probs = torch.tensor([[0.1, 0.0, 0.6, 0.3]] * 20_000 + [[0.0, 0.0, 0.0, 1.0]] * 20_000)
    gen = torch.Generator().manual_seed(0)
    drawn = torch.cat([inverse_cdf(probs, torch.rand(len(probs), generator=gen))
                       for _ in range(2)])                                          # (80000,)
    mixed = torch.cat([drawn[:20_000], drawn[40_000:60_000]])
    freq = torch.bincount(mixed, minlength=4).double() / len(mixed)
    assert freq[1] == 0.0
    assert torch.allclose(freq, torch.tensor([0.1, 0.0, 0.6, 0.3], dtype=torch.float64), atol=0.01)
    assert set(torch.cat([drawn[20_000:40_000], drawn[60_000:]]).tolist()) == {3}


@pytest.mark.parametrize("overrides, dtype", [
    ({"name": "hf", "device": "cpu"}, "bfloat16" if cpu_bf16() else "float32"),
    ({"name": "hf", "device": "cpu", "dtype": "bfloat16"}, "bfloat16"),
    ({"name": "vllm-server"}, "float32"),
    ({"name": "vllm"}, None),                 # the checkpoint's dtype
    ({"name": "openai"}, None),               # a user's server: unknown
    ({"name": "scripted", "dtype": "float32"}, None),
])
def test_sampling_dtype_is_known_only_where_the_run_sets_it(overrides, dtype):
    from swe_rlvr.precision import sampling_dtype
    assert sampling_dtype(EngineConfig(**overrides)) == dtype


def test_stopped_rows_leave_the_batch_with_their_cache_intact(tiny, monkeypatch):
    """Half the vocabulary as stop ids: rows stop at different early steps, so the batch drops
    its stopped rows (keep_rows runs) while others go on. Every sample's log-probs are still a
    fresh forward's, and every stored prefix-cache entry holds the keys and values a fresh
    forward computes over its ids (the stop token included where it was fed)."""
    import agent.engines.continuous as continuous
    calls = []
    real = continuous.keep_rows
    monkeypatch.setattr(continuous, "keep_rows", lambda cache, index: (calls.append(len(index)),
                                                                       real(cache, index)))
    eng = make_engine(EngineConfig(name="hf", model=str(tiny), torch_threads=1, max_batch=8,
                                   prefix_cache_gb=1.0))
    vocab = eng.model.config.vocab_size
    prompts = [p for p in _prompts(eng.tokenizer) for _ in range(3)]           # 9 rows
    samples = eng.generate(prompts, SamplingParams(max_new_tokens=16, seed=2,
                                                   stop_token_ids=tuple(range(0, vocab, 2))))
    assert calls and len({len(s.token_ids) for s in samples}) > 2
    for prompt, sample in zip(prompts, samples):
        expected = _recompute_logprobs(tiny, prompt, sample.token_ids, 1.0)
        assert torch.allclose(torch.tensor(sample.logprobs), expected, atol=LOGPROB_ATOL)
    entries = list(eng.prefix_cache._entries.values())
    assert len(entries) == len(prompts)
    for ids, kv in entries:
        with torch.no_grad():
            fresh = eng.model(input_ids=torch.tensor([list(ids)]), use_cache=True).past_key_values
        for (keys, values), layer in zip(kv, fresh.layers):
            assert torch.allclose(keys, layer.keys, atol=LOGPROB_ATOL)
            assert torch.allclose(values, layer.values, atol=LOGPROB_ATOL)



def test_decode_steps_run_on_their_own_thread_count(tiny):
    """engine.decode_threads: prefills keep torch_threads, decode steps (one token a row over the
    cache) switch to decode_threads, and the engine's count comes back for the next prefill."""
    before = torch.get_num_threads()
    try:
        eng = make_engine(EngineConfig(name="hf", model=str(tiny), torch_threads=2,
                                       decode_threads=1, prefix_cache_gb=0))
        prefills: list[int] = []                          # torch threads of each call
        decodes: list[int] = []
        forward, decode = eng.model.forward, eng.decode
        eng.model.forward = lambda *a, **kw: (prefills.append(torch.get_num_threads()),
                                              forward(*a, **kw))[1]
        eng.decode = lambda *a: (decodes.append(torch.get_num_threads()), decode(*a))[1]
        prompt = _prompts(eng.tokenizer)[0]
        for seed in (1, 2):                                # a second call prefills after decoding
            eng.generate([prompt] * 2, SamplingParams(max_new_tokens=6, seed=seed))
        assert eng.lean is not None               # decode steps run the lean step, not forward
        assert prefills == [2, 2] and decodes and set(decodes) == {1}
    finally:
        torch.set_num_threads(before)
