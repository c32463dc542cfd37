"""A bad prediction row is reported and skipped, and the others are graded: hostile prediction
files against `grade`.

Each test is an attack that once worked: a row without a patch, a patch no file can hold, two
names for one results directory or a repeated row, a model named like a file the run writes, and
JSON lines in another key order. The rule lives in `sandbox.cli`; names and configs are attacked in
test_hostile_cli, the output directory in test_hostile_out_dir.
"""

from __future__ import annotations

import json

import pyarrow.parquet as pq

from grade_cli_support import calc, grade, pred, report_of, rows_file  # noqa: F401
from test_sandbox_support import store  # noqa: F401

# --------------------------------------------------------------------------- one bad row


def test_one_bad_row_is_reported_and_skipped_and_the_rest_graded(calc, store, tmp_path, capsys):
    """One row without `model_patch` raised for the whole file, and no row was graded. Now every
    bad row is named on stderr, in `skipped_predictions.json` and in its model's summary, and the
    good rows are graded; the exit status is 1."""
    inst, instances = calc
    rows = [pred(inst),                                               # line 1: good
            {"instance_id": inst.instance_id, "model_name_or_path": "org/m"},  # 2: no patch
            pred(inst, model="other", instance_id="nope__nope-1"),    # 3: unknown instance
            pred(inst, model="other", instance_id="../../x"),         # 4: not a path component
            pred(inst, model="other", patch=42),                      # 5: patch not a string
            '{"instance_id": "acme__calc-1", "model_patch": ',        # 6: not JSON
            [inst.instance_id, "org/m", ""],                          # 7: not an object
            {"model_name_or_path": "other", "model_patch": ""},       # 8: no id
            pred(inst, model="empty", patch="")]                      # 9: good
    assert grade(tmp_path, store, instances, rows_file(tmp_path, rows)) == 1
    err = capsys.readouterr().err
    expected = [("line 2", "model_patch"), ("line 3", "instance_id"),
                ("line 4", "instance_id"), ("line 5", "model_patch"), ("line 6", ""),
                ("line 7", ""), ("line 8", "instance_id")]
    run_dir = tmp_path / "out" / "r1"
    skipped = json.loads((run_dir / "skipped_predictions.json").read_text())
    assert [(s["where"], s["field"]) for s in skipped] == expected
    for row in skipped:
        assert row["message"] in err
    assert "line 3: field 'instance_id' is 'nope__nope-1', which is not in the instance file" in err
    assert report_of(tmp_path, "org__m", inst)["resolved"] is True
    assert report_of(tmp_path, "empty", inst)["resolved"] is False
    summary = json.loads((run_dir / "org__m.r1.json").read_text())
    assert summary["resolved_ids"] == [inst.instance_id] and summary["submitted_instances"] == 2
    assert [s["where"] for s in summary["skipped_rows"]] == ["line 2"]
    assert pq.read_table(run_dir / "validations.parquet").num_rows == 2


# --------------------------------------------------------------------------- more attacks


def test_two_names_for_one_directory_and_repeated_rows_are_skipped(calc, store, tmp_path, capsys):
    """"org/m" and "org__m" share the directory org__m, and a row repeated for one instance and
    model shares its report: the later row overwrote the first one's resolved report with its own
    (unresolved) one. The first row now wins and the others are skipped, named."""
    inst, instances = calc
    rows = [pred(inst), pred(inst, model="org__m", patch=""), pred(inst, patch="")]
    code = grade(tmp_path, store, instances, rows_file(tmp_path, rows))
    assert report_of(tmp_path, "org__m", inst)["resolved"] is True
    err = capsys.readouterr().err
    assert "line 2: field 'model_name_or_path' is 'org__m', whose results directory" in err
    assert "line 3: field 'instance_id' repeats line 1" in err
    assert code == 1


def test_jsonl_whose_rows_do_not_start_with_instance_id_is_read(calc, store, tmp_path):
    """SWE-agent writes `{"model_name_or_path": ..., "instance_id": ...}` per line; the reader took
    any JSONL whose first key was not instance_id for one JSON document and failed on line 2."""
    inst, instances = calc
    rows = [{"model_name_or_path": "org/m", "instance_id": inst.instance_id,
             "model_patch": inst.patch},
            {"model_name_or_path": "empty", "instance_id": inst.instance_id, "model_patch": ""}]
    assert grade(tmp_path, store, instances, rows_file(tmp_path, rows)) == 0
    assert report_of(tmp_path, "org__m", inst)["resolved"] is True


def test_lone_surrogate_in_a_patch_is_skipped_not_a_crash(calc, store, tmp_path, capsys):
    """JSON can carry "\\ud800", which no file can hold: writing that patch into its sandbox
    raised out of grade_many, and every other row's grade was lost. The row is now skipped,
    named."""
    inst, instances = calc
    rows = [pred(inst), pred(inst, model="broken", patch=inst.patch + "\ud800")]
    assert grade(tmp_path, store, instances, rows_file(tmp_path, rows)) == 1
    assert "line 2: field 'model_patch' holds a lone surrogate" in capsys.readouterr().err
    assert report_of(tmp_path, "org__m", inst)["resolved"] is True


def test_model_named_like_a_run_file_is_skipped(calc, store, tmp_path, capsys):
    """A model named "validations.parquet" got a directory where the run writes that file, and the
    run crashed after grading with every result unwritten."""
    inst, instances = calc
    rows = [pred(inst), pred(inst, model="validations.parquet", patch="")]
    assert grade(tmp_path, store, instances, rows_file(tmp_path, rows)) == 1
    assert "line 2: field 'model_name_or_path' is 'validations.parquet'" in capsys.readouterr().err
    assert pq.read_table(tmp_path / "out" / "r1" / "validations.parquet").num_rows == 1
