"""trainer.blockwise: causal GQA attention in query blocks with a hand-written backward, against
hand-derived cases, float64 gradcheck and torch's SDPA; and `trainer.attention`'s choice."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from trainer.blockwise import blockwise_causal
from trainer.forward import BLOCKWISE_ATTENTION, SEGMENT_ATTENTION, attention_kernel


def _qkv(length: int, heads: int = 6, kv_heads: int = 2, dim: int = 8, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(1, h, length, dim, generator=g).to(dtype).requires_grad_()
            for h in (heads, kv_heads, kv_heads)]


def _sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


def _out_and_grads(fn, q, k, v, dout):
    out = fn(q, k, v)
    return (out, *torch.autograd.grad(out, (q, k, v), dout))


def test_hand_cases_one_key_and_uniform_scores():
    """One token attends to itself only: out = v. With zero queries every score is 0, so token t
    averages v_0..v_t: rows 0, 1, 2 of v = [2], [4], [9] give 2, 3, 5."""
    q, k, v = torch.randn(1, 2, 1, 4), torch.randn(1, 1, 1, 4), torch.randn(1, 1, 1, 4)
    assert torch.allclose(blockwise_causal(q, k, v), v.expand(1, 2, 1, 4))
    q, k = torch.zeros(1, 1, 3, 1), torch.randn(1, 1, 3, 1)
    v = torch.tensor([2.0, 4.0, 9.0]).view(1, 1, 3, 1)
    assert blockwise_causal(q, k, v, block=2).flatten().tolist() == [2.0, 3.0, 5.0]


def test_float64_gradcheck_across_blocks_and_groups():
    """Numerical against analytic gradients: 7 tokens in blocks of 3 (a partial last block),
    3 query heads per KV head, a scale other than 1/sqrt(D)."""
    q, k, v = (x.detach().double().requires_grad_() for x in _qkv(7, heads=6, kv_heads=2, dim=4))
    assert torch.autograd.gradcheck(lambda a, b, c: blockwise_causal(a, b, c, 0.3, block=3), (q, k, v))


@pytest.mark.parametrize("length,block", [(1, 64), (63, 64), (64, 64), (65, 64), (130, 16)])
@pytest.mark.parametrize("groups", [1, 3])
def test_float32_equals_sdpa(length, block, groups):
    """Outputs and q/k/v gradients equal causal SDPA's to fp32 rounding, whole and partial blocks,
    with and without grouped queries."""
    q, k, v = _qkv(length, heads=2 * groups, kv_heads=2)
    dout = torch.randn(q.shape, generator=torch.Generator().manual_seed(1))
    ours = _out_and_grads(lambda a, b, c: blockwise_causal(a, b, c, block=block), q, k, v, dout)
    ref = _out_and_grads(_sdpa, q, k, v, dout)
    for name, a, b in zip(("out", "dq", "dk", "dv"), ours, ref):
        assert torch.allclose(a, b, atol=2e-6, rtol=1e-5), name


def test_bfloat16_error_is_within_a_small_multiple_of_sdpas():
    """In bf16 the scores are rounded before the softmax (SDPA's kernel keeps them in fp32): each
    result's largest error from the fp32 reference stays within 3x SDPA's own bf16 error."""
    q, k, v = _qkv(200, heads=9, kv_heads=3, dim=64, dtype=torch.bfloat16)
    dout = torch.randn(q.shape, generator=torch.Generator().manual_seed(1)).bfloat16()
    exact = _out_and_grads(_sdpa, *(x.detach().float().requires_grad_() for x in (q, k, v)), dout.float())
    ours = _out_and_grads(blockwise_causal, q, k, v, dout)
    sdpa = _out_and_grads(_sdpa, q, k, v, dout)
    for name, a, b, ref in zip(("out", "dq", "dk", "dv"), ours, sdpa, exact):
        assert a.dtype == torch.bfloat16, name
        ours_err, sdpa_err = ((x.float() - ref).abs().max().item() for x in (a, b))
        assert ours_err <= 3 * sdpa_err + 1e-3, (name, ours_err, sdpa_err)


def test_under_autocast_mixed_operands_run_in_its_dtype_as_sdpa_does():
    """RoPE leaves q and k in fp32 and v in bf16 under bf16 autocast: like SDPA, the kernel runs
    all three in bf16, and each gradient comes back in its operand's dtype."""
    q, k, _ = _qkv(70, heads=6, kv_heads=2)
    v = _qkv(70, heads=6, kv_heads=2, dtype=torch.bfloat16, seed=1)[2]
    dout = torch.randn(q.shape, generator=torch.Generator().manual_seed(1)).bfloat16()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ours = _out_and_grads(blockwise_causal, q, k, v, dout)
        ref = _out_and_grads(_sdpa, q, k, v, dout)
    assert [x.dtype for x in ours] == [x.dtype for x in ref] == [torch.bfloat16, torch.float32,
                                                                 torch.float32, torch.bfloat16]
    for name, a, b in zip(("out", "dq", "dk", "dv"), ours, ref):
        assert torch.allclose(a.float(), b.float(), atol=0.05, rtol=0.05), name


def test_no_query_reads_a_later_key():
    """Changing keys and values after position 40 leaves outputs 0..40 bit for bit as they were."""
    q, k, v = (x.detach() for x in _qkv(100))
    k2, v2 = k.clone(), v.clone()
    k2[:, :, 41:] += 5.0
    v2[:, :, 41:] -= 3.0
    a, b = blockwise_causal(q, k, v, block=16), blockwise_causal(q, k2, v2, block=16)
    assert torch.equal(a[:, :, :41], b[:, :, :41]) and not torch.equal(a[:, :, 41:], b[:, :, 41:])


def test_shape_errors_name_the_shapes():
    with pytest.raises(ValueError, match="multiple of Hkv"):
        blockwise_causal(torch.randn(1, 5, 4, 8), torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 8))


def test_attention_setting_picks_the_kernel_by_device():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert attention_kernel("auto", cpu) == BLOCKWISE_ATTENTION
    assert attention_kernel("auto", cuda) == SEGMENT_ATTENTION
    assert attention_kernel("sdpa", cpu) == SEGMENT_ATTENTION
    assert attention_kernel("blockwise", cuda) == BLOCKWISE_ATTENTION
    with pytest.raises(ValueError, match="trainer.attention"):
        attention_kernel("flash", cpu)


def test_packed_rows_train_alike_under_both_kernels(tiny_model_dir):
    """The trainer's model loaded with each `trainer.attention`: the same packed row (a shared
    three segments) gives the same log-probs and parameter gradients in fp32."""
    from tests.test_packing import _ep
    from trainer.engine_torch import load_model
    from trainer.forward import packed_logprobs
    from trainer.packing import pack
    (row,) = pack([_ep(37, 5, 1.0, 1), _ep(90, 3, -0.5, 2), _ep(50, 10, 0.8, 3)], 256)
    runs = []
    for kernel in ("sdpa", "blockwise"):
        model = load_model(tiny_model_dir, torch.device("cpu"), False, attention=kernel)
        assert model.config._attn_implementation == attention_kernel(kernel, torch.device("cpu"))
        logp, _ = packed_logprobs(model, row)
        (logp * torch.linspace(-1, 1, logp.numel())).sum().backward()
        runs.append((logp.detach(), [p.grad for p in model.parameters()]))
    (lp_a, g_a), (lp_b, g_b) = runs
    assert torch.allclose(lp_a, lp_b, atol=1e-5)
    for a, b in zip(g_a, g_b):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-4)
