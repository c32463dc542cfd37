"""Where bf16 pays: the one rule that the `auto` precision settings follow.

bf16 halves the bytes of weights and KV cache, and on hardware that multiplies in bf16 its GEMMs
run several times faster than fp32's: 3.1x on a CPU with AMX (`bench.iteration`'s rates). Without
such instructions a CPU emulates them: on an AVX2-only CPU, GEMMs of SmolLM2's MLP shape ran at
1.7 GFLOP/s in bf16 against 110 in fp32, and one warm-up SFT step of the quickstart took 10.7
minutes. So `auto` (`engine.dtype`, `trainer.autocast`) means bf16 on a CUDA GPU that supports it
and on a CPU with AVX512-BF16 or AMX, and fp32 elsewhere; an explicit bf16 where it is emulated is
honoured, with a warning that names the setting.

Every precision rule lives here, once, and the engines, the trainer and the benchmarks call it:
what a device setting means (`pick_device`), the `hf` engine's weights (`engine_dtype`), the
managed vLLM server's (`server_dtype`), the weights an EngineConfig samples with
(`sampling_dtype`), and the trainer's autocast and matmul precision (`autocast_enabled`,
`compute_dtype`). torch is imported inside the functions that probe the device, never at module
level: `swe_rlvr` stays importable without torch (the import-linter contract lists exactly these
imports).
"""

from __future__ import annotations

import functools
import logging
import os
from typing import TYPE_CHECKING, Any, get_args

from swe_rlvr.config_choices import Autocast, Dtype

if TYPE_CHECKING:
    from swe_rlvr.config import EngineConfig, TrainerConfig

log = logging.getLogger("swe_rlvr.precision")

ENGINE_DTYPES = tuple(d for d in get_args(Dtype) if d != "auto")
"""engine.dtype's explicit choices; `auto` follows the rule."""
AUTOCAST = get_args(Autocast)
"""trainer.autocast's choices."""
NO_CPU_BF16_ENV = "SWE_RLVR_NO_CPU_BF16"
"""Set to 1 to treat this CPU as one without bf16 instructions, so that `auto` means fp32 on it:
for results that must not depend on the machine kind. The test suite sets it (its pinned numbers
and fp32 equivalences hold on every CPU); the bf16 paths are tested with explicit settings."""


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
    """AVX512-BF16 or AMX on this CPU (torch's own probes; False where this torch has none, or
    where NO_CPU_BF16_ENV is 1)."""
    if os.environ.get(NO_CPU_BF16_ENV) == "1":
        return False
    import torch
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(getattr(torch.cpu, name, lambda: False)() for name in probes)


BF16_FLAGS = ("amx_bf16", "avx2", "avx512_bf16")
"""/proc/cpuinfo flags that decide where bf16 pays (`cpu_bf16`)."""


def cpu_info(text: str) -> tuple[str, list[str]]:
    """(model name, the BF16_FLAGS it has) of /proc/cpuinfo's text ("unknown", [] without it)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields.get("model name", "unknown"), sorted(set(fields.get("flags", "").split())
                                                       & set(BF16_FLAGS))


def cpu_description() -> str:
    """This CPU's model name and its BF16_FLAGS, for the line beside every measured figure (e.g.
    "AMD EPYC 9B14 (avx2, avx512_bf16)")."""
    from pathlib import Path
    info = Path("/proc/cpuinfo")
    name, flags = cpu_info(info.read_text() if info.exists() else "")
    return f"{name} ({', '.join(flags) or 'no AVX2'})"


def warn_if_emulated(setting: str, device) -> None:
    """Log a warning when `setting` (e.g. "engine.dtype=bfloat16") asks for bf16 on a device
    that emulates it."""
    if not native_bf16(device):
        log.warning("%s on a %s without bf16 instructions (AVX512-BF16 or AMX): its matmuls are "
                    "emulated, about 65x slower than fp32 on an AVX2 CPU; set it to auto (fp32 "
                    "here) unless that is what you are measuring", setting, device.type.upper())


def pick_device(name: str, setting: str) -> Any:
    """The torch device a device setting names (`setting` is its key, e.g. "engine.device", for
    the error): auto is the GPU where torch sees one, else the CPU; a CUDA device torch cannot see
    is refused."""
    import torch
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"{setting}={name!r} but torch sees no CUDA GPU; use cpu or auto.")
    return torch.device(name)


def engine_dtype(name: str, device) -> Any:
    """engine.dtype as the torch dtype of the `hf` engine's weights on `device`: auto is bf16
    where the device multiplies it natively, else fp32."""
    import torch
    if name == "auto":
        return torch.bfloat16 if native_bf16(device) else torch.float32
    if name not in ENGINE_DTYPES:
        raise ValueError(f"Unknown engine.dtype {name!r}; choose one of: auto, "
                         f"{', '.join(ENGINE_DTYPES)}.")
    return getattr(torch, name)


def server_dtype(cfg: EngineConfig) -> str:
    """The managed vLLM server's weights (its `--dtype`): fp32 for engine.dtype auto, else
    engine.dtype."""
    return "float32" if cfg.dtype == "auto" else cfg.dtype


def sampling_dtype(cfg: EngineConfig) -> str | None:
    """The weights' dtype `cfg` samples with, where this process can know it: the hf engine's
    rule (`engine_dtype`, also for "auto", which falls back to hf) and the managed vLLM server's
    (`server_dtype`). None for scripted policies, a user's server (openai) and the offline vllm
    engine at "auto" (the checkpoint's dtype)."""
    if cfg.name.startswith("scripted"):
        return None
    if cfg.name == "vllm-server":
        return server_dtype(cfg)
    if cfg.name in ("hf", "auto"):
        dtype = engine_dtype(cfg.dtype, pick_device(cfg.device, "engine.device"))
        return str(dtype).removeprefix("torch.")
    return None if cfg.dtype == "auto" else cfg.dtype


def autocast_enabled(setting: str, device) -> bool:
    """trainer.autocast: bf16 autocast on "bf16", never on "fp32", and for "auto" where the
    device multiplies bf16 natively."""
    if setting not in AUTOCAST:
        raise ValueError(f"trainer.autocast must be one of {', '.join(AUTOCAST)}, got {setting!r}.")
    return setting == "bf16" or (setting == "auto" and native_bf16(device))


def compute_dtype(t: TrainerConfig) -> str:
    """The precision the trainer's matmuls run in: bf16 under autocast (the torch engine's
    trainer.autocast; DeepSpeed's bf16 on CUDA), else fp32."""
    device = pick_device(t.device, "trainer.device")
    bf16 = autocast_enabled(t.autocast, device) if t.engine == "torch" else device.type == "cuda"
    return "bfloat16" if bf16 else "float32"
