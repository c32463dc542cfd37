"""Nothing outside `--out` is written, deleted or followed through a symbolic link, and a run's
earlier results survive bad input: hostile rows, run ids and planted links against `grade`.

Each test is an attack that once worked. `snapshot` records every byte and link under a directory,
`neighbour` is a directory beside `--out` that no run may touch. Names and configs are attacked in
test_hostile_cli, single bad rows in test_hostile_predictions.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grade_cli_support import calc, grade, pred, report_of, rows_file  # noqa: F401
from test_sandbox_support import store  # noqa: F401


def snapshot(root: Path, skip: tuple[str, ...] = ()) -> dict[str, object]:
    """Every entry under `root` (but the top-level names in `skip`): a file's bytes, a link's
    target, or "dir"."""
    seen: dict[str, object] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if rel.parts[0] in skip:
            continue
        seen[str(rel)] = (f"link -> {path.readlink()}" if path.is_symlink()
                          else "dir" if path.is_dir() else path.read_bytes())
    return seen


def neighbour(tmp_path: Path) -> Path:
    """A directory beside --out holding data that no grade run may touch."""
    path = tmp_path / "neighbour"
    (path / "deep").mkdir(parents=True)
    (path / "precious.txt").write_text("years of work\n")
    (path / "deep" / "notes.md").write_text("more\n")
    return path


# --------------------------------------------------------------------------- earlier results


def test_rows_that_are_all_bad_keep_the_previous_results(calc, store, tmp_path):
    """A file of nothing but bad rows grades nothing, and replaces none of the run's earlier
    results (report, summary, validations.parquet): only the list of skipped rows is new."""
    inst, instances = calc
    assert grade(tmp_path, store, instances, rows_file(tmp_path, [pred(inst)])) == 0
    run_dir = tmp_path / "out" / "r1"
    before = snapshot(run_dir, skip=("skipped_predictions.json",))
    bad = rows_file(tmp_path, [pred(inst, patch=7), pred(inst, instance_id="gone-1")], "bad.jsonl")
    assert grade(tmp_path, store, instances, bad) == 1
    assert snapshot(run_dir, skip=("skipped_predictions.json",)) == before
    assert len(json.loads((run_dir / "skipped_predictions.json").read_text())) == 2


# --------------------------------------------------------------------------- only --out


def test_grade_writes_and_deletes_nothing_outside_out(calc, store, tmp_path, capsys):
    """Hostile rows and records together (an instance id leading into a neighbouring directory,
    models named "..", "../../neighbour" and "a\\b"): everything beside --out is byte for byte
    what it was, and --out's earlier runs survive too."""
    inst, _ = calc
    near = neighbour(tmp_path)
    escape = "../../../neighbour/pwned"
    instances = tmp_path / "instances.jsonl"
    instances.write_text(json.dumps(inst.to_row()) + "\n"
                         + json.dumps({**inst.to_row(), "instance_id": escape}) + "\n")
    (tmp_path / "out" / "older").mkdir(parents=True)
    (tmp_path / "out" / "older" / "report.json").write_text("{}")
    rows = [pred(inst), pred(inst, instance_id=escape), pred(inst, model=".."),
            pred(inst, model="../../neighbour"), pred(inst, model="a\\b")]
    preds = rows_file(tmp_path, rows)
    before = snapshot(tmp_path, skip=("out", "sandboxes", "store"))
    code = grade(tmp_path, store, instances, preds, "--set", "instances.skip_invalid=true")
    assert not (near / "pwned").exists()
    assert snapshot(tmp_path, skip=("out", "sandboxes", "store")) == before
    assert (tmp_path / "out" / "older" / "report.json").read_text() == "{}"
    assert code == 1
    err = capsys.readouterr().err
    assert f"instance {escape!r}: field 'instance_id' is {escape!r}" in err  # the record
    assert report_of(tmp_path, "org__m", inst)["resolved"] is True


# --------------------------------------------------------------------------- more attacks


@pytest.mark.parametrize("run_id", ["../../elsewhere", "..", "", "-x"])
def test_run_id_that_is_no_single_directory_is_refused(calc, store, tmp_path, capsys, run_id):
    """`--run-id ../../elsewhere` put the run, and its clean-up, outside --out."""
    inst, instances = calc
    neighbour(tmp_path)
    before = snapshot(tmp_path, skip=("sandboxes", "store"))
    preds = rows_file(tmp_path, [pred(inst)])
    code = grade(tmp_path, store, instances, preds, run_id=run_id)
    assert snapshot(tmp_path, skip=("sandboxes", "store", "preds.jsonl")) == {
        k: v for k, v in before.items() if k != "preds.jsonl"}  # not even --out is made
    assert code == 2 and "error: --run-id is " in capsys.readouterr().err


def test_symbolic_links_in_out_are_never_followed(calc, store, tmp_path):
    """A model directory and a summary file planted in --out as links to a neighbour: grade wrote
    the reports through the first and overwrote the neighbour's file through the second. Now the
    links are replaced, and the neighbour is untouched."""
    inst, instances = calc
    near = neighbour(tmp_path)
    run_dir = tmp_path / "out" / "r1"
    run_dir.mkdir(parents=True)
    (run_dir / "org__m").symlink_to(near / "deep")
    (run_dir / "org__m.r1.json").symlink_to(near / "precious.txt")
    before = snapshot(near)
    assert grade(tmp_path, store, instances, rows_file(tmp_path, [pred(inst)])) == 0
    assert snapshot(near) == before
    assert not (run_dir / "org__m").is_symlink() and not (run_dir / "org__m.r1.json").is_symlink()
    assert report_of(tmp_path, "org__m", inst)["resolved"] is True


def test_symlinked_run_directory_is_refused(calc, store, tmp_path, capsys):
    """`<out>/<run_id>` itself a link to a neighbour: grade would clear and write there."""
    inst, instances = calc
    near = neighbour(tmp_path)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "r1").symlink_to(near)
    before = snapshot(near)
    code = grade(tmp_path, store, instances, rows_file(tmp_path, [pred(inst)]))
    assert snapshot(near) == before
    assert code == 2 and "is a symbolic link" in capsys.readouterr().err
