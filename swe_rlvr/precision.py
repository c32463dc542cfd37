"""Where bf16 pays: the one rule that the `auto` precision settings follow.

bf16 halves the bytes of weights and KV cache, and on hardware that multiplies in bf16 its GEMMs
run several times faster than fp32's: 3.1x on a CPU with AMX (`bench.iteration`'s rates). Without
such instructions a CPU emulates them: on an AVX2-only CPU, GEMMs of SmolLM2's MLP shape ran at
1.7 GFLOP/s in bf16 against 110 in fp32, and one warm-up SFT step of the quickstart took 10.7
minutes. So `auto` (`engine.dtype`, `trainer.autocast`) means bf16 on a CUDA GPU that supports it
and on a CPU with AVX512-BF16 or AMX, and fp32 elsewhere; an explicit bf16 where it is emulated is
honoured, with a warning that names the setting.
"""

from __future__ import annotations

import functools
import logging

log = logging.getLogger("swe_rlvr.precision")


def native_bf16(device) -> bool:
    """Whether `device` (a torch.device) multiplies bf16 in hardware."""
    import torch
    if device.type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    if device.type == "cpu":
        return cpu_bf16()
    return False


@functools.cache
def cpu_bf16() -> bool:
    """AVX512-BF16 or AMX on this CPU (torch's own probes; False where this torch has none)."""
    import torch
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(getattr(torch.cpu, name, lambda: False)() for name in probes)


def warn_if_emulated(setting: str, device) -> None:
    """Log a warning when `setting` (e.g. "engine.dtype=bfloat16") asks for bf16 on a device
    that emulates it."""
    if not native_bf16(device):
        log.warning("%s on a %s without bf16 instructions (AVX512-BF16 or AMX): its matmuls are "
                    "emulated, about 65x slower than fp32 on an AVX2 CPU; set it to auto (fp32 "
                    "here) unless that is what you are measuring", setting, device.type.upper())
