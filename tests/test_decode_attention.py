"""The hf engine's decode attention (`agent.engines.attention`) against transformers' sdpa: the
same function of the same inputs, on the strided cache views the engine hands it, and the same
samples from a real tiny model."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from agent.engines import SamplingParams, make_engine  # noqa: E402
from agent.engines.attention import ATTENTION, grouped_attention, implementation, whole_buffers  # noqa: E402
from swe_rlvr.config import EngineConfig  # noqa: E402
from test_engines import _prompts, tiny  # noqa: E402,F401


class _Layer(torch.nn.Module):
    num_key_value_groups = 3
    is_causal = True


def _reference(query, key, value, mask, scaling):
    """softmax(q k^T * scaling + mask) v with each KV head repeated for its query heads."""
    group = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(group, 1), value.repeat_interleave(group, 1)
    scores = query @ key.transpose(-1, -2) * scaling                      # (B, H, 1, L)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    return (scores.softmax(-1) @ value).transpose(1, 2)                  # (B, 1, H, D)


@pytest.mark.parametrize("mask_kind", ["bool", "additive", "none"])
def test_one_query_token_over_a_strided_cache_matches_plain_attention(mask_kind):
    """9 query heads over 3 KV heads, 4 rows, the cache a view of the first 50 of 80 columns
    (as `GrowingLayer` hands it), row 0 left-padded by 7: the output equals plain attention's."""
    gen = torch.Generator().manual_seed(0)
    b, heads, kv_heads, used, dim = 4, 9, 3, 50, 16
    query = torch.randn(b, heads, 1, dim, generator=gen)
    key = torch.randn(b, kv_heads, 80, dim, generator=gen)[:, :, :used]
    value = torch.randn(b, kv_heads, 80, dim, generator=gen)[:, :, :used]
    keep = torch.ones(b, 1, 1, used, dtype=torch.bool)
    keep[0, ..., :7] = False
    mask = {"bool": keep, "none": None,
            "additive": torch.zeros(b, 1, 1, used).masked_fill(~keep, float("-inf"))}[mask_kind]
    out, weights = grouped_attention(_Layer(), query, key, value, mask, scaling=0.25)
    assert weights is None and out.shape == (b, 1, heads, dim)
    torch.testing.assert_close(out, _reference(query, key, value, mask, 0.25), atol=1e-5, rtol=1e-5)


def test_the_whole_buffer_path_is_taken_only_for_a_view_of_a_buffers_first_columns():
    """`whole_buffers` finds the (B, H_kv, C, D) buffer behind a view of its first L columns;
    a view that starts later in its storage, or a token-major one, is multiplied as it is, and
    all give plain attention's output."""
    gen = torch.Generator().manual_seed(2)
    b, kv_heads, dim = 2, 3, 16
    buf_k, buf_v = (torch.randn(b, kv_heads, 64, dim, generator=gen) for _ in range(2))
    head, later = (buf_k[:, :, :40], buf_v[:, :, :40]), (buf_k[:, :, 10:50], buf_v[:, :, 10:50])
    found = whole_buffers(*head)
    assert found is not None and found[0].shape == (b, kv_heads, 64, dim)
    assert torch.equal(found[0][:, :, :40], head[0]) and torch.equal(found[1], buf_v)
    assert whole_buffers(*later) is None
    token_major = torch.randn(b, 64, kv_heads, dim, generator=gen)[:, :40].transpose(1, 2)  # (B, H, L, D)
    assert whole_buffers(token_major, head[1]) is None
    query = torch.randn(b, 9, 1, dim, generator=gen)
    for key, value in (head, later, (token_major, head[1])):
        out, _ = grouped_attention(_Layer(), query, key, value, None, scaling=0.25)
        torch.testing.assert_close(out, _reference(query, key, value, None, 0.25), atol=1e-5, rtol=1e-5)


def test_the_caches_spare_columns_are_zero_after_growing_and_dropping_rows():
    """The decode attention multiplies V's spare columns by 0, so they must be finite: a growing
    layer's buffer and the buffers `keep_rows` leaves hold zeros beyond the cache's length."""
    from types import SimpleNamespace

    from agent.engines.kvcache import GrowingLayer, keep_rows
    layer = GrowingLayer()
    for _ in range(3):                                      # grows past its first capacity
        keys = torch.full((4, 3, 50, 8), 7.0)
        layer.update(keys, keys.clone())
    assert layer._kbuf.shape[2] > 150 and torch.all(layer._kbuf[:, :, 150:] == 0)
    keep_rows(SimpleNamespace(layers=[layer]), torch.tensor([0, 2]))
    assert layer._vbuf.shape[0] == 2 and torch.all(layer._vbuf[:, :, 150:] == 0)
    assert torch.all(layer.values == 7.0)


def test_more_than_one_query_token_goes_to_sdpa_unchanged():
    """A prefill (5 query tokens, causal, no mask) is transformers' sdpa attention's own result."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    gen = torch.Generator().manual_seed(1)
    query = torch.randn(2, 9, 5, 16, generator=gen)
    key, value = (torch.randn(2, 3, 5, 16, generator=gen) for _ in range(2))
    ours, _ = grouped_attention(_Layer(), query, key, value, None, scaling=0.25)
    theirs, _ = sdpa_attention_forward(_Layer(), query, key, value, None, scaling=0.25)
    assert torch.equal(ours, theirs)


def test_auto_is_the_grouped_kernel_on_cpu_and_sdpa_on_a_gpu():
    assert implementation("auto", torch.device("cpu")) == ATTENTION
    assert implementation("auto", torch.device("cuda")) == "sdpa"
    assert implementation("sdpa", torch.device("cpu")) == "sdpa"
    assert implementation("grouped", torch.device("cuda")) == ATTENTION


def test_the_engine_samples_the_same_tokens_with_either_attention(tiny):
    """fp32, the same seeds, rows of different lengths (so the batch is padded): the grouped
    kernel and sdpa sample the same tokens with log-probs equal to float rounding."""
    samples = {}
    for choice in ("grouped", "sdpa"):
        eng = make_engine(EngineConfig(name="hf", model=str(tiny), torch_threads=1, max_batch=8,
                                       dtype="float32", decode_attention=choice, prefix_cache_gb=0))
        assert eng.model.config._attn_implementation == (ATTENTION if choice == "grouped" else "sdpa")
        samples[choice] = eng.generate(_prompts(eng.tokenizer), SamplingParams(max_new_tokens=24, seed=3))
    for ours, theirs in zip(samples["grouped"], samples["sdpa"]):
        assert ours.token_ids == theirs.token_ids
        torch.testing.assert_close(torch.tensor(ours.logprobs), torch.tensor(theirs.logprobs),
                                   atol=1e-4, rtol=0)
