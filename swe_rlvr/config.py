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

A `preset` (top-level key) applies named bundles of values *before* the file's own values, so
`preset: nebius` with `algorithm.clip_high: 0.25` still ends at 0.25. Each preset is a file,
`configs/presets/<name>.yaml`: the papers' methods (nebius, agent-rlvr) and the hardware
(cpu-2core, gpu-1x); `preset: [nebius, gpu-1x]` applies both, in order (`config_presets`).

The tree lives in a few modules, and this one re-exports all of their public names:
`config_choices` (the Literal of every choice field), `config_rollout` and `config_training` (the
sections), `config_ranges` (`RANGES`), `config_loading` (YAML, overrides and the checks) and
`config_presets` (the preset files, and the layers a config resolves from).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from swe_rlvr.config_choices import (
    Advantage,
    Algorithm,
    Compile,
    DecodeAttention,
    DecodeForward,
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
    CONFIG_DIR,
    ConfigError,
    check_choice,
    check_range,
    find_config,
    flatten,
    from_dict,
    parse_override,
    to_dict,
)
from swe_rlvr.config_presets import PRESET_DIR, PRESETS, preset_names, preset_values, resolve, sources
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
    preset: Preset | tuple[Preset, ...] | None = None
    """The presets applied, in order, before this file's values: a name, a list of names, or None
    (none); each is a file `configs/presets/<name>.yaml` (`config_presets`)."""
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


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = (),
                presets: list[str] | tuple[str, ...] = ()) -> Config:
    """Build a Config from an optional YAML file and dotted `key=value` overrides; `presets` apply
    after the ones the file names (a path `configs/<name>.yaml` missing here reads the shipped
    file)."""
    data, _ = resolve(path, overrides, presets)
    return from_dict(Config, data)


def explain_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = (),
                   presets: list[str] | tuple[str, ...] = ()) -> tuple[Config, dict[str, str]]:
    """`load_config`'s Config, and each of its dotted keys' source: `default`, `preset:<name>`,
    `file` or `override`."""
    data, layers = resolve(path, overrides, presets)
    cfg = from_dict(Config, data)
    source = sources(layers)
    return cfg, {key: source.get(key, "default") for key in flatten(cfg)}


__all__ = [
    # the tree
    "Config", "InstancesConfig", "SandboxConfig", "AgentConfig", "EngineConfig", "GuidanceConfig",
    "RewardConfig", "AlgorithmConfig", "TrainerConfig", "EvalConfig", "VerifierConfig",
    "TrackingConfig", "OrchestrationConfig",
    # loading and checks
    "ConfigError", "load_config", "explain_config", "from_dict", "to_dict", "flatten",
    "parse_override", "check_range", "check_choice", "RANGES", "Range", "CONFIG_DIR", "find_config",
    # presets
    "PRESETS", "PRESET_DIR", "preset_names", "preset_values",
    # the choices
    "Preset", "InstanceFormat", "Tier", "SandboxBackend", "Isolation", "WorkingCopy", "Scaffold",
    "EngineName", "Dtype", "Device", "DecodeAttention", "DecodeForward",
    "GuidanceSource", "GuidancePart", "GuidanceTrigger",
    "GuidanceMode", "Algorithm", "Advantage", "LossAgg", "TrainerEngine", "Schedule", "Compile",
    "Objective", "ExpertStyle", "TaskRunner",
]
