"""Split `all`: files whose records carry no split (plain SWE-bench, SWE-Gym, SWE-rebench) are
usable for training, evaluation and grading, and training shares instances with evaluation only
when the config says so (`eval.share_train_instances`)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from swe_rlvr.builtin import load_builtin
from swe_rlvr.config import ConfigError, load_config
from swe_rlvr.loaders import select, write_instances
from tasks import store
from tasks.instances import instances, pool


@pytest.fixture(scope="module")
def unsplit():
    """Four built-in instances with their split removed, as a plain SWE-bench file has them."""
    return [dataclasses.replace(i, split="") for i in load_builtin()[:4]]


@pytest.fixture
def unsplit_file(tmp_path, unsplit):
    path = tmp_path / "plain.jsonl"
    write_instances(path, unsplit)
    return path


def _ids(xs):
    return sorted(x.instance_id for x in xs)


def test_all_selects_every_instance_whatever_its_split(unsplit):
    mixed = unsplit + load_builtin("test")[:1]
    assert _ids(pool(mixed, "all")) == _ids(mixed)
    assert _ids(select(mixed, "all")) == _ids(mixed)
    assert _ids(pool(mixed, "test")) == _ids(load_builtin("test")[:1])


def test_a_named_split_of_a_file_without_splits_says_to_use_all(unsplit):
    """The error that a plain SWE-bench file used to end in, with the fix it lacked."""
    with pytest.raises(ValueError, match="records carry no split, so use split 'all'"):
        pool(unsplit, "test")


def test_an_empty_or_unknown_split_is_refused_naming_the_choices(unsplit):
    """`--split ""` once fell back to the test split silently; now it is an error."""
    for bad in ("", "validation"):
        with pytest.raises(ValueError, match="names no split; choose one of train, test, dev "
                                             "or all"):
            pool(unsplit, bad)


def test_training_that_shares_evaluation_instances_is_refused_unless_allowed(tmp_path,
                                                                             unsplit_file):
    """train_split=all trains on what eval.split=all measures: refused, naming the option; with
    eval.share_train_instances=true the training instances are written."""
    base = [f"instances.source={unsplit_file}", "instances.train_split=all", "eval.split=all"]
    refused = load_config(None, base)
    with pytest.raises(ConfigError, match="eval.share_train_instances=true"):
        instances.fn(str(tmp_path), 0, refused, "all")
    assert not (tmp_path / "iter_0").exists()
    allowed = load_config(None, base + ["eval.share_train_instances=true"])
    url = instances.fn(str(tmp_path), 0, allowed, "all")
    assert len(store.read_rows(url, "instances")) == 4


def test_evaluation_alone_takes_all_without_the_option(tmp_path, unsplit_file):
    cfg = load_config(None, [f"instances.source={unsplit_file}", "eval.split=all"])
    url = instances.fn(str(tmp_path), 0, cfg, "all", out="eval_instances", limit=2, rotate=False)
    assert len(store.read_rows(url, "instances")) == 2


def test_the_api_refuses_shared_or_empty_splits_before_any_work(tmp_path, unsplit_file):
    """Checked before the preflight, so no model is needed to see the error."""
    from flows.api import evaluate, train
    base = [f"orchestration.run_root={tmp_path / 'runs'}", f"instances.source={unsplit_file}"]
    with pytest.raises(ConfigError, match="instances.train_split='all' and eval.split='test'"):
        train(None, base + ["instances.train_split=all"])
    with pytest.raises(ConfigError, match="eval.split is '', which names no split"):
        evaluate(None, base, split="")
    assert not (tmp_path / "runs").exists()


def test_the_sharing_warning_names_both_splits(caplog):
    from flows.api import _check_splits
    cfg = load_config(None, ["instances.train_split=all", "eval.split=all",
                             "eval.share_train_instances=true"])
    _check_splits(cfg, trains=True)
    assert "share instances (eval.share_train_instances=true)" in caplog.text


def test_grade_split_narrows_the_instances(tmp_path, unsplit_file, unsplit, capsys):
    """`grade --split test` on a file without splits grades nothing: each prediction names an
    instance outside the split and is skipped (exit 1); `--split all` is the default."""
    from swe_rlvr.cli import main
    preds = tmp_path / "preds.jsonl"
    preds.write_text(json.dumps({"instance_id": unsplit[0].instance_id, "model_name_or_path": "m",
                                 "model_patch": ""}) + "\n")
    code = main(["grade", "--instances", str(unsplit_file), "--predictions", str(preds),
                 "--out", str(tmp_path / "out"), "--split", "test",
                 f"orchestration.run_root={tmp_path}"])
    assert code == 1
    assert "total 0: nothing graded" in capsys.readouterr().out
    assert main(["grade", "--instances", str(unsplit_file), "--predictions", str(preds),
                 "--split", "everything"]) == 2
    assert "--split is 'everything', which names no split" in capsys.readouterr().err
