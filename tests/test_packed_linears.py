"""The hf engine's oneDNN-packed linear layers (`agent.engines.packed`) against `nn.Linear`: the
same products of the same weights, and the same samples from a real tiny model."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from agent.engines import SamplingParams, make_engine  # noqa: E402
from agent.engines.packed import PackedLinear, available, pack_linears, wanted  # noqa: E402
from swe_rlvr.config import EngineConfig  # noqa: E402
from test_engines import _prompts, tiny  # noqa: E402,F401

NO_ONEDNN = pytest.mark.skipif(not available(), reason="this torch has no oneDNN linear kernels")
BF16 = pytest.mark.skipif(not torch.backends.mkldnn.is_available()
                          or not torch.ops.mkldnn._is_mkldnn_bf16_supported(),
                          reason="this CPU has no native bf16 for oneDNN")


@NO_ONEDNN
@pytest.mark.parametrize("rows", [1, 3, 16, 200])
@pytest.mark.parametrize("bias", [True, False])
def test_a_packed_linear_computes_the_linear_s_product_in_fp32(rows, bias):
    """Any batch, not only the hint's (16), and leading dimensions kept: (2, rows, 48) -> 40."""
    gen = torch.Generator().manual_seed(rows)
    linear = torch.nn.Linear(48, 40, bias=bias)
    x = torch.randn(2, rows, 48, generator=gen)
    with torch.inference_mode():
        packed, plain = PackedLinear(linear)(x), linear(x)
    assert packed.shape == (2, rows, 40)
    torch.testing.assert_close(packed, plain, atol=1e-5, rtol=1e-5)


@NO_ONEDNN
@BF16
def test_a_packed_linear_computes_the_linear_s_product_in_bf16():
    """bf16 weights and inputs, the sum accumulated in fp32 by both: equal to bf16 rounding."""
    gen = torch.Generator().manual_seed(0)
    linear = torch.nn.Linear(576, 192, bias=False).to(torch.bfloat16)
    x = torch.randn(8, 1, 576, generator=gen).to(torch.bfloat16)
    with torch.inference_mode():
        torch.testing.assert_close(PackedLinear(linear)(x).float(), linear(x).float(),
                                   atol=2e-2, rtol=1e-2)


@NO_ONEDNN
def test_an_input_of_another_dtype_is_refused_by_name():
    with pytest.raises(TypeError, match="torch.float32 weights and got a torch.bfloat16 input"):
        PackedLinear(torch.nn.Linear(4, 4))(torch.ones(1, 4, dtype=torch.bfloat16))


def test_auto_packs_on_a_cpu_with_onednn_and_never_on_a_gpu():
    assert wanted("auto", torch.device("cpu")) == available()
    assert not wanted("auto", torch.device("cuda"))
    assert not wanted("plain", torch.device("cpu"))
    with pytest.raises(ValueError, match="engine.packed_weights=packed needs a CPU"):
        wanted("packed", torch.device("cuda"))


@NO_ONEDNN
def test_every_linear_of_a_model_is_packed_the_tied_head_included(tiny):
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(tiny, dtype=torch.float32).eval()
    linears = sum(type(m) is torch.nn.Linear for m in model.modules())
    assert pack_linears(model) == linears > 0
    assert not any(type(m) is torch.nn.Linear for m in model.modules())
    assert isinstance(model.get_output_embeddings(), PackedLinear)


@NO_ONEDNN
def test_the_engine_samples_the_same_tokens_with_packed_weights(tiny):
    """fp32, the same seeds, rows of different lengths in one continuous batch, a prefix-cached
    second turn: packed and plain weights sample the same tokens with the same log-probs."""
    samples = {}
    for choice in ("packed", "plain"):
        eng = make_engine(EngineConfig(name="hf", model=str(tiny), torch_threads=1, max_batch=8,
                                       dtype="float32", packed_weights=choice))
        assert any(isinstance(m, PackedLinear) for m in eng.model.modules()) == (choice == "packed")
        prompts = _prompts(eng.tokenizer)
        first = eng.generate(prompts, SamplingParams(max_new_tokens=16, seed=3))
        again = [p + s.token_ids + p[:3] for p, s in zip(prompts, first)]    # the next turn
        samples[choice] = first + eng.generate(again, SamplingParams(max_new_tokens=16, seed=4))
    for ours, theirs in zip(samples["packed"], samples["plain"]):
        assert ours.token_ids == theirs.token_ids
        torch.testing.assert_close(torch.tensor(ours.logprobs), torch.tensor(theirs.logprobs),
                                   atol=1e-4, rtol=0)
