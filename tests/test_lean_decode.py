"""The lean decode step (`agent.engines.lean`) against transformers' forward over the same cache.

Both run from one prefill of a left-padded batch into the engine's growing cache; then each step
feeds both the same tokens, through buffers that fill up and regrow, and past a dropped row. The
lean step claims the same forward in the same order of operations, so its logits must match
transformers' to the dtype's rounding (on the machines it was written on they are equal bit for
bit), in fp32 and in bf16, on a Qwen2 (biased q/k/v, the engine's tiny test model) and on a Llama
(SmolLM2's architecture) with llama3 rope scaling and biased linears everywhere.
"""

from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from agent.engines import SamplingParams, attention, lean, make_engine  # noqa: E402
from agent.engines.hf import lean_decoder  # noqa: E402
from agent.engines.kvcache import growing_cache, keep_rows  # noqa: E402
from agent.engines.packed import available, pack_linears  # noqa: E402
from swe_rlvr.config import EngineConfig  # noqa: E402

NATIVE_BF16 = any(getattr(torch.cpu, probe, lambda: False)()
                  for probe in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"))
"""What `swe_rlvr.precision.cpu_bf16` asks of the CPU (the tests turn that function off)."""


LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 64}


def llama(**overrides) -> torch.nn.Module:
    """A random 2-layer Llama (GQA 4 over 2 heads), fp32, on the grouped decode attention."""
    config = transformers.LlamaConfig(**{
        "vocab_size": 300, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 512,
        "attention_bias": True, "mlp_bias": True, "tie_word_embeddings": True,
        "rope_parameters": LLAMA3_ROPE, **overrides})
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    model.set_attn_implementation(attention.register())
    return model


def qwen2(tiny_model_dir, dtype: torch.dtype) -> torch.nn.Module:
    return transformers.AutoModelForCausalLM.from_pretrained(
        tiny_model_dir, dtype=dtype, attn_implementation=attention.register()).eval()


def prefill(model, ids: torch.Tensor, mask: torch.Tensor):
    out = model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
                past_key_values=growing_cache(model.config), use_cache=True, logits_to_keep=1)
    return out.past_key_values


def run_both(model, steps: int = 90, drop_at: int = 40) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per step, (transformers' logits, the lean step's logits) over two copies of one batch: 4
    rows of 30 tokens, left-padded by 0, 3, 7 and 12. The prefill's buffers hold 94 columns, so
    the steps regrow them; row 1 leaves at `drop_at` (`keep_rows`, as a stopped row does)."""
    decoder = lean.LeanDecoder(model)
    ids = torch.randint(3, 250, (4, 30), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    for row, pad in enumerate((0, 3, 7, 12)):
        mask[row, :pad] = 0
    pairs = []
    with torch.inference_mode():
        plain, leaned = prefill(model, ids, mask), prefill(model, ids, mask)
        token = ids[:, -1]
        for step in range(steps):
            if step == drop_at:
                keep = torch.tensor([0, 2, 3])
                keep_rows(plain, keep), keep_rows(leaned, keep)
                mask, token = mask[keep], token[keep]
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            expected = model(input_ids=token[:, None], attention_mask=mask,
                             position_ids=mask.sum(-1, keepdim=True) - 1, past_key_values=plain,
                             use_cache=True).logits[:, -1]
            pairs.append((expected, decoder.step(token, mask, leaned)))
            token = expected.argmax(-1)
        assert plain.layers[0]._kbuf.shape[2] > 94, "the steps were meant to regrow the buffers"
        for a, b in zip(plain.layers, leaned.layers):   # the caches hold the same keys and values
            torch.testing.assert_close(b.keys, a.keys, rtol=0, atol=0)
            torch.testing.assert_close(b.values, a.values, rtol=0, atol=0)
    return pairs


def test_the_lean_step_computes_transformers_forward_on_a_qwen2(tiny_model_dir):
    for expected, got in run_both(qwen2(tiny_model_dir, torch.float32)):
        torch.testing.assert_close(got, expected)


def test_the_lean_step_computes_transformers_forward_on_a_llama_with_scaled_rope():
    for expected, got in run_both(llama()):
        torch.testing.assert_close(got, expected)


@pytest.mark.skipif(not (NATIVE_BF16 and available()),
                    reason="the engine's bf16 path: a CPU that multiplies bf16, and oneDNN")
def test_the_lean_step_over_packed_bf16_weights_matches_transformers(tiny_model_dir):
    """The engine's own arrangement on such a CPU: bf16 weights, packed for oneDNN. Each value is
    rounded where transformers rounds it, so the logits agree to bf16's rounding."""
    model = qwen2(tiny_model_dir, torch.bfloat16)
    pack_linears(model)
    for expected, got in run_both(model, steps=70):
        torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("model, reason", [
    (lambda: llama(hidden_act="gelu"), "hidden_act 'gelu'"),
    (lambda: llama(rope_parameters={"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}),
     "rope_type 'dynamic'"),
    (lambda: transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2)),
     "model_type 'gpt2'"),
])
def test_models_it_does_not_compute_are_named(model, reason):
    built = model()
    assert reason in lean.unsupported(built)
    with pytest.raises(ValueError, match=reason):
        lean.LeanDecoder(built)


def config(tiny_model_dir, **overrides) -> EngineConfig:
    return EngineConfig(name="hf", model=str(tiny_model_dir), torch_threads=1, max_batch=8,
                        dtype="float32", **overrides)


def test_auto_takes_the_lean_step_only_where_it_applies(tiny_model_dir):
    cpu, model = torch.device("cpu"), qwen2(tiny_model_dir, torch.float32)
    assert isinstance(lean_decoder(config(tiny_model_dir), model, cpu), lean.LeanDecoder)
    assert lean_decoder(config(tiny_model_dir, decode_forward="hf"), model, cpu) is None
    sdpa = config(tiny_model_dir, decode_attention="sdpa")
    assert lean_decoder(sdpa, model, cpu) is None
    with pytest.raises(ValueError, match="decode_attention is not grouped.*engine.decode_forward"):
        lean_decoder(dataclasses.replace(sdpa, decode_forward="lean"), model, cpu)
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2))
    assert lean_decoder(config(tiny_model_dir), gpt2, cpu) is None


def test_the_engine_samples_the_same_replies_either_way(tiny_model_dir):
    """Continuous batching end to end (rows joining, stopping and leaving): the engine on the lean
    step samples what it samples on transformers' forward, ids and log-probs."""
    replies = {}
    for forward in ("lean", "hf"):
        engine = make_engine(config(tiny_model_dir, decode_forward=forward))
        assert (engine.lean is not None) == (forward == "lean")
        tok = engine.tokenizer
        prompts = [tok.encode(text) for text in ("def add(a, b):", "import os\n", "x = [1, 2")]
        params = SamplingParams(temperature=1.0, max_new_tokens=40, seed=7)
        replies[forward] = [(s.token_ids, s.logprobs) for s in engine.generate(prompts, params)]
    for (ids, logps), (ids_hf, logps_hf) in zip(replies["lean"], replies["hf"]):
        assert ids == ids_hf
        torch.testing.assert_close(torch.tensor(logps), torch.tensor(logps_hf))
