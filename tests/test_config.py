"""The config tree: paper defaults, presets, file values and overrides, in that precedence."""

from __future__ import annotations

from pathlib import Path

import pytest

from swe_rlvr.config import Config, PRESETS, flatten, from_dict, load_config, to_dict

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


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
    sections = [v for v in to_dict(Config()).values() if isinstance(v, dict)]
    assert len(flat) == 1 + sum(len(s) for s in sections)  # preset + each section's fields


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_builds_a_config(name):
    assert load_config(None, [f"preset={name}"]).preset == name


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_config_loads(path):
    cfg = load_config(path)
    if cfg.preset == "nebius":
        assert cfg.algorithm.clip_high == 0.3
