"""The config tree: paper defaults, presets, file values and overrides, in that precedence; and
every choice setting refuses a value outside its `Literal`, wherever that list is also kept."""

from __future__ import annotations

import dataclasses
import functools
import importlib
import typing
from pathlib import Path

import pytest

from swe_rlvr import config
from swe_rlvr.config import (
    PRESETS,
    Config,
    ConfigError,
    flatten,
    from_dict,
    load_config,
    to_dict,
)

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"


def write_yaml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "experiment.yaml"
    path.write_text(text)
    return path


def test_defaults_follow_the_papers():
    cfg = Config()
    assert cfg.algorithm.group_size == 10                              # Nebius G=10
    assert (cfg.algorithm.clip_low, cfg.algorithm.clip_high) == (0.2, 0.28)  # DAPO clip-higher
    assert cfg.algorithm.loss_agg == "token_mean"                      # DAPO token-level loss
    assert cfg.algorithm.kl_coef == 0.0                                # DAPO and Nebius: no KL
    assert cfg.algorithm.dynamic_sampling is True
    assert cfg.engine.temperature == 1.0                               # Nebius sampling
    assert cfg.guidance.parts == ("plan", "feedback", "location")     # Agent-RLVR's three kinds
    assert load_config() == cfg


def test_nebius_preset_sets_its_clip_and_learning_rate(tmp_path):
    cfg = load_config(write_yaml(tmp_path, "preset: nebius\n"))
    assert (cfg.algorithm.clip_low, cfg.algorithm.clip_high) == (0.2, 0.3)
    assert cfg.trainer.lr == 1e-6 and cfg.trainer.rft_lr == 5e-6
    assert cfg.guidance.enabled is False
    assert cfg.preset == "nebius"


def test_file_values_beat_the_preset_and_overrides_beat_the_file(tmp_path):
    path = write_yaml(tmp_path, "preset: nebius\nalgorithm:\n  clip_high: 0.25\n")
    assert load_config(path).algorithm.clip_high == 0.25
    assert load_config(path, ["algorithm.clip_high=0.27"]).algorithm.clip_high == 0.27
    assert load_config(path).algorithm.group_size == 10  # untouched preset value stays


def test_an_override_can_pick_the_preset():
    cfg = load_config(None, ["preset=agent-rlvr"])
    assert (cfg.algorithm.name, cfg.algorithm.group_size) == ("dpo", 16)


def test_an_empty_section_keeps_the_preset(tmp_path):
    cfg = load_config(write_yaml(tmp_path, "preset: nebius\nalgorithm:\n"))
    assert cfg.algorithm.clip_high == 0.3


def test_an_override_fills_an_empty_section(tmp_path):
    cfg = load_config(write_yaml(tmp_path, "algorithm:\n"), ["algorithm.group_size=4"])
    assert cfg.algorithm.group_size == 4


def test_dotted_overrides_parse_as_yaml_scalars():
    cfg = load_config(None, ["sandbox.network=true", "agent.max_turns=12",
                             "engine.temperature=0.7", "guidance.parts=[plan, location]",
                             "tracking.experiment=ablation-1"])
    assert cfg.sandbox.network is True and cfg.agent.max_turns == 12
    assert cfg.engine.temperature == 0.7
    assert cfg.guidance.parts == ("plan", "location")
    assert cfg.tracking.experiment == "ablation-1"


def test_exponent_without_a_dot_is_still_a_number(tmp_path):
    """YAML 1.1 reads `1e-6` as a string; a float field accepts it anyway."""
    cfg = load_config(write_yaml(tmp_path, "trainer:\n  lr: 1e-6\n"), ["trainer.rft_lr=2e-5"])
    assert cfg.trainer.lr == 1e-6 and cfg.trainer.rft_lr == 2e-5


def test_lists_become_tuples_and_a_lone_string_a_one_tuple(tmp_path):
    cfg = load_config(write_yaml(tmp_path, "guidance:\n  parts: [location]\n"
                                           "instances:\n  ids: astropy__astropy-12907\n"))
    assert cfg.guidance.parts == ("location",)
    assert cfg.instances.ids == ("astropy__astropy-12907",)


def test_ints_are_accepted_for_float_fields():
    assert load_config(None, ["algorithm.clip_high=1"]).algorithm.clip_high == 1.0
    assert isinstance(load_config(None, ["algorithm.clip_high=1"]).algorithm.clip_high, float)


def test_to_dict_is_plain_yaml_data_and_round_trips():
    cfg = load_config(None, ["preset=nebius", "guidance.parts=[plan]"])
    data = to_dict(cfg)
    assert data["guidance"]["parts"] == ["plan"]          # tuples become lists
    assert data["algorithm"]["clip_high"] == 0.3
    assert from_dict(Config, data) == cfg


def test_flatten_gives_dotted_keys_for_every_leaf():
    flat = flatten(Config())
    assert flat["algorithm.clip_high"] == 0.28
    assert flat["trainer.lr"] == 1e-6
    assert flat["guidance.parts"] == ["plan", "feedback", "location"]
    assert flat["trainer.lora.r"] == 0                 # a section nested in a section

    def leaves(node: dict) -> int:
        return sum(leaves(v) if isinstance(v, dict) else 1 for v in node.values())
    assert len(flat) == leaves(to_dict(Config()))          # preset + every section's fields


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_builds_a_config(name):
    assert load_config(None, [f"preset={name}"]).preset == name


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_config_loads(path):
    cfg = load_config(path)
    if cfg.preset == "nebius":
        assert cfg.algorithm.clip_high == 0.3


def test_new_fields_default_and_range():
    cfg = Config()
    assert cfg.algorithm.curriculum_min_tries == 2
    assert cfg.trainer.processes == 1
    assert load_config(None, ["trainer.processes=8"]).trainer.processes == 8
    for key in ("algorithm.curriculum_min_tries", "trainer.processes"):
        with pytest.raises(ConfigError, match=f"'{key}' is 0, outside its range \\(at least 1"):
            load_config(None, [f"{key}=0"])


# --------------------------------------------------------------------------- choices


def _literal_values(tp: typing.Any) -> tuple:
    """The values of the Literal in `tp`: `Literal[...]`, `tuple[Literal[...], ...]` or a union."""
    if typing.get_origin(tp) is typing.Literal:
        return typing.get_args(tp)
    return tuple(v for arg in typing.get_args(tp) for v in _literal_values(arg))


def choice_fields() -> dict[str, tuple[tuple, bool]]:
    """Every setting of the tree with a fixed set of values -> (its values, whether it takes a list
    of them), found from the type hints alone."""
    out: dict[str, tuple[tuple, bool]] = {}

    def walk(cls: type, prefix: str) -> None:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            tp = hints[f.name]
            if dataclasses.is_dataclass(tp):
                walk(tp, f"{prefix}{f.name}.")
            elif values := _literal_values(tp):
                out[prefix + f.name] = (values, typing.get_origin(tp) is tuple)
    walk(Config, "")
    return out


CHOICES = {key: values for key, (values, _) in choice_fields().items()}
LISTS = {key for key, (_, is_list) in choice_fields().items() if is_list}


def _typo(choices: tuple) -> str:
    """The longest choice with its last two letters swapped: "pairs" -> "paisr"."""
    word = max(choices, key=len)
    return word[:-2] + word[-1] + word[-2]


def _override(key: str, value: str) -> str:
    return f"{key}=[{value}]" if key in LISTS else f"{key}={value}"


def test_the_choice_fields_include_the_obvious_ones():
    assert {"guidance.mode", "algorithm.name", "agent.scaffold", "sandbox.backend", "engine.name",
            "trainer.compile", "guidance.parts", "instances.tiers", "preset"} <= set(CHOICES)
    assert "instances.train_split" not in CHOICES and "engine.model" not in CHOICES  # open-ended


@pytest.mark.parametrize("key", sorted(CHOICES))
def test_a_typo_in_any_choice_names_the_key_the_value_and_the_choices(key):
    bad = _typo(CHOICES[key])
    assert bad not in CHOICES[key]
    with pytest.raises(ConfigError) as err:
        load_config(None, [_override(key, bad)])
    message = str(err.value)
    assert key in message and repr(bad) in message
    assert all(str(choice) in message for choice in CHOICES[key])


@pytest.mark.parametrize("key", sorted(CHOICES))
def test_every_choice_of_every_choice_field_loads(key):
    for choice in CHOICES[key]:
        cfg = load_config(None, [_override(key, choice)])
        value = functools.reduce(getattr, key.split("."), cfg)
        assert value == ((choice,) if key in LISTS else choice)


@pytest.mark.parametrize("override, message", [
    ("guidance.mode=strp", "guidance.mode='strp' is not one of: keep, strip, pairs (did you mean "
                           "'strip'?)."),
    ("algorithm.name=ppo", "algorithm.name='ppo' is not one of: dapo, grpo, rft, dpo"),
    ("agent.scaffold=sweagent", "agent.scaffold='sweagent' is not one of: swe-agent, bash"),
    ("sandbox.backend=dokcer", "sandbox.backend='dokcer' is not one of: local, docker"),
    ("guidance.parts=[plan, locaton]",
     "guidance.parts[1]='locaton' is not one of: plan, feedback, location"),
    ("trainer.compile=sometimes", "'trainer.compile' must be true, false or auto, got 'sometimes'"),
])
def test_a_bad_choice_in_an_override_is_refused_at_load(override, message):
    with pytest.raises(ConfigError) as err:
        load_config(None, [override])
    assert message in str(err.value)


def test_a_bad_choice_in_a_yaml_file_is_refused_at_load(tmp_path):
    path = write_yaml(tmp_path, "guidance:\n  mode: strp\nalgorithm:\n  name: dapo\n")
    with pytest.raises(ConfigError, match="guidance.mode='strp' is not one of: keep, strip, pairs"):
        load_config(path)


def test_a_bad_choice_is_refused_by_from_dict_too():
    """trainer.launch rebuilds a config with from_dict: it checks choices as load_config does."""
    with pytest.raises(ConfigError, match="sandbox.isolation='jail' is not one of: auto, bwrap"):
        from_dict(Config, {"sandbox": {"isolation": "jail"}})
    with pytest.raises(ConfigError, match="preset='x' is not one of: nebius, agent-rlvr"):
        from_dict(Config, {"preset": "x"})


REGISTRIES = [  # (module, dict of implementations, Literal of its names)
    ("sandbox", "BACKENDS", config.SandboxBackend),
    ("agent.tools", "SCAFFOLDS", config.Scaffold),
    ("trainer.loops", "ENGINES", config.TrainerEngine),
    ("trainer.advantages", "ADVANTAGES", config.Advantage),
    ("tasks.update", "LOOPS", config.Algorithm),
    ("flows.runners", "TASK_RUNNERS", config.TaskRunner),
]


@pytest.mark.parametrize("module, name, literal", REGISTRIES,
                         ids=[f"{m}.{n}" for m, n, _ in REGISTRIES])
def test_every_registry_of_implementations_has_the_literals_names(module, name, literal):
    """A registry keeps its dict (names to lazily imported implementations); its names are the
    Literal's, so a config value that loads always finds its implementation."""
    assert set(getattr(importlib.import_module(module), name)) == set(typing.get_args(literal))


def test_the_engine_and_preset_names_are_the_literals():
    from agent.engines import ENGINES
    from agent.scripted import VARIANTS
    names = typing.get_args(config.EngineName)
    assert set(ENGINES) == {n for n in names if not n.startswith("scripted")}
    assert {n.partition(":")[2] for n in names if n.startswith("scripted:")} == set(VARIANTS)
    assert {p.stem for p in config.PRESET_DIR.glob("*.yaml")} == set(typing.get_args(config.Preset))


COPIES = [  # (module, tuple, its values): derive each from the Literal, then drop it here
    ("agent.recovery", "TRIGGERS", typing.get_args(config.GuidanceTrigger)),
    ("agent.expert", "STYLES", typing.get_args(config.ExpertStyle)),
    ("agent.guidance_sources", "PARTS", typing.get_args(config.GuidancePart)),
    ("trainer.verifier", "OBJECTIVES", typing.get_args(config.Objective)),
    ("sandbox.isolation", "LEVELS", typing.get_args(config.Isolation)[1:]),
    ("swe_rlvr.loaders", "FORMATS", typing.get_args(config.InstanceFormat)),
    ("swe_rlvr.instances", "DIFFICULTIES", ("", *typing.get_args(config.Tier))),
]


@pytest.mark.parametrize("module, name, values", COPIES, ids=[f"{m}.{n}" for m, n, _ in COPIES])
def test_every_copy_of_a_literals_values_agrees_with_it(module, name, values):
    """These tuples repeat a Literal's values, in its order; until each is derived from the Literal
    (`typing.get_args`), this catches one changing without the other."""
    assert getattr(importlib.import_module(module), name) == values


def test_the_guidance_bench_runs_every_mode():
    from bench.guidance import MODES
    assert set(MODES) == set(typing.get_args(config.GuidanceMode))
