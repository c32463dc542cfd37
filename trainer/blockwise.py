"""Causal GQA attention of one segment in query blocks, with a hand-written backward (for the CPU).

torch's CPU flash-attention kernel (what causal SDPA runs on the CPU) reached ~46 GFLOP/s in
bf16 on SmolLM2's attention shape, where a bf16 `bmm` of the same operands reached ~440, and its
backward was slower still: attention took as long as all the linear maps of a warm-up step.
This kernel spends its FLOPs in large batched matmuls instead:

- queries go in blocks of `block` rows; block i attends to keys [0, end_i) only, so the work is
  ~L^2/2, as causal attention's is, plus one triangular tile per block, masked;
- the G query heads that share a KV head are stacked into one (G * block, D) operand, so K and V
  are never repeated;
- the softmax and its backward run on the matmuls' bf16 outputs with fp32 arithmetic inside
  (`torch.softmax`, `torch._softmax_backward_data`), one pass each, with no casting copies;
- the probabilities are kept for backward (bf16: L^2 * H bytes per layer, transient under
  gradient checkpointing), so backward recomputes nothing: dV = P^T dO, dP = dO V^T,
  dS = P * (dP - rowsum(dP * P)), dQ = dS K * scale, dK = dS^T (Q * scale).

In fp32 it equals SDPA to rounding; in bf16 its scores are rounded to bf16 before the softmax,
as eager attention's are (SDPA's kernel keeps them in fp32), which `tests/test_blockwise_
attention.py` bounds. `bench/segment_attention.py` times it against SDPA. `trainer.attention`
picks it (auto: on the CPU).
"""

from __future__ import annotations

import torch

BLOCK = 64
"""Query rows per block. 64 and 128 ran alike on SmolLM2's shape; segments are padded to a
multiple of 64 (`trainer.forward.SEGMENT_ALIGN`), so every block is whole and the matmuls take few
distinct shapes."""


class _BlockwiseCausal(torch.autograd.Function):
    """(H, L, D) queries, (Hkv, L, D) keys and values -> (H, L, D); H a multiple of Hkv."""

    @staticmethod
    def forward(ctx, q, k, v, scale: float, block: int):
        hkv, length, dim = k.shape
        groups = q.shape[0] // hkv
        qs = (q * scale).view(hkv, groups, length, dim)                # scaled once, (Hkv, G, L, D)
        out = q.new_empty(hkv, groups, length, dim)
        probs = []
        future = torch.full((block, block), float("-inf"), dtype=q.dtype, device=q.device).triu_(1)
        with torch.autocast(q.device.type, enabled=False):            # dtypes are explicit here
            for start in range(0, length, block):
                end = min(length, start + block)
                rows = end - start
                scores = torch.bmm(qs[:, :, start:end].reshape(hkv, groups * rows, dim),
                                   k[:, :end].transpose(1, 2)).view(hkv, groups, rows, end)
                scores[..., start:] += future[:rows, :rows]   # the diagonal tile: -inf above
                p = torch.softmax(scores, -1).view(hkv, groups * rows, end)
                out[:, :, start:end] = torch.bmm(p, v[:, :end]).view(hkv, groups, rows, dim)
                probs.append(p)
        ctx.save_for_backward(qs, k, v, *probs)
        ctx.scale, ctx.block = scale, block
        return out.view(hkv * groups, length, dim)

    @staticmethod
    def backward(ctx, dout):
        qs, k, v, *probs = ctx.saved_tensors
        hkv, groups, length, dim = qs.shape
        acc = torch.float32 if qs.element_size() < 4 else qs.dtype    # dK, dV summed over blocks
        dout = dout.contiguous().view(hkv, groups, length, dim)
        dq = torch.empty_like(qs)
        dk = torch.zeros(hkv, length, dim, dtype=acc, device=qs.device)
        dv = torch.zeros(hkv, length, dim, dtype=acc, device=qs.device)
        with torch.autocast(qs.device.type, enabled=False):
            for p, start in zip(probs, range(0, length, ctx.block)):
                end = min(length, start + ctx.block)
                rows = end - start
                do = dout[:, :, start:end].reshape(hkv, groups * rows, dim)
                dv[:, :end] += torch.bmm(p.transpose(1, 2), do)
                dp = torch.bmm(do, v[:, :end].transpose(1, 2))        # (Hkv, G * rows, end)
                ds = torch._softmax_backward_data(dp, p, -1, p.dtype)   # softmax's backward
                dq[:, :, start:end] = torch.bmm(ds, k[:, :end]).view(hkv, groups, rows, dim)
                dk[:, :end] += torch.bmm(ds.transpose(1, 2),
                                         qs[:, :, start:end].reshape(hkv, groups * rows, dim))
        dq = (dq * ctx.scale).view(hkv * groups, length, dim)
        return dq, dk.to(k.dtype), dv.to(v.dtype), None, None


def blockwise_causal(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     scaling: float | None = None, block: int = BLOCK) -> torch.Tensor:
    """Causal attention of one segment: (1, H, L, D) queries, (1, Hkv, L, D) keys and values ->
    (1, H, L, D), as `F.scaled_dot_product_attention(..., is_causal=True, enable_gqa=True)`.
    `scaling` None: 1 / sqrt(D)."""
    if query.shape[2] != key.shape[2] or query.shape[1] % key.shape[1]:
        raise ValueError(f"blockwise_causal needs L queries and L keys with H a multiple of Hkv, "
                         f"got query {tuple(query.shape)}, key {tuple(key.shape)}")
    scale = query.shape[-1] ** -0.5 if scaling is None else scaling
    device = query.device.type
    if torch.is_autocast_enabled(device):        # as autocast runs SDPA: every operand in its dtype
        dtype = torch.get_autocast_dtype(device)  # (RoPE leaves q and k in fp32, v in bf16)
    else:
        dtype = torch.promote_types(torch.promote_types(query.dtype, key.dtype), value.dtype)
    q, k, v = (x[0].to(dtype).contiguous() for x in (query, key, value))  # a segment: strided
    return _BlockwiseCausal.apply(q, k, v, scale, block)[None]
