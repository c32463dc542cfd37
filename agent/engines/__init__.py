"""Policy engines, picked by name from a plain dict; vllm and the HTTP client are imported lazily.

    engine = make_engine(cfg.engine)          # EngineConfig.name: hf, vllm, openai, vllm-server, auto
    samples = engine.generate([prompt_ids], SamplingParams(temperature=1.0, max_new_tokens=256))
"""

from __future__ import annotations

import importlib
from typing import Any

from agent.engines.base import UNFILTERED, Engine, Sample, SamplingParams, is_unfiltered

# name -> "module:class"; importing the module is deferred until that engine is asked for.
ENGINES: dict[str, str] = {
    "hf": "agent.engines.hf:HFEngine",
    "vllm": "agent.engines.vllm:VLLMEngine",
    "openai": "agent.engines.openai:OpenAIEngine",
    "vllm-server": "agent.engines.served:ServedEngine",
    "auto": "agent.engines.served:make_auto",
}


def make_engine(cfg: Any) -> Engine:
    """Build the engine that `cfg.name` names (cfg is an EngineConfig)."""
    if cfg.name not in ENGINES:
        raise ValueError(f"Unknown engine {cfg.name!r}; choose one of: {', '.join(ENGINES)}.")
    module_name, class_name = ENGINES[cfg.name].split(":")
    return getattr(importlib.import_module(module_name), class_name)(cfg)


def sampling_dtype(cfg: Any) -> str | None:
    """The weights' dtype `cfg` (an EngineConfig) samples with, where this process can know it:
    the hf engine's and the managed vLLM server's own rules (engine.dtype, or for "auto" bf16 on
    a GPU and fp32 on CPU, and fp32). None for scripted policies, a user's server (openai) and
    the offline vllm engine at "auto" (the checkpoint's dtype)."""
    if cfg.name.startswith("scripted"):
        return None
    if cfg.name == "vllm-server":
        from agent.engines.served import server_dtype
        return server_dtype(cfg)
    if cfg.name in ("hf", "auto"):
        from agent.engines.hf import weights_dtype
        return weights_dtype(cfg)
    return None if cfg.dtype == "auto" else cfg.dtype


__all__ = ["ENGINES", "Engine", "Sample", "SamplingParams", "UNFILTERED", "is_unfiltered", "make_engine",
           "sampling_dtype"]
