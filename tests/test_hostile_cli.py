"""Bad input never destroys data: hostile predictions, instance files and configs against `grade`.

Each test is an attack that once worked. The rules they pin down live in one place each:
`swe_rlvr.instances.name_problem` (an id, a model name or a run id is one safe path component),
`swe_rlvr.config.RANGES` (every numeric setting has a range, checked at load), and `sandbox.cli`
(a bad prediction row is reported and skipped, the others graded; nothing outside `--out` is
written, deleted or followed through a symbolic link).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from swe_rlvr.cli import main
from swe_rlvr.config import ConfigError, load_config
from swe_rlvr.loaders import InstanceError, load_instances
from test_sandbox_support import make_instance, sandbox_config, store  # noqa: F401

LITE = Path(__file__).resolve().parents[2] / "shared" / "data" / "swebench_lite.parquet"


@pytest.fixture
def calc(store, tmp_path):
    """The small real instance of test_sandbox_support, and an instance file holding it."""
    inst = make_instance(store)
    path = tmp_path / "instances.jsonl"
    path.write_text(json.dumps(inst.to_row()) + "\n")
    return inst, path


def rows_file(tmp_path: Path, rows: list, name: str = "preds.jsonl") -> Path:
    """JSON lines; a str item is written as the line itself (to plant lines that are not JSON)."""
    path = tmp_path / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def pred(inst, model: str = "org/m", patch: str | None = None, **changes) -> dict:
    row = {"instance_id": inst.instance_id, "model_name_or_path": model,
           "model_patch": inst.patch if patch is None else patch}
    row.update(changes)
    return row


def grade(tmp_path: Path, store: Path, instances: Path, predictions: Path, *extra: str,
          run_id: str = "r1") -> int:
    cfg = sandbox_config(tmp_path)
    return main(["grade", "--instances", str(instances), "--predictions", str(predictions),
                 "--repos", str(store), "--workers", "1", "--out", str(tmp_path / "out"),
                 f"--run-id={run_id}", "--set", f"sandbox.workdir={cfg.workdir}", *extra])


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


def report_of(tmp_path: Path, model_dir: str, inst) -> dict:
    path = tmp_path / "out" / "r1" / model_dir / inst.instance_id / "report.json"
    return json.loads(path.read_text())[inst.instance_id]


# --------------------------------------------------------------------------- 1. model names


def test_model_name_dotdot_cannot_delete_the_out_directory(calc, store, tmp_path, capsys):
    """A row with `model_name_or_path: ".."` made grade `rmtree(<out>/<run_id>/..)` to clear "that
    model's previous results": the whole --out, every earlier run in it. The name is now refused
    as a path component, naming the field, and the other row is still graded."""
    inst, instances = calc
    earlier = tmp_path / "out" / "earlier-run" / "m.earlier-run.json"
    earlier.parent.mkdir(parents=True)
    earlier.write_text("{}")
    preds = rows_file(tmp_path, [pred(inst, model=".."), pred(inst, model="org/m")])
    code = grade(tmp_path, store, instances, preds)
    assert earlier.exists() and earlier.read_text() == "{}"
    assert code == 1
    err = capsys.readouterr().err
    assert "line 1: field 'model_name_or_path' is '..', which names a directory" in err
    assert report_of(tmp_path, "org__m", inst)["resolved"] is True


@pytest.mark.parametrize("model", ["", ".", "..", "a\\b", "nul\x00byte", "-rf", "x" * 300,
                                   "validations.parquet", "m.r1.json"])
def test_model_names_that_are_no_single_directory_are_refused(calc, tmp_path, model):
    """Each of these would leave the run directory, fail to be created after grading, or collide
    with a file the run writes (`validations.parquet`, `<model>.<run_id>.json`)."""
    from sandbox.cli import read_predictions
    inst, _ = calc
    good, skipped = read_predictions(str(rows_file(tmp_path, [pred(inst, model=model)])),
                                     {inst.instance_id: inst}, set())
    assert good == [] and [s.field for s in skipped] == ["model_name_or_path"]


def test_slash_in_a_model_name_is_swebenchs_double_underscore(calc, tmp_path):
    """SWE-bench writes "org/model" as the directory "org__model"; such names stay valid, and
    even "../.." becomes one harmless name."""
    from sandbox.cli import read_predictions
    inst, _ = calc
    rows = [pred(inst, model="princeton-nlp/SWE-Llama-13b"), pred(inst, model="../..")]
    good, skipped = read_predictions(str(rows_file(tmp_path, rows)), {inst.instance_id: inst},
                                     set())
    assert [p.model for p in good] == ["princeton-nlp__SWE-Llama-13b", "..__.."] and not skipped


# --------------------------------------------------------------------------- 2. instance ids


HOSTILE_IDS = ["../../x", "..", ".", "a/b", "a\\b", "-rf", "tab\there", "nul\x00", "x" * 200,
               "surrogate\ud800"]


@pytest.mark.parametrize("ident", HOSTILE_IDS, ids=repr)
def test_instance_id_that_is_no_single_path_component_is_refused_at_load(tmp_path, ident):
    """`instance_id: "../../x"` put a report outside --out (`<out>/<run>/<model>/<id>/`). Ids are
    now checked as path components when an instance file loads, naming the field."""
    from test_bad_input import record, write
    with pytest.raises(InstanceError) as caught:
        load_instances(write(tmp_path, [record(instance_id=ident)]))
    assert caught.value.record.field == "instance_id"
    assert "field 'instance_id' is " in str(caught.value)


def test_instances_parquet_with_a_hostile_id_is_refused(calc, tmp_path):
    """`instances.parquet` (written by us, read back by every stage) skips the loaders' checks, so
    the Instance itself refuses an id that is no single path component."""
    from swe_rlvr.instances import Instance
    inst, _ = calc
    with pytest.raises(ValueError, match=r"Instance field 'instance_id' is '\.\./\.\./x'"):
        Instance.from_row({**inst.to_row(), "instance_id": "../../x"})


def test_real_instance_ids_still_load(tmp_path):
    """SWE-bench, SWE-Gym and SWE-smith ids, the built-in suite, and the 312 records of SWE-bench
    Lite beside the project all pass the path-component rule."""
    from test_bad_input import record, write
    ids = ["astropy__astropy-12907", "django__django-11099", "getmoto__moto-5752",
           "Project-MONAI__MONAI-3690", "pandas-dev__pandas.95280573.func_pm_ctrl_shuffle__xyz",
           "owner__repo.abc123.func_pm_ctrl_shuffle__xyz", "scikit-learn__scikit-learn-25747"]
    loaded = load_instances(write(tmp_path, [record(instance_id=i) for i in ids]))
    assert [i.instance_id for i in loaded.instances] == ids
    assert len(load_instances("builtin").instances) >= 158
    if not LITE.is_file():
        pytest.skip(f"SWE-bench Lite is not beside the project ({LITE})")
    lite = load_instances(LITE)
    assert (len(lite.instances), lite.skipped) == (312, [])


# --------------------------------------------------------------------------- 3. config ranges


HOSTILE_SETTINGS = [
    ("sandbox.memory_mb=-5", "at least 1"),
    ("sandbox.memory_mb=1000000000000000000000000", "at most 1099511627776"),
    ("sandbox.test_timeout_s=0", "above 0"),
    ("sandbox.command_timeout_s=.nan", "above 0"),
    ("sandbox.cpu_time_s=-1", "at least 1"),
    ("agent.wall_time_s=.inf", "at most 2592000"),
    ("engine.gpu_memory_utilization=1.5", "at most 1"),
    ("algorithm.group_size=0", "at least 1"),
    ("algorithm.clip_low=-0.2", "at least 0"),
    ("algorithm.curriculum_max_rate=2", "at most 1"),
    ("algorithm.adv_eps=0", "above 0"),
    ("trainer.lr=-1e-6", "above 0"),
    ("trainer.zero_stage=1", "at least 2 and at most 3"),
    ("reward.tamper_penalty=0.5", "at most 0"),
    ("reward.format_penalty=-1", "at least 0"),
    ("orchestration.retries=100000", "at most 10"),
]


@pytest.mark.parametrize("override,words", HOSTILE_SETTINGS, ids=[s[0] for s in HOSTILE_SETTINGS])
def test_out_of_range_setting_is_refused_naming_key_value_range_and_fix(override, words):
    """`sandbox.memory_mb=-5` loaded, and the gold patch then graded unresolved: a silent 0. Every
    numeric key now has a range, checked at load; a positive tamper penalty would even pay a patch
    for changing how the tests run."""
    key, _, value = override.partition("=")
    with pytest.raises(ConfigError) as caught:
        load_config(None, [override])
    message = str(caught.value)
    assert message.startswith(f"Config key {key!r} is ") and words in message, message
    assert f"e.g. {key}=" in message and "(the default)" in message


def test_negative_sandbox_memory_is_refused_before_grading(calc, store, tmp_path, capsys):
    """The attack end to end: the grade command stops at the config, and writes no results."""
    inst, instances = calc
    preds = rows_file(tmp_path, [pred(inst)])
    code = grade(tmp_path, store, instances, preds, "--set", "sandbox.memory_mb=-5")
    assert not (tmp_path / "out").exists()  # once: a report of the gold patch, unresolved
    assert code == 2
    assert "'sandbox.memory_mb' is -5, outside its range (at least 1" in capsys.readouterr().err


def test_every_numeric_setting_has_a_range_that_holds_its_default():
    """A numeric field without a range would load any value: add one to RANGES with the field."""
    import dataclasses
    import typing

    from swe_rlvr.config import RANGES, Config
    numeric = {}
    for section in dataclasses.fields(Config):
        if dataclasses.is_dataclass(section.default_factory):
            hints = typing.get_type_hints(section.default_factory)
            for f in dataclasses.fields(section.default_factory):
                if hints[f.name] in (int, float):
                    numeric[f"{section.name}.{f.name}"] = f.default
    assert sorted(numeric) == sorted(RANGES), "add the missing keys to swe_rlvr.config.RANGES"
    assert [k for k, v in numeric.items() if v not in RANGES[k]] == []
    assert all(math.isfinite(r.lo) or math.isfinite(r.hi) for r in RANGES.values())


# --------------------------------------------------------------------------- 4. one bad row


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


# --------------------------------------------------------------------------- 5. only --out


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
    near = neighbour(tmp_path)
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
