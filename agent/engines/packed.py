"""The hf engine's linear layers with their weights reordered once into oneDNN's blocked layout.

A decode step multiplies a few rows by every weight matrix of the model, so it is bound by how
fast the weights are read, and torch's CPU `linear` read SmolLM2's bf16 weights at about 13.5 GB/s
in a decode step of 8 rows. `torch.ops.mkldnn._reorder_linear_weight` lays a weight out once in
the blocked format oneDNN's kernels read (what inductor's CPU freezing does), and
`_linear_pointwise` multiplies by it: the same step ran 1.35x as fast.
`PackedLinear` computes what `nn.Linear` computes from the same weights: `tests/test_packed_
linears.py` compares their outputs and a whole model's samples; `bench/packed_weights.py` times a
prefill and decode steps with and without.

`engine.packed_weights` picks it: auto packs on a CPU whose torch has oneDNN, never on a GPU.
Training never sees it: the trainer loads its own model, and new weights (`load_weights`) are
packed again. A tied LM head is packed as a copy (the embedding keeps the plain matrix), which
holds one more vocabulary-sized matrix in memory: 57 MB for SmolLM2 in bf16 (the memory
preflight counts it, `swe_rlvr.memory.estimate`).
"""

from __future__ import annotations

import torch

ROWS_HINT = 16
"""The batch oneDNN is told to expect when it picks the blocked layout (the engine's
`max_batch`); any number of rows still multiplies correctly."""


def available() -> bool:
    """Whether this torch can reorder and multiply oneDNN-packed linear weights."""
    return (torch.backends.mkldnn.is_available()
            and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
            and hasattr(torch.ops.mkldnn, "_linear_pointwise"))


def wanted(choice: str, device: torch.device) -> bool:
    """`engine.packed_weights` -> whether to pack: auto packs on a CPU where `available()`;
    packed refuses a device or a torch that cannot."""
    if choice == "plain":
        return False
    usable = device.type == "cpu" and available()
    if choice == "packed" and not usable:
        raise ValueError(f"engine.packed_weights=packed needs a CPU and a torch built with oneDNN "
                         f"(device {device.type}, oneDNN "
                         f"{'available' if available() else 'missing'}); set it to auto or plain.")
    return usable


class PackedLinear(torch.nn.Module):
    """`nn.Linear`'s forward over a weight in oneDNN's blocked layout, for inference only."""

    def __init__(self, linear: torch.nn.Linear, rows_hint: int = ROWS_HINT) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        weight = linear.weight.detach()
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight, rows_hint)
        self.bias = None if linear.bias is None else linear.bias.detach()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != self.packed.dtype:
            raise TypeError(f"PackedLinear holds {self.packed.dtype} weights and got a {x.dtype} input")
        flat = x.reshape(-1, self.in_features)
        out = torch.ops.mkldnn._linear_pointwise(flat, self.packed, self.bias, "none", [], "")
        return out.view(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, packed"


def pack_linears(model: torch.nn.Module, rows_hint: int = ROWS_HINT) -> int:
    """Replace every `nn.Linear` of `model` by a `PackedLinear` of the same weights; returns how
    many were replaced."""
    replaced = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is torch.nn.Linear:
                setattr(parent, name, PackedLinear(child, rows_hint))
                replaced += 1
    return replaced
