"""The commands follow one set of conventions: every command takes `--config` and positional
KEY=VALUE overrides (`grade` too; its old `--set` still works, with a warning), `quickstart` runs
from any directory, and every evaluation step leaves a SWE-bench predictions file."""

from __future__ import annotations

import json
from pathlib import Path

from swe_rlvr.cli import build_parser, main
from swe_rlvr.config import load_config
from tasks import store
from test_tasks import _episode


def test_quickstart_finds_its_config_from_any_directory_and_takes_another(tmp_path, monkeypatch):
    from flows.cli import quickstart_config
    monkeypatch.chdir(tmp_path)
    found = Path(quickstart_config())
    assert found.is_file() and found.parts[-2:] == ("configs", "quickstart.yaml")
    from agent.models import SMOLLM2_DIR
    assert load_config(str(found)).engine.model == SMOLLM2_DIR  # loadable here; built on first use
    args = build_parser().parse_args(["quickstart", "--config", "mine.yaml", "eval.runs=1"])
    assert (args.config, args.overrides) == ("mine.yaml", ["eval.runs=1"])


def test_grade_takes_positional_overrides_like_every_command(tmp_path, capsys):
    """A bad override stops grade at the config, before any instance is read."""
    args = build_parser().parse_args(["grade", "--instances", "x", "--predictions", "gold",
                                      "sandbox.isolation=pgroup", "eval.runs=1"])
    assert args.overrides == ["sandbox.isolation=pgroup", "eval.runs=1"]
    assert main(["grade", "--instances", "x", "--predictions", "gold",
                 "sandbox.memory_mb=-5"]) == 2
    assert "'sandbox.memory_mb' is -5" in capsys.readouterr().err


def test_grade_set_still_works_and_warns(capsys):
    assert main(["grade", "--instances", "x", "--predictions", "gold",
                 "--set", "sandbox.memory_mb=-5"]) == 2
    err = capsys.readouterr().err
    assert "`grade --set KEY=VALUE` is deprecated; pass KEY=VALUE alone" in err
    assert "'sandbox.memory_mb' is -5" in err


def test_evaluation_writes_swebench_predictions_of_each_instances_first_run(tmp_path):
    """One line per instance (its run 0), in SWE-bench's three fields, beside eval.parquet;
    `swe-rlvr grade --predictions` reads it back."""
    from sandbox.predictions import read_predictions
    from tasks.evaluate import evaluate
    run = str(tmp_path / "train-x")
    pairs = [_episode("a", 0, True), _episode("a", 1, False), _episode("b", 0, False)]
    pairs[0][0]["patch"] = "diff --git a/x b/x\n"
    rolls = store.join(run, "iter_2", "eval_rollouts.parquet")
    grades = store.join(run, "iter_2", "eval_validations.parquet")
    store.write_table(rolls, "rollouts", [p[0] for p in pairs])
    store.write_table(grades, "validations", [p[1] for p in pairs])
    evaluate.fn(run, 2, rolls, grades)
    lines = (tmp_path / "train-x" / "iter_2" / "predictions.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [
        {"instance_id": "a", "model_name_or_path": "train-x-policy0",
         "model_patch": "diff --git a/x b/x\n"},
        {"instance_id": "b", "model_name_or_path": "train-x-policy0", "model_patch": ""}]
    known = {"a": object(), "b": object()}
    preds, skipped = read_predictions(str(tmp_path / "train-x" / "iter_2" / "predictions.jsonl"),
                                      known, set())
    assert [p.instance_id for p in preds] == ["a", "b"] and not skipped
