"""Malformed instance records, configs and files are refused with a message naming the field.

Each case states the fix the user needs; `--skip-invalid` loads the rest and reports the bad one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from swe_rlvr.cli import main
from swe_rlvr.config import ConfigError, load_config
from swe_rlvr.loaders import (
    InstanceError,
    InstanceFileError,
    load_instances,
    read_instances,
)

PATCH = ("diff --git a/astropy/modeling/separable.py b/astropy/modeling/separable.py\n"
         "--- a/astropy/modeling/separable.py\n+++ b/astropy/modeling/separable.py\n"
         "@@ -242,7 +242,7 @@ def _cstack(left, right):\n"
         "         cright = _coord_matrix(right, 'right', noutp)\n"
         "     else:\n         cright = np.zeros((noutp, right.shape[1]))\n"
         "-        cright[-right.shape[0]:, -right.shape[1]:] = 1\n"
         "+        cright[-right.shape[0]:, -right.shape[1]:] = right\n \n"
         "     return np.hstack([cleft, cright])\n \n")
TEST_PATCH = ("diff --git a/astropy/modeling/tests/test_separable.py "
              "b/astropy/modeling/tests/test_separable.py\n"
              "--- a/astropy/modeling/tests/test_separable.py\n"
              "+++ b/astropy/modeling/tests/test_separable.py\n"
              "@@ -28,6 +28,7 @@\n p1 = models.Polynomial1D(1, name='p1')\n"
              "+cm_4d_expected = (np.array([False, True]), np.array([[True, False]]))\n \n \n")


def record(**changes) -> dict:
    base = {
        "repo": "astropy/astropy", "instance_id": "astropy__astropy-12907",
        "base_commit": "d16bfe05a744909de4b27f5875fe0d4ed41ce607", "patch": PATCH,
        "test_patch": TEST_PATCH,
        "problem_statement": "Modeling's `separability_matrix` does not compute separability "
                             "correctly for nested CompoundModels\n",
        "hints_text": "", "created_at": "2022-03-03T15:14:54Z", "version": "4.3",
        "FAIL_TO_PASS": json.dumps(["astropy/modeling/tests/test_separable.py::"
                                    "test_separable[compound_model6-result6]"]),
        "PASS_TO_PASS": json.dumps(["astropy/modeling/tests/test_separable.py::"
                                    "test_coord_matrix"]),
        "environment_setup_commit": "298ccb478e6bf092953bca67a3d29dc6c35f6752",
    }
    base.update(changes)
    return {k: v for k, v in base.items() if v is not _DROP}


_DROP = object()


def write(tmp_path: Path, records: list[dict], name: str = "instances.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


# (case, records, field named, words the message must contain)
BAD_RECORDS = [
    ("missing field", [record(problem_statement=_DROP)], "problem_statement", "is missing"),
    ("wrong type", [record(base_commit=1234)], "base_commit", "must be a string, got int 1234"),
    ("F2P an int", [record(FAIL_TO_PASS=3)], "FAIL_TO_PASS",
     "must be a list of test ids or a JSON-encoded list, got int 3"),
    ("F2P not JSON", [record(FAIL_TO_PASS="test_separable")], "FAIL_TO_PASS", "not JSON"),
    ("F2P empty", [record(FAIL_TO_PASS="[]")], "FAIL_TO_PASS", "empty list"),
    ("P2P holds a number", [record(PASS_TO_PASS=["ok::a", 7])], "PASS_TO_PASS", "got int 7"),
    ("empty instance_id", [record(instance_id="  ")], "instance_id", "is empty"),
    ("duplicate id", [record(), record()], "instance_id", "repeats the id of row 0"),
    ("patch without header", [record(patch="change line 245 to `= right`")], "patch",
     "no 'diff --git'"),
    ("repo not owner/name", [record(repo="astropy")], "repo", "'owner/name'"),
    ("unknown split", [record(split="lite")], "split", "train, test, dev"),
    ("install_config version as number",
     [record(install_config={"python": 3.1, "install": "pip install -e ."})],
     "install_config.python", "quote versions"),
    ("internal env key", [{"instance_id": "x__y-1", "repo": "x/y", "base_commit": "abc",
                           "problem_statement": "p", "patch": PATCH, "test_patch": "",
                           "fail_to_pass": ["t::a"], "pass_to_pass": [],
                           "env": {"pyhton": "3.11"}}], "env.pyhton", "valid fields: python"),
]


@pytest.mark.parametrize("case,records,field,words", BAD_RECORDS, ids=[c[0] for c in BAD_RECORDS])
def test_bad_record_is_refused_naming_the_field(tmp_path, case, records, field, words):
    path = write(tmp_path, records)
    with pytest.raises(InstanceError) as caught:
        load_instances(path)
    message = str(caught.value)
    assert f"field {field!r}" in message and words in message, message
    assert str(path) in message and "--skip-invalid" in message
    assert caught.value.record.field == field


def test_error_message_names_instance_field_and_value(tmp_path):
    with pytest.raises(InstanceError) as caught:
        load_instances(write(tmp_path, [record(FAIL_TO_PASS=3)]))
    assert str(caught.value).startswith(
        "instance 'astropy__astropy-12907': field 'FAIL_TO_PASS' must be a list of test ids or "
        "a JSON-encoded list, got int 3")


def test_record_without_usable_id_is_named_by_row(tmp_path):
    with pytest.raises(InstanceError, match=r"^row 1: field 'instance_id' is empty"):
        load_instances(write(tmp_path, [record(), record(instance_id="")]))


def test_skip_invalid_loads_the_rest_and_reports_the_bad_one(tmp_path):
    records = [record(instance_id=f"astropy__astropy-{n}") for n in range(12900, 12920)]
    records[7]["FAIL_TO_PASS"] = "not a list"
    result = load_instances(write(tmp_path, records), skip_invalid=True)
    assert len(result.instances) == 19
    (bad,) = result.skipped
    assert (bad.index, bad.instance_id, bad.field) == (7, "astropy__astropy-12907", "FAIL_TO_PASS")
    assert "not JSON" in bad.message
    assert "astropy__astropy-12907" not in {i.instance_id for i in result.instances}


# --------------------------------------------------------------------------- unreadable files


def test_missing_instance_file_names_the_path(tmp_path):
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        load_instances(missing)


def test_instance_file_that_is_not_json_names_the_path(tmp_path):
    path = tmp_path / "notes.json"
    path.write_text("instance_id: astropy__astropy-12907\n")
    with pytest.raises(InstanceFileError, match=r"notes\.json.*line 1.*not JSON"):
        load_instances(path)


def test_broken_parquet_names_the_path(tmp_path):
    path = tmp_path / "broken.parquet"
    path.write_bytes(b"PAR1" + b"\x00" * 64)
    with pytest.raises(InstanceFileError, match=r"broken\.parquet.*not a readable Parquet"):
        load_instances(path)


def test_instances_parquet_of_another_schema_is_refused(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    path = tmp_path / "instances.parquet"
    pq.write_table(pa.table({"instance_id": ["x"]}), path)
    with pytest.raises(ValueError, match="unstamped.*Re-run"):
        read_instances(path)


def test_unknown_format_lists_the_choices(tmp_path):
    with pytest.raises(ValueError, match="choose one of: auto, swe-bench, swe-gym"):
        load_instances(write(tmp_path, [record()]), format="swebench")


# --------------------------------------------------------------------------- configs


def write_yaml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "experiment.yaml"
    path.write_text(text)
    return path


def test_unknown_config_key_names_it_and_lists_valid_keys(tmp_path):
    with pytest.raises(ConfigError) as caught:
        load_config(write_yaml(tmp_path, "algorithm: {clip_hgh: 0.3}\n"))
    message = str(caught.value)
    assert "'algorithm.clip_hgh'" in message
    assert "valid keys:" in message and "clip_high" in message and "group_size" in message


def test_wrong_config_type_names_key_and_expected_type(tmp_path):
    with pytest.raises(ConfigError, match=r"'algorithm\.group_size' must be an integer, got 'ten'"):
        load_config(write_yaml(tmp_path, "algorithm:\n  group_size: ten\n"))


def test_section_that_is_not_a_mapping(tmp_path):
    with pytest.raises(ConfigError, match="algorithm must be a mapping"):
        load_config(write_yaml(tmp_path, "algorithm: 3\n"))


def test_override_without_equals_sign():
    with pytest.raises(ConfigError,
                       match=r"Bad override 'algorithm\.clip_high'.*section\.key=value"):
        load_config(None, ["algorithm.clip_high"])


def test_override_of_unknown_section():
    with pytest.raises(ConfigError, match=r"'nosuchsection'.*valid keys: preset, instances"):
        load_config(None, ["nosuchsection.x=1"])


def test_unknown_preset_lists_presets(tmp_path):
    with pytest.raises(ConfigError, match="Unknown preset 'nebuis'; choose one of: nebius"):
        load_config(write_yaml(tmp_path, "preset: nebuis\n"))


def test_unreadable_config_file_names_the_path(tmp_path):
    with pytest.raises(ConfigError, match=r"Cannot read config file .*missing\.yaml"):
        load_config(tmp_path / "missing.yaml")


def test_config_that_is_not_yaml_names_the_path(tmp_path):
    with pytest.raises(ConfigError, match=r"experiment\.yaml' is not valid YAML"):
        load_config(write_yaml(tmp_path, "algorithm: {clip_high: [0.3\n"))


# --------------------------------------------------------------------------- the CLI


def test_cli_validate_reports_the_first_bad_record(tmp_path, capsys):
    path = write(tmp_path, [record(), record(instance_id="astropy__astropy-13033", FAIL_TO_PASS=3)])
    assert main(["instances", "validate", str(path)]) == 1
    out = capsys.readouterr().out
    assert "instance 'astropy__astropy-13033': field 'FAIL_TO_PASS'" in out


def test_cli_validate_with_skip_invalid_reports_every_bad_record(tmp_path, capsys):
    records = [record(instance_id=f"astropy__astropy-{n}") for n in range(5)]
    records[1]["patch"] = "not a diff"
    records[3]["PASS_TO_PASS"] = 5
    assert main(["instances", "validate", str(write(tmp_path, records)), "--skip-invalid"]) == 1
    out = capsys.readouterr().out
    assert "'astropy__astropy-1': field 'patch'" in out
    assert "'astropy__astropy-3': field 'PASS_TO_PASS'" in out
    assert "3 valid, 2 invalid" in out


def test_cli_validate_passes_a_clean_file(tmp_path, capsys):
    assert main(["instances", "validate", str(write(tmp_path, [record()]))]) == 0
    assert "1 valid, 0 invalid" in capsys.readouterr().out


def test_cli_list_of_a_missing_file_is_one_clear_line(tmp_path, capsys):
    assert main(["instances", "list", str(tmp_path / "gone.parquet")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: Instance file") and "gone.parquet" in err


def test_cli_list_and_export_a_split(tmp_path, capsys):
    records = [record(instance_id="astropy__astropy-1", split="train"),
               record(instance_id="astropy__astropy-2", split="test")]
    path = write(tmp_path, records)
    assert main(["instances", "list", str(path), "--split", "test"]) == 0
    out = capsys.readouterr().out
    assert "astropy__astropy-2" in out and "astropy__astropy-1" not in out
    assert "1 instances from 1 repos" in out
    out_file = tmp_path / "instances.parquet"
    assert main(["instances", "export", str(path), "--out", str(out_file), "--split", "train"]) == 0
    assert [i.instance_id for i in read_instances(out_file)] == ["astropy__astropy-1"]
