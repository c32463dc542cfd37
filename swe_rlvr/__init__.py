"""swe-rlvr: train software-engineering agents with reinforcement learning from verifiable rewards."""

import os as _os

ONEDNN_PRIMITIVE_CACHE = "128"
"""oneDNN's kernel cache capacity, unless the environment sets ONEDNN_PRIMITIVE_CACHE_CAPACITY.
Its default, 1,024, is reached only by a process that meets many shapes, as packed training rows
and prefills of every length are: the bf16 matmul kernels of each new row length held 1-2 MB
(their JIT code), and the quickstart's warm-up SFT meets a new length at every one of its 42 steps,
so its kernels stayed behind under every later stage's peak. 128 holds every shape of a training
step or a decode step several times over. oneDNN reads the variable when it creates its first
kernel, after this import."""
_os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", ONEDNN_PRIMITIVE_CACHE)
