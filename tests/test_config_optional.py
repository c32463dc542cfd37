"""Optional config keys (`str | None`): None means "not set, use the default the docstring names".

A file writes None as `null` (or `~`), an override as `key=null` or `key=` (empty). "" reads as
None too: configs, saved run configs and Prefect deployment parameters written before these keys
were optional said "absent" with "", and they must still load to the same config.
"""

from __future__ import annotations

import types
import typing
from pathlib import Path

import pytest
import yaml

from swe_rlvr.config import Config, ConfigError, flatten, load_config, to_dict


def optional_keys() -> set[str]:
    """Every dotted key of the tree typed `str | None`, found from the type hints alone."""
    out = set()

    def walk(cls: type, prefix: str) -> None:
        for name, tp in typing.get_type_hints(cls).items():
            if isinstance(tp, type) and hasattr(tp, "__dataclass_fields__"):
                walk(tp, f"{prefix}{name}.")
            elif typing.get_origin(tp) in (typing.Union, types.UnionType) \
                    and set(typing.get_args(tp)) == {str, type(None)}:
                out.add(prefix + name)
    walk(Config, "")
    return out


OPTIONAL = sorted(optional_keys())
NAMED = {"instances.repo_store", "sandbox.workdir", "sandbox.env_cache", "sandbox.docker_image",
         "engine.model", "engine.base_url", "engine.served_model", "engine.server_python",
         "guidance.teacher_base_url", "guidance.teacher_model", "trainer.deepspeed_config",
         "tracking.mlflow_uri", "tracking.artifact_location", "tracking.ui_url",
         "orchestration.run_name", "orchestration.ray_address"}


def _get(cfg: Config, key: str) -> object:
    section, name = key.split(".")
    return getattr(getattr(cfg, section), name)


def test_the_absent_keys_are_optional_and_default_to_none():
    assert NAMED <= set(OPTIONAL)
    assert all(_get(Config(), key) is None for key in OPTIONAL)
    assert Config().preset is None
    assert not [k for k, v in flatten(Config()).items() if v == ""]  # no "" left meaning absent


@pytest.mark.parametrize("value", ["null", "~", '""', "''", ""])
def test_a_file_writes_none_as_null_and_old_files_with_empty_strings_still_load(tmp_path, value):
    path = tmp_path / "old.yaml"
    path.write_text(f"preset: {value}\nsandbox:\n  workdir: {value}\n  env_cache: {value}\n"
                    f"engine:\n  model: {value}\ntracking:\n  mlflow_uri: {value}\n")
    assert load_config(path) == Config()


@pytest.mark.parametrize("key", OPTIONAL)
@pytest.mark.parametrize("spelling", ["null", "", "~", '""'])
def test_an_override_sets_any_optional_key_back_to_none(key, spelling):
    assert _get(load_config(None, [f"{key}=/srv/x"]), key) == "/srv/x"
    assert _get(load_config(None, [f"{key}=/srv/x", f"{key}={spelling}"]), key) is None


def test_a_value_is_a_string_and_a_non_string_is_refused(tmp_path):
    path = tmp_path / "set.yaml"
    path.write_text("sandbox:\n  workdir: /srv/work\norchestration:\n  run_name: 7\n")
    cfg = load_config(path)
    assert (cfg.sandbox.workdir, cfg.orchestration.run_name) == ("/srv/work", "7")
    with pytest.raises(ConfigError, match=r"'sandbox.workdir' must be a string, got \["):
        load_config(None, ["sandbox.workdir=[a, b]"])


def test_a_saved_run_config_loads_back_with_its_nones(tmp_path: Path):
    """`flows.runs.run_directory` saves `to_dict(cfg)`, None as null."""
    cfg = load_config(None, ["sandbox.workdir=/srv/work", "preset=nebius"])
    saved = tmp_path / "config.yaml"
    saved.write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))
    assert "env_cache: null" in saved.read_text()
    assert load_config(saved) == cfg


def test_no_preset_is_none_or_empty():
    assert load_config(None, ["preset="]).preset is None
    assert load_config(None, ["preset=null"]) == Config()


def test_a_run_without_a_model_is_refused_before_it_starts():
    from flows.preflight import PreflightError, start_policy
    with pytest.raises(PreflightError, match="engine.model is not set; build one with"):
        start_policy(Config())
    assert start_policy(load_config(None, ["engine.model=/m"])) == "/m"
