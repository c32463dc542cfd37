"""A decode step of the `hf` engine written as straight tensor code, not through transformers'
modules.

A decode step of SmolLM2 on a 2-core CPU made 5,929 op calls through transformers' Llama modules
(docs/benchmarks.md#one-decode-step-and-what-shares-its-process): views, casts, copies, a causal
mask built afresh in every layer, each module's Python around them. Each op costs its dispatch,
and with two torch threads each is a point where both must meet, so a core taken for a moment by
anything else stalls the step. The products themselves (211 linears, 60 attention matmuls) were
half of its time.

`LeanDecoder.step` computes the same forward for one new token per row from the same modules'
weights, in the same dtypes and the same order of operations per value, with what does not depend
on the layer done once a step: the rotary angles, the additive mask over the cache's buffers, the
cache's column. Per layer it is the two RMSNorms, the seven linears (the engine's packed ones,
called directly), the rotary embedding, the write of the new keys and values into the growing
cache's buffers, the grouped decode attention (`agent.engines.attention.grouped_decode`, the
`grouped` kernel's own products) and the SwiGLU.

Simplifications: it covers the architectures the engine serves on CPU, Llama (SmolLM2) and Qwen2
(the tiny test model), with SiLU MLPs, full attention in every layer, and a rotary embedding whose
frequencies do not depend on the length (`STATIC_ROPE`); `unsupported` names what else it
refuses, and `engine.decode_forward=auto` then keeps transformers' forward. The rotary embedding's
`rotate_half(x) * sin` is computed as `roll(x) * sin_signed` (the first half's sine negated),
which is exact: a negation commutes with rounding. Prefill and training never use it.
`tests/test_lean_decode.py` compares its logits with transformers' forward, step by step.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from agent.engines.attention import column_bias, grouped_decode
from agent.engines.kvcache import compactable
from agent.engines.packed import PackedLinear

ARCHITECTURES = ("llama", "qwen2")
"""`config.model_type`s whose decoder layer `LeanDecoder` computes."""

STATIC_ROPE = ("default", "linear", "llama3", "yarn")
"""Rotary types whose frequencies and scale are fixed when the model loads (dynamic ones change
with the length and are refused)."""

Linear = Callable[[torch.Tensor], torch.Tensor]


def unsupported(model: torch.nn.Module) -> str | None:
    """Why `LeanDecoder` cannot compute `model`'s decode step (None: it can)."""
    config = model.config
    if config.model_type not in ARCHITECTURES:
        return f"model_type {config.model_type!r} (it computes {', '.join(ARCHITECTURES)})"
    if getattr(config, "hidden_act", None) != "silu":
        return f"hidden_act {config.hidden_act!r} (it computes silu)"
    kinds = set(getattr(config, "layer_types", None) or ["full_attention"])
    if kinds != {"full_attention"}:
        return f"layer types {sorted(kinds)} (it computes full attention only)"
    rope = getattr(model.model.rotary_emb, "rope_type", "default")
    if rope not in STATIC_ROPE:
        return f"rope_type {rope!r} (it computes {', '.join(STATIC_ROPE)})"
    return None


def direct(module: torch.nn.Module) -> Linear:
    """`module`'s product as one op on a 2-D input (a `PackedLinear` or an `nn.Linear`)."""
    if isinstance(module, PackedLinear):
        packed, bias = module.packed, module.bias
        return lambda x: torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")
    if type(module) is torch.nn.Linear:
        weight, bias = module.weight, module.bias
        return lambda x: torch.nn.functional.linear(x, weight, bias)
    raise TypeError(f"lean decode: a {type(module).__name__} where a linear layer was expected")


class Norm:
    """An RMSNorm's weight and epsilon, applied as transformers' Llama/Qwen2 RMSNorm does."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.weight, self.eps = module.weight, module.variance_epsilon

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()                                                     # (B, d) fp32
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


class Layer:
    """One decoder layer's weights, as `LeanDecoder.step` uses them."""

    def __init__(self, layer: torch.nn.Module) -> None:
        attn, mlp = layer.self_attn, layer.mlp
        self.norm_in, self.norm_post = Norm(layer.input_layernorm), Norm(layer.post_attention_layernorm)
        self.q, self.k, self.v, self.o = (direct(m) for m in (attn.q_proj, attn.k_proj, attn.v_proj,
                                                            attn.o_proj))
        self.gate, self.up, self.down = (direct(m) for m in (mlp.gate_proj, mlp.up_proj,
                                                             mlp.down_proj))


class LeanDecoder:
    """The decode step of a loaded `model` (one `unsupported` accepts), over its weights: new
    weights need a new decoder."""

    def __init__(self, model: torch.nn.Module) -> None:
        reason = unsupported(model)
        if reason is not None:
            raise ValueError(f"lean decode cannot compute this model's step: {reason}")
        config, inner = model.config, model.model
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.scale = self.head_dim ** -0.5
        rotary = inner.rotary_emb
        self.inv_freq = rotary.inv_freq.float()                               # (D/2,)
        self.rope_scale = rotary.attention_scaling
        self.embed = inner.embed_tokens.weight
        self.layers = [Layer(layer) for layer in inner.layers[:config.num_hidden_layers]]
        self.norm, self.head = Norm(inner.norm), direct(model.lm_head)

    def rotary(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and the signed sin (B, 1, D) at `positions` (B,), as transformers computes them
        (fp32, then the model's dtype); the sine's first half negated for `roll`."""
        freqs = positions[:, None].float() * self.inv_freq[None, :]           # (B, D/2)
        angles = torch.cat([freqs, freqs], -1)                                # (B, D)
        cos = (angles.cos() * self.rope_scale).to(dtype)
        sin = (angles.sin() * self.rope_scale).to(dtype)
        half = sin.shape[-1] // 2
        return cos[:, None], torch.cat([-sin[:, :half], sin[:, half:]], -1)[:, None]

    def step(self, token: torch.Tensor, mask: torch.Tensor, cache) -> torch.Tensor:
        """Feed `token` (B,) to the rows of `cache` (growing layers, every row left-padded), whose
        mask over the columns with the new one is `mask` (B, W + 1); returns the next logits
        (B, V). Writes the new keys and values into the cache, as its `update` would."""
        if not compactable(cache):
            raise ValueError("lean decode runs over the hf engine's growing KV cache")
        for layer in cache.layers:
            layer.reserve(1)
        grown = cache.layers[0]
        column, capacity = grown._used, grown._kbuf.shape[2]
        b, group = token.shape[0], self.heads // self.kv_heads
        x = torch.nn.functional.embedding(token, self.embed)                  # (B, d)
        cos, sin = self.rotary(mask.sum(-1) - 1, x.dtype)                      # (B, 1, D) each
        bias = column_bias(mask.bool(), b, column + 1, capacity, x.device)     # (B, 1, 1, C)
        half = self.head_dim // 2
        for weights, layer in zip(self.layers, cache.layers):
            h = weights.norm_in(x)
            q = weights.q(h).view(b, self.heads, self.head_dim)               # (B, H, D)
            k = weights.k(h).view(b, self.kv_heads, self.head_dim)            # (B, H_kv, D)
            q = q * cos + q.roll(half, -1) * sin
            layer._kbuf[:, :, column] = k * cos + k.roll(half, -1) * sin
            layer._vbuf[:, :, column] = weights.v(h).view(b, self.kv_heads, self.head_dim)
            out = grouped_decode(q.view(b, self.kv_heads, group, self.head_dim), layer._kbuf,
                                 layer._vbuf, self.scale, bias)               # (B, H_kv, g, D)
            x = x + weights.o(out.view(b, -1))
            h = weights.norm_post(x)
            x = x + weights.down(torch.nn.functional.silu(weights.gate(h)) * weights.up(h))
        for layer in cache.layers:
            layer.advance(1)
        return self.head(self.norm(x))                                        # (B, V)
