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
    if getattr(cfg, "process", False):
        from agent.engines.process import ProcessEngine
        return ProcessEngine(cfg)
    module_name, class_name = ENGINES[cfg.name].split(":")
    return getattr(importlib.import_module(module_name), class_name)(cfg)


__all__ = ["ENGINES", "Engine", "Sample", "SamplingParams", "UNFILTERED", "is_unfiltered", "make_engine"]
