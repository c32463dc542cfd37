"""`swe-rlvr grade` end to end on a small real instance: SWE-bench's layout, deterministic reruns."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from swe_rlvr import artifacts
from swe_rlvr.cli import main
from test_sandbox_support import make_instance, sandbox_config, store  # noqa: F401


@pytest.fixture
def files(store, tmp_path):
    inst = make_instance(store)
    instances = tmp_path / "instances.jsonl"
    row = inst.to_row()
    instances.write_text(json.dumps({**row, "source": "internal"}) + "\n")
    preds = tmp_path / "preds.jsonl"
    preds.write_text(json.dumps({"instance_id": inst.instance_id, "model_name_or_path": "org/m",
                                 "model_patch": inst.patch}) + "\n")
    return inst, instances, preds


def run(files, store, tmp_path, predictions):
    inst, instances, _ = files
    cfg = sandbox_config(tmp_path)
    return main(["grade", "--instances", str(instances), "--predictions", str(predictions),
                 "--repos", str(store), "--workers", "1", "--out", str(tmp_path / "out"),
                 "--run-id", "r1", f"sandbox.workdir={cfg.workdir}"])


def test_grade_writes_swebench_layout_and_overwrites_stale_results(files, store, tmp_path, capsys):
    inst, _, preds = files
    assert run(files, store, tmp_path, preds) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].split() == ["instance", "outcome", "F2P", "P2P", "swebench", "s", "why"]
    assert printed[1].split()[:5] == [inst.instance_id, "resolved", "1/1", "2/2", "resolved"]
    assert printed[2] == "total 1: 1 resolved; SWE-bench's own verdict agrees on 1/1"
    run_dir = tmp_path / "out" / "r1"
    report = json.loads((run_dir / "org__m" / inst.instance_id / "report.json").read_text())
    assert report[inst.instance_id]["resolved"] is True
    assert json.loads((run_dir / "org__m.r1.json").read_text())["resolved_ids"] == [inst.instance_id]
    table = artifacts.check("validations", pq.read_table(run_dir / "validations.parquet"))
    assert table.column("resolved").to_pylist() == [True]

    preds.write_text(json.dumps({"instance_id": inst.instance_id, "model_name_or_path": "org/m",
                                 "model_patch": ""}) + "\n")
    (run_dir / "org__m" / "stale-instance").mkdir()
    assert run(files, store, tmp_path, preds) == 0
    report = json.loads((run_dir / "org__m" / inst.instance_id / "report.json").read_text())
    assert report[inst.instance_id]["resolved"] is False
    assert not (run_dir / "org__m" / "stale-instance").exists()


def test_unknown_prediction_ids_are_skipped_and_named(files, store, tmp_path, capsys):
    """A row naming an instance the instance file lacks is skipped (exit 1), not graded, and
    stderr names the row, the field and the fix; see tests/test_hostile_predictions.py for the rest."""
    preds = tmp_path / "bad.jsonl"
    preds.write_text(json.dumps({"instance_id": "nope", "model_name_or_path": "m", "model_patch": ""}) + "\n")
    assert run(files, store, tmp_path, preds) == 1
    err = capsys.readouterr().err
    assert "line 1: field 'instance_id' is 'nope', which is not in the instance file" in err
