"""The arithmetic a decoder-only transformer must do: FLOPs of its passes, counted from the work.

One forward over `tokens` new tokens, `logits` of which need the LM head, which together attend
to `keys` positions (summed over the tokens), costs

    2 N tokens  +  2 d V logits  +  4 L d keys

where N is the parameter count outside the embedding and the LM head, d the hidden size, V the
vocabulary and L the layers (QK^T and AV: 2 d FLOPs each per key per layer). A training pass
(forward and backward) costs 3 times its forward. Left out, as in the usual MFU accounting: norms,
activations, softmax, rotary embeddings, and work wasted on padding or finished rows (the figure
is the work that was necessary, so the time to do it is a lower bound).

Time also has a memory floor: a forward reads every weight once, and a decode step also reads
the KV cache of every key it attends (`forward_bytes`). At a few rows per step that floor, not the
arithmetic, bounds decoding on a CPU: 8 rows of bf16 do 8 FLOPs per weight byte read, while a
CPU's matmul rate over its memory bandwidth is in the tens to hundreds. `prefill_work` and
`decode_work` count a generation's tokens and keys from its prompts; the trainer counts a packed
row's keys from its segments (`causal_keys`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Shape:
    """What the FLOP count needs of a model."""

    params: int
    """Parameters outside the input embedding and the LM head."""
    hidden: int
    vocab: int
    layers: int

    @classmethod
    def of(cls, model) -> Shape:
        """The shape of a transformers causal LM (tied or untied head)."""
        cfg = model.config
        embed = model.get_input_embeddings().weight
        head = model.get_output_embeddings().weight
        outside = embed.numel() + (0 if head is embed else head.numel())
        total = sum(p.numel() for p in model.parameters())
        return cls(total - outside, cfg.hidden_size, cfg.vocab_size, cfg.num_hidden_layers)


def forward_flops(shape: Shape, tokens: int, logits: int, keys: int) -> float:
    """FLOPs of one forward: 2 N tokens + 2 d V logits + 4 L d keys (see the module docstring)."""
    return (2.0 * shape.params * tokens + 2.0 * shape.hidden * shape.vocab * logits
            + 4.0 * shape.layers * shape.hidden * keys)


def forward_bytes(shape: Shape, kv_width: int, dtype_bytes: int, calls: int, cached_keys: int
                  ) -> float:
    """Bytes that `calls` forwards must read from memory at the least: every weight once per call
    (N + d V: the blocks and the LM head; an input embedding reads only its tokens' rows, left
    out) and, for each of the `cached_keys` keys they attend in a KV cache, its key and value at
    every layer (2 kv_width values). A decode step is one call; its attended keys are all cached.
    Activations are left out (they fit in cache), so the time to read this is a lower bound."""
    return dtype_bytes * (calls * (shape.params + shape.hidden * shape.vocab)
                          + 2.0 * kv_width * shape.layers * cached_keys)


def training_flops(shape: Shape, tokens: int, logits: int, keys: int) -> float:
    """FLOPs of a forward and its backward: 3 forwards."""
    return 3.0 * forward_flops(shape, tokens, logits, keys)


def causal_keys(length: int, cached: int = 0) -> int:
    """Keys attended by positions cached+1..length of a causal sequence: sum of j over them."""
    return (length * (length + 1) - cached * (cached + 1)) // 2


def prefill_work(prompt_lengths: list[int], cached: list[int]) -> tuple[int, int]:
    """(tokens run, keys attended) of prefilling prompts whose first `cached` tokens were cached."""
    tokens = sum(n - c for n, c in zip(prompt_lengths, cached))
    keys = sum(causal_keys(n, c) for n, c in zip(prompt_lengths, cached))
    return tokens, keys


def decode_work(prompt_lengths: list[int], generated: list[int]) -> tuple[int, int]:
    """(tokens, keys) of the forwards that decode `generated[i]` tokens after a prompt of
    `prompt_lengths[i]`: the first token is sampled from the prefill's logits and every later one
    from a forward over the token before it, so a row of g runs g-1 one-token forwards, at
    positions n+1..n+g-1, each attending to the keys up to its own (each also needs the LM head)."""
    tokens = sum(max(g - 1, 0) for g in generated)
    keys = sum(causal_keys(n + g - 1, n) for n, g in zip(prompt_lengths, generated) if g > 1)
    return tokens, keys
