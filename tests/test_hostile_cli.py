"""Bad input never destroys data: hostile names, instance files and configs against `grade`.

Each test is an attack that once worked. The rules they pin down live in one place each:
`swe_rlvr.instances.name_problem` (an id, a model name or a run id is one safe path component) and
`swe_rlvr.config.RANGES` (every numeric setting has a range, checked at load). The other rules of
`sandbox.cli` have their own attacks: a bad prediction row is reported and skipped, the others
graded (test_hostile_predictions); nothing outside `--out` is written, deleted or followed through
a symbolic link (test_hostile_out_dir).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from grade_cli_support import calc, grade, pred, report_of, rows_file  # noqa: F401
from swe_rlvr.config import ConfigError, load_config
from swe_rlvr.loaders import InstanceError, load_instances
from test_sandbox_support import store  # noqa: F401

LITE = Path(__file__).resolve().parents[2] / "shared" / "data" / "swebench_lite.parquet"


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
    from sandbox.predictions import read_predictions
    inst, _ = calc
    good, skipped = read_predictions(str(rows_file(tmp_path, [pred(inst, model=model)])),
                                     {inst.instance_id: inst}, set())
    assert good == [] and [s.field for s in skipped] == ["model_name_or_path"]


def test_slash_in_a_model_name_is_swebenchs_double_underscore(calc, tmp_path):
    """SWE-bench writes "org/model" as the directory "org__model"; such names stay valid, and
    even "../.." becomes one harmless name."""
    from sandbox.predictions import read_predictions
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

    def walk(cls, prefix: str) -> None:             # a section and the sections nested in it
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if dataclasses.is_dataclass(hints[f.name]):
                walk(hints[f.name], f"{prefix}{f.name}.")
            elif hints[f.name] in (int, float):
                numeric[f"{prefix}{f.name}"] = f.default
    for section in dataclasses.fields(Config):
        if dataclasses.is_dataclass(section.default_factory):
            walk(section.default_factory, f"{section.name}.")
    assert sorted(numeric) == sorted(RANGES), "add the missing keys to swe_rlvr.config.RANGES"
    assert [k for k, v in numeric.items() if v not in RANGES[k]] == []
    assert all(math.isfinite(r.lo) or math.isfinite(r.hi) for r in RANGES.values())
