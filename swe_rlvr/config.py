"""One frozen, typed configuration tree for the whole system.

YAML files in `configs/` only set values: every key maps to a dataclass field, an unknown key or a
wrong type raises `ConfigError` naming the key and listing the valid ones, a choice outside its
field's `Literal` raises one listing the choices, a number outside its key's range (`RANGES`)
raises one naming the range, and dotted `section.key=value` overrides apply on top (values parse
as YAML scalars).

Defaults follow the seed papers where they apply, and each field's docstring names its source:
- Nebius = "Training Long-Context, Multi-Turn Software Engineering Agents with RL" (2508.03501);
- Agent-RLVR = "Agent-RLVR: Training SWE agents via guidance and environment rewards" (2506.11425);
- DAPO = "DAPO: an open-source LLM RL system at scale" (2503.14476).

A `preset` (top-level key) applies a named bundle of paper settings *before* the file's own values,
so `preset: nebius` with `algorithm.clip_high: 0.25` still ends at 0.25.

The tree lives in a few modules, and this one re-exports all of their public names:
`config_choices` (the Literal of every choice field), `config_rollout` and `config_training` (the
sections), `config_ranges` (`RANGES`) and `config_loading` (YAML, overrides and the checks).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swe_rlvr.config_choices import (
    Advantage,
    Algorithm,
    Compile,
    Device,
    Dtype,
    EngineName,
    ExpertStyle,
    GuidanceMode,
    GuidancePart,
    GuidanceSource,
    GuidanceTrigger,
    InstanceFormat,
    Isolation,
    LossAgg,
    Objective,
    Preset,
    SandboxBackend,
    Scaffold,
    Schedule,
    TaskRunner,
    Tier,
    TrainerEngine,
    WorkingCopy,
)
from swe_rlvr.config_loading import (
    ConfigError,
    check_choice,
    check_range,
    deep_merge,
    flatten,
    from_dict,
    parse_override,
    read_values,
    to_dict,
)
from swe_rlvr.config_ranges import RANGES, Range
from swe_rlvr.config_rollout import (
    AgentConfig,
    EngineConfig,
    GuidanceConfig,
    InstancesConfig,
    SandboxConfig,
)
from swe_rlvr.config_training import (
    AlgorithmConfig,
    EvalConfig,
    OrchestrationConfig,
    RewardConfig,
    TrackingConfig,
    TrainerConfig,
    VerifierConfig,
)


@dataclass(frozen=True)
class Config:
    preset: Preset | None = None
    """Named bundle of paper settings applied before this file's values (see PRESETS; None: no
    preset)."""
    instances: InstancesConfig = field(default_factory=InstancesConfig)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    guidance: GuidanceConfig = field(default_factory=GuidanceConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    verifier: VerifierConfig = field(default_factory=VerifierConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    orchestration: OrchestrationConfig = field(default_factory=OrchestrationConfig)


PRESETS: dict[str, dict[str, Any]] = {
    "nebius": {
        "algorithm": {"name": "dapo", "group_size": 10, "clip_low": 0.2, "clip_high": 0.3,
                      "advantage": "grpo", "loss_agg": "token_mean", "kl_coef": 0.0},
        "trainer": {"lr": 1e-6, "rft_lr": 5e-6, "weight_decay": 0.1, "grad_clip": 1.0},
        "engine": {"temperature": 1.0},
        "guidance": {"enabled": False},
        "orchestration": {"rft_warmup": True},
    },
    "agent-rlvr": {
        "guidance": {"enabled": True, "source": "rules", "mode": "pairs",
                     "parts": ["plan", "feedback", "location"]},
        "algorithm": {"name": "dpo", "group_size": 16},
        "orchestration": {"rft_warmup": True},
    },
}
"""Each preset's values; its name is also a value of `Preset` (tests/test_config.py checks both
agree)."""


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Build a Config from an optional YAML file and dotted `key=value` overrides."""
    data = read_values(path, overrides)
    preset = data.get("preset")
    if preset:  # None, and "" (how configs wrote none before), apply no preset
        if not isinstance(preset, str) or preset not in PRESETS:
            raise ConfigError(f"Unknown preset {preset!r}; choose one of: {', '.join(PRESETS)}.")
        data = deep_merge(PRESETS[preset], data)
    return from_dict(Config, data)


__all__ = [
    # the tree
    "Config", "InstancesConfig", "SandboxConfig", "AgentConfig", "EngineConfig", "GuidanceConfig",
    "RewardConfig", "AlgorithmConfig", "TrainerConfig", "EvalConfig", "VerifierConfig",
    "TrackingConfig", "OrchestrationConfig", "PRESETS",
    # loading and checks
    "ConfigError", "load_config", "from_dict", "to_dict", "flatten", "parse_override",
    "check_range", "check_choice", "RANGES", "Range",
    # the choices
    "Preset", "InstanceFormat", "Tier", "SandboxBackend", "Isolation", "WorkingCopy", "Scaffold",
    "EngineName", "Dtype", "Device", "GuidanceSource", "GuidancePart", "GuidanceTrigger",
    "GuidanceMode", "Algorithm", "Advantage", "LossAgg", "TrainerEngine", "Schedule", "Compile",
    "Objective", "ExpertStyle", "TaskRunner",
]
