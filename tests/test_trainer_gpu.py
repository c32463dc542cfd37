"""The trainer's CUDA paths: varlen flash attention and compiled layers under bf16 autocast.

These run only where torch sees a CUDA GPU (marker `gpu`); the CPU suite covers the same math on
the per-segment SDPA path (tests/test_packing.py).
"""

from __future__ import annotations

import pytest
import torch

from trainer.episodes import Episode
from trainer.packing import pack

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def _ep(n: int, seed: int, vocab: int = 200) -> Episode:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (n,), generator=g).tolist()
    mask = [0] * (n // 4) + [1] * (n - n // 4)
    return Episode(tuple(ids), tuple(mask), (0.0,) * n, advantage=1.0 if seed % 2 else -1.0)


def _grouped(eps):
    """The episodes as one instance's samples sharing the first episode's 64-token prompt."""
    prompt = eps[0].token_ids[:64]
    return [Episode(prompt + e.token_ids[64:], (0,) * 64 + e.loss_mask[64:], e.logprobs,
                    advantage=e.advantage, instance_id="x") for e in eps]


def _action_logprobs(logp: torch.Tensor, row) -> torch.Tensor:
    """Action-token log-probs ordered by (episode, position): comparable across row layouts."""
    idx = row.loss_mask.nonzero().squeeze(-1)
    order = sorted(idx.tolist(), key=lambda t: (int(row.seq_ids[t]), int(row.position_ids[t])))
    return logp[torch.tensor(order)]


def _grads(model_dir, varlen: bool, compile: bool, grouped: bool = False, share: bool = False):
    """Log-probs and gradients of one packed row of three segments, bf16 autocast on CUDA.
    `grouped`: the three are one instance's samples; `share`: the row stores their prompt once."""
    import trainer.forward as forward
    from trainer.engine_torch import load_model
    from trainer.forward import packed_logprobs
    forward.USE_VARLEN = varlen
    try:
        model = load_model(model_dir, torch.device("cuda"), grad_checkpointing=False,
                           compile=compile)
        eps = [_ep(300, 1), _ep(77, 2), _ep(512, 3)]
        (row,) = pack(_grouped(eps) if grouped else eps, 1024, share_prefix=share)
        assert (row.attn_index is not None) == (grouped and share)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logp, _ = packed_logprobs(model, row)
        (logp * row.loss_mask.cuda() * row.advantages.cuda()).sum().backward()
        return (_action_logprobs(logp.detach().float().cpu(), row),
                {n: p.grad.float().cpu() for n, p in model.named_parameters()})
    finally:
        forward.USE_VARLEN = True


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm().clamp(min=1e-12))


def test_varlen_kernel_is_found_on_this_torch():
    from trainer.forward import varlen_kernel
    assert varlen_kernel() is not None, f"torch {torch.__version__} has no varlen attention"


def _assert_close(got, want, lp_tol: float = 2e-2, grad_tol: float = 5e-2) -> None:
    """(log-probs, {param: grad}) pairs agree to bf16 tolerances."""
    assert _rel(got[0], want[0]) < lp_tol
    for name, g in want[1].items():
        assert _rel(got[1][name], g) < grad_tol, name


def test_varlen_attention_matches_per_segment_sdpa(tiny_model_dir):
    """One varlen call over the row computes what SDPA per segment computes (bf16 tolerance)."""
    _assert_close(_grads(tiny_model_dir, varlen=True, compile=False),
                  _grads(tiny_model_dir, varlen=False, compile=False))


def test_compiled_varlen_matches_eager(tiny_model_dir):
    _assert_close(_grads(tiny_model_dir, varlen=True, compile=True),
                  _grads(tiny_model_dir, varlen=True, compile=False))


@pytest.mark.parametrize("varlen", [True, False])
def test_shared_prefix_matches_plain_packing(tiny_model_dir, varlen):
    """A row storing the group's prompt once computes the plain row's log-probs and gradients."""
    _assert_close(_grads(tiny_model_dir, varlen=varlen, compile=False, grouped=True, share=True),
                  _grads(tiny_model_dir, varlen=varlen, compile=False, grouped=True, share=False))
