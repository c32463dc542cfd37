"""Presets are files, a config names one or a list of them, and the shipped configs resolve to the
values they resolved to before the hardware settings moved into presets.

tests/data/config_snapshots.json holds `flatten(load_config(...))` of every shipped config and of
each paper preset alone, taken while the presets were Python dicts and configs/quickstart.yaml set
its hardware itself. Every resolved value must stay as it was (the `preset` key aside: it now
names the presets a config uses).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from swe_rlvr import config_presets
from swe_rlvr.config import (
    CONFIG_DIR,
    PRESET_DIR,
    PRESETS,
    Config,
    ConfigError,
    explain_config,
    flatten,
    load_config,
    preset_values,
)

ROOT = Path(__file__).resolve().parents[1]
SNAPSHOTS = json.loads((ROOT / "tests" / "data" / "config_snapshots.json").read_text())

PAPER = ("nebius", "agent-rlvr")
HARDWARE_PRESETS = ("cpu-2core", "gpu-1x")
HARDWARE_KEYS = {
    "sandbox.backend", "engine.name", "engine.device", "engine.dtype", "engine.torch_threads",
    "engine.max_batch", "trainer.engine", "trainer.num_gpus", "trainer.device", "trainer.autocast",
    "trainer.compile", "trainer.grad_checkpointing", "trainer.pack_tokens", "trainer.old_logprobs",
    "orchestration.max_workers"}
"""What a hardware preset may set: how the work runs, never what is trained."""


def _leaves(values: dict, prefix: str = "") -> set[str]:
    out: set[str] = set()
    for key, value in values.items():
        out |= _leaves(value, f"{prefix}{key}.") if isinstance(value, dict) else {prefix + key}
    return out


def _resolved(name: str) -> dict:
    """The snapshot's entry `name` resolved by today's code: a shipped file or one preset alone."""
    if name.startswith("preset "):
        return flatten(load_config(None, [f"preset={name.split()[1]}"]))
    return flatten(load_config(ROOT / "configs" / name))


@pytest.mark.parametrize("name", sorted(SNAPSHOTS))
def test_every_shipped_config_resolves_to_its_snapshot(name):
    """The guard of the move: every value and its type, key for key. A key added to the tree
    since the snapshot must hold its default: no shipped config or preset sets it unseen."""
    before = {k: v for k, v in SNAPSHOTS[name].items() if k != "preset"}
    now = {k: v for k, v in _resolved(name).items() if k != "preset"}
    default = flatten(Config())
    expected = {k: before.get(k, default[k]) for k in now}
    assert now == expected and set(before) <= set(now)
    assert {k: type(v) for k, v in now.items()} == {k: type(v) for k, v in expected.items()}


def test_the_snapshot_covers_every_shipped_config():
    assert {p.name for p in (ROOT / "configs").glob("*.yaml")} <= set(SNAPSHOTS)


def test_the_quickstart_takes_its_hardware_from_cpu_2core():
    cfg, sources = explain_config(ROOT / "configs" / "quickstart.yaml")
    assert cfg.preset == "cpu-2core"
    written = _leaves(yaml.safe_load((ROOT / "configs" / "quickstart.yaml").read_text()))
    assert not written & HARDWARE_KEYS                  # the file states the recipe only
    cpu = _leaves(preset_values("cpu-2core"))
    assert {k for k, s in sources.items() if s == "preset:cpu-2core"} == cpu
    assert sources["instances.limit"] == sources["orchestration.iterations"] == "file"


def test_every_preset_has_its_file_and_every_file_is_a_preset():
    assert {p.stem for p in PRESET_DIR.glob("*.yaml")} == set(PRESETS) == {*PAPER, *HARDWARE_PRESETS}


@pytest.mark.parametrize("name", PRESETS)
def test_every_preset_alone_builds_a_config_and_names_no_preset(name):
    assert "preset" not in preset_values(name)
    assert load_config(None, presets=[name]).preset == (name,)
    assert load_config(None, [f"preset={name}"]).preset == name


@pytest.mark.parametrize("name", HARDWARE_PRESETS)
def test_a_hardware_preset_sets_only_hardware(name):
    assert _leaves(preset_values(name)) <= HARDWARE_KEYS


@pytest.mark.parametrize("name", PAPER)
def test_a_paper_preset_sets_no_hardware(name):
    """So a paper preset and a hardware preset combine in either order."""
    assert not _leaves(preset_values(name)) & HARDWARE_KEYS


def test_the_gpu_preset_is_the_measured_one_gpu_recipe():
    cfg = load_config(None, presets=["gpu-1x"])
    assert (cfg.engine.name, cfg.engine.device, cfg.engine.dtype) == ("hf", "cuda", "bfloat16")
    assert (cfg.trainer.engine, cfg.trainer.device, cfg.trainer.num_gpus) == ("torch", "cuda", 1)
    assert (cfg.trainer.compile, cfg.trainer.autocast, cfg.trainer.old_logprobs) == (
        True, "bf16", "recompute")


def test_a_list_applies_in_order_then_the_file_then_the_overrides(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("preset: [nebius, gpu-1x]\ntrainer:\n  pack_tokens: 8192\n")
    cfg = load_config(path)
    assert cfg.preset == ("nebius", "gpu-1x")
    assert cfg.algorithm.clip_high == 0.3 and cfg.engine.device == "cuda"  # one of each
    assert cfg.trainer.pack_tokens == 8192                                 # the file over both
    assert load_config(path, ["trainer.pack_tokens=2048"]).trainer.pack_tokens == 2048
    assert load_config(None, ["preset=[cpu-2core, gpu-1x]"]).trainer.pack_tokens == 16384
    assert load_config(None, ["preset=[gpu-1x, cpu-2core]"]).trainer.pack_tokens == 4096


def test_presets_given_apart_follow_the_files_own():
    """`swe-rlvr config show --config configs/quickstart.yaml --preset gpu-1x`: the quickstart's
    recipe on the GPU's hardware."""
    cfg = load_config(ROOT / "configs" / "quickstart.yaml", presets=["gpu-1x"])
    assert cfg.preset == ("cpu-2core", "gpu-1x")
    assert (cfg.engine.device, cfg.trainer.compile, cfg.trainer.pack_tokens) == ("cuda", True, 16384)
    assert (cfg.instances.limit, cfg.trainer.lr) == (4, 2.0e-5)


def test_an_unknown_preset_in_a_list_is_named_with_the_choices():
    with pytest.raises(ConfigError, match="Unknown preset 'gpu-2x'; choose one of: nebius, "
                                          "agent-rlvr, cpu-2core, gpu-1x \\(did you mean 'gpu-1x'"):
        load_config(None, ["preset=[nebius, gpu-2x]"])
    with pytest.raises(ConfigError, match="Unknown preset 'cpu'"):
        load_config(None, presets=["cpu"])


def test_a_preset_file_that_names_presets_is_refused(tmp_path, monkeypatch):
    (tmp_path / "gpu-1x.yaml").write_text("preset: nebius\n")
    monkeypatch.setattr(config_presets, "PRESET_DIR", tmp_path)
    config_presets._read_preset.cache_clear()
    try:
        with pytest.raises(ConfigError, match="names presets itself; a preset sets values only"):
            load_config(None, ["preset=gpu-1x"])
    finally:
        config_presets._read_preset.cache_clear()


def test_the_shipped_configs_are_the_repositorys(tmp_path, monkeypatch):
    """In a checkout the package's configs/ links to the repository's; a path written
    configs/<name>.yaml that is missing where the command runs reads the shipped file."""
    assert CONFIG_DIR.resolve() == (ROOT / "configs").resolve()
    monkeypatch.chdir(tmp_path)
    assert load_config("configs/quickstart.yaml") == load_config(ROOT / "configs" / "quickstart.yaml")
    as_file, as_preset = load_config("configs/presets/gpu-1x.yaml"), load_config(None, presets=["gpu-1x"])
    assert (as_file.engine, as_file.trainer) == (as_preset.engine, as_preset.trainer)
    with pytest.raises(ConfigError, match="Cannot read config file 'configs/nope.yaml'.*shipped "
                                          ".*configs/quickstart.yaml"):
        load_config("configs/nope.yaml")
