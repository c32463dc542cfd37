"""`swe-rlvr config show`: every resolved value with its source (default, preset:<name>, file,
override), values that read back as overrides, and errors that name the key and the fix."""

from __future__ import annotations

import json
from pathlib import Path

from swe_rlvr.cli import main
from swe_rlvr.config import flatten, load_config, preset_values

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = str(ROOT / "configs" / "quickstart.yaml")


def show(capsys, *argv: str) -> dict[str, tuple[str, str]]:
    """key -> (value, source), from the printed table."""
    assert main(["config", "show", *argv]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if not line.startswith("#")]
    assert lines[0].split() == ["key", "value", "source"]
    rows = {}
    for line in lines[1:]:
        key, rest = line.split(maxsplit=1)
        value, source = rest.rsplit(maxsplit=1)
        rows[key] = (value.strip(), source)
    return rows


def test_every_key_is_shown_with_its_source(capsys):
    rows = show(capsys, "--config", QUICKSTART, "trainer.lr=3e-5")
    assert set(rows) == set(flatten(load_config(QUICKSTART)))
    assert rows["preset"] == ("cpu-2core", "file")
    assert rows["instances.tiers"] == ("[easy]", "file")
    assert rows["trainer.compile"] == ("false", "preset:cpu-2core")
    assert rows["trainer.lr"] == ("3e-05", "override")
    assert rows["sandbox.memory_mb"] == ("4096", "default")
    assert rows["sandbox.workdir"] == ("null", "default")


def test_a_preset_alone_shows_what_it_sets(capsys):
    rows = show(capsys, "--preset", "cpu-2core", "--changed")
    assert rows.pop("preset") == ("[cpu-2core]", "override")
    assert set(rows) == {"sandbox.backend", "engine.name", "engine.dtype", "engine.torch_threads",
                         "engine.max_batch", "trainer.pack_tokens", "trainer.compile",
                         "trainer.grad_checkpointing", "trainer.autocast", "trainer.old_logprobs",
                         "orchestration.max_workers"}
    assert {source for _, source in rows.values()} == {"preset:cpu-2core"}
    assert rows["trainer.pack_tokens"][0] == str(preset_values("cpu-2core")["trainer"]["pack_tokens"])


def test_a_preset_given_apart_follows_the_files_presets(capsys):
    rows = show(capsys, "--config", QUICKSTART, "--preset", "gpu-1x")
    assert rows["preset"] == ("[cpu-2core, gpu-1x]", "override")
    assert rows["trainer.compile"] == ("true", "preset:gpu-1x")        # the later preset wins
    assert rows["engine.model"] == ("runs/.models/smollm2", "file")


def test_a_paper_preset_and_a_hardware_preset_show_apart(capsys):
    rows = show(capsys, "--preset", "nebius", "--preset", "gpu-1x", "--changed")
    assert rows["algorithm.clip_high"] == ("0.3", "preset:nebius")
    assert rows["engine.device"] == ("cuda", "preset:gpu-1x")


def test_every_shown_value_reads_back_as_an_override(capsys):
    """The value column is YAML: passing each line back as KEY=VALUE rebuilds the config."""
    rows = show(capsys, "--config", QUICKSTART)
    overrides = [f"{key}={value}" for key, (value, _) in rows.items() if key != "preset"]
    rebuilt = flatten(load_config(None, overrides))
    assert rebuilt | {"preset": None} == flatten(load_config(QUICKSTART)) | {"preset": None}


def test_json_gives_each_value_and_source(capsys):
    assert main(["config", "show", "--config", QUICKSTART, "--changed", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["instances.tiers"] == {"value": ["easy"], "source": "file"}
    assert shown["engine.dtype"] == {"value": "auto", "source": "preset:cpu-2core"}
    assert "sandbox.memory_mb" not in shown


def test_a_bad_key_names_the_key_and_the_valid_ones(capsys):
    assert main(["config", "show", "trainer.lrr=1"]) == 2
    err = capsys.readouterr().err
    assert "Unknown config key 'trainer.lrr' in trainer; valid keys: engine, lr," in err


def test_a_bad_preset_names_the_choices(capsys):
    assert main(["config", "show", "--preset", "cpu-2cor"]) == 2
    err = capsys.readouterr().err
    assert "Unknown preset 'cpu-2cor'; choose one of: nebius, agent-rlvr, cpu-2core, gpu-1x" in err
    assert "(did you mean 'cpu-2core'?)" in err


def test_a_missing_config_file_names_the_shipped_ones(capsys, tmp_path):
    assert main(["config", "show", "--config", str(tmp_path / "nope.yaml")]) == 2
    assert "shipped configs/agent-rlvr.yaml" in capsys.readouterr().err
