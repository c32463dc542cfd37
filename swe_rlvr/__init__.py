"""swe-rlvr: train software-engineering agents with reinforcement learning from verifiable rewards."""

import os as _os

ONEDNN_PRIMITIVE_CACHE = "128"
"""oneDNN's kernel cache capacity, unless the environment sets ONEDNN_PRIMITIVE_CACHE_CAPACITY.
Its default, 1,024, is reached only by a process that meets many shapes, as packed training rows
and prefills of every length are; each cached bf16 matmul kernel held ~1.3 MB (its JIT code
buffer), so the quickstart's warm-up SFT left ~0.7 GB of kernels behind, on which every later
stage's peak landed. 128 holds every shape of a training step or a decode step several times over.
oneDNN reads the variable when it creates its first kernel, after this import."""
_os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", ONEDNN_PRIMITIVE_CACHE)
