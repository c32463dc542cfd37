"""The loaders turn every SWE-bench-family format into the same `Instance`.

The SWE-bench Lite records are real (../shared/data beside the checkout); the SWE-rebench,
SWE-smith, SWE-Gym and internal records are small hand-made ones with real-looking fields.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from swe_rlvr.instances import DEFAULT_TEST_CMD, EnvSpec, Instance
from swe_rlvr.loaders import detect_format, load_instances, read_instances, write_instances
from swe_rlvr.patches import reverse_patch

LITE = Path(__file__).resolve().parents[2] / "shared" / "data" / "swebench_lite.parquet"
needs_lite = pytest.mark.skipif(not LITE.exists(), reason=f"shared data {LITE} is not beside "
                                                          f"this checkout")


@pytest.fixture(scope="module")
def lite():
    if not LITE.exists():
        pytest.skip(f"shared data {LITE} is not beside this checkout")
    return load_instances(LITE)


@pytest.fixture(scope="module")
def lite_raw():
    import pyarrow.parquet as pq
    return pq.read_table(LITE).to_pylist()


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


# --------------------------------------------------------------------------- SWE-bench Lite


@needs_lite
def test_all_lite_records_load_as_unique_valid_instances(lite):
    assert lite.format == "swe-bench"
    assert lite.skipped == []
    assert len(lite.instances) == 312
    assert len({i.instance_id for i in lite.instances}) == 312
    assert {i.source for i in lite.instances} == {"swe-bench"}
    assert {i.split for i in lite.instances} == {"dev", "test"}


@needs_lite
def test_lite_test_lists_match_the_raw_file(lite, lite_raw):
    by_id = {i.instance_id: i for i in lite.instances}
    for raw in lite_raw:
        instance = by_id[raw["instance_id"]]
        assert instance.fail_to_pass == tuple(json.loads(raw["FAIL_TO_PASS"]))
        assert instance.pass_to_pass == tuple(json.loads(raw["PASS_TO_PASS"]))
        assert len(instance.fail_to_pass) >= 1


@needs_lite
def test_lite_fields_are_carried_over(lite, lite_raw):
    raw = next(r for r in lite_raw if r["repo"] == "django/django")
    instance = next(i for i in lite.instances if i.instance_id == raw["instance_id"])
    assert (instance.base_commit, instance.patch, instance.test_patch) == (
        raw["base_commit"], raw["patch"], raw["test_patch"])
    assert instance.env.eval_script == raw["eval_script"]
    assert instance.image == raw["image"]
    assert instance.log_parser == "django"
    assert instance.meta()["log_parser"] == "parse_log_django"
    assert instance.test_files() and instance.fix_files()


@needs_lite
def test_lite_round_trips_through_instances_parquet(lite, tmp_path):
    path = write_instances(tmp_path / "instances.parquet", lite.instances)
    assert read_instances(path) == lite.instances


@needs_lite
def test_lite_envs_come_from_swebench_specs(lite):
    """Every Lite record gets SWE-bench's spec; the conda-only ones (matplotlib, xarray) load
    with a build_error that names the fix instead of a default environment."""
    assert {i.env.origin for i in lite.instances} == {"swebench"}
    unbuildable = {i.repo for i in lite.instances if i.env.build_error}
    assert unbuildable == {"matplotlib/matplotlib", "pydata/xarray"}
    assert all("environment.yml" in i.env.build_error for i in lite.instances if i.env.build_error)
    django = next(i for i in lite.instances if i.repo == "django/django")
    assert django.env.python and django.env.install and not django.env.build_error


def test_an_instances_parquet_of_schema_v1_is_refused(tmp_path):
    """v1 stored a plain record's default env, which ran its tests in swe-rlvr's interpreter."""
    import pyarrow.parquet as pq

    from swe_rlvr.artifacts import SCHEMA_KEY, table

    row = Instance(instance_id="a__b-1", repo="a/b", base_commit="c", problem_statement="p",
                   patch=PATCH, test_patch="", fail_to_pass=("t::x",), pass_to_pass=()).to_row()
    tbl = table("instances", [row])
    pq.write_table(tbl.replace_schema_metadata({SCHEMA_KEY: b"instances/v1"}), tmp_path / "i.parquet")
    with pytest.raises(ValueError, match="'instances/v1' is not instances/v2"):
        read_instances(tmp_path / "i.parquet")
    pq.write_table(tbl, tmp_path / "ok.parquet")
    assert read_instances(tmp_path / "ok.parquet")[0].env.build_error == ""


@needs_lite
def test_lite_round_trips_through_internal_jsonl(lite, tmp_path):
    path = write_instances(tmp_path / "instances.jsonl", lite.instances[:20])
    again = load_instances(path)
    assert again.format == "internal"
    assert again.instances == lite.instances[:20]


@needs_lite
def test_reversing_twice_gives_every_real_patch_back(lite):
    """git writes removals before additions, so reversal is an involution on real diffs."""
    for instance in lite.instances:
        for patch in (instance.patch, instance.test_patch):
            assert reverse_patch(reverse_patch(patch)) == patch, instance.instance_id


# --------------------------------------------------------------------------- other formats


PATCH = """\
diff --git a/src/tespy/tools/helpers.py b/src/tespy/tools/helpers.py
index 3f2a1b0..8c9d4e2 100644
--- a/src/tespy/tools/helpers.py
+++ b/src/tespy/tools/helpers.py
@@ -10,3 +10,3 @@ def convert_to_SI(prop, value, unit):
     if prop == "T":
-        return value + 273.15
+        return value + 273.15 if unit == "C" else value
     return value
"""

TEST_PATCH = """\
diff --git a/tests/test_tools/test_helpers.py b/tests/test_tools/test_helpers.py
index 1a2b3c4..5d6e7f8 100644
--- a/tests/test_tools/test_helpers.py
+++ b/tests/test_tools/test_helpers.py
@@ -1,2 +1,5 @@
 from tespy.tools.helpers import convert_to_SI
 
+
+def test_convert_kelvin():
+    assert convert_to_SI("T", 300, "K") == 300
"""


def swe_bench_record(**changes) -> dict:
    record = {
        "repo": "oemof/tespy", "instance_id": "oemof__tespy-653",
        "base_commit": "6a1fb0fc7b7e6f3a8d1a0c0b9f2f2b2a9e0c6e31", "patch": PATCH,
        "test_patch": TEST_PATCH,
        "problem_statement": "convert_to_SI adds 273.15 to temperatures given in Kelvin\n",
        "hints_text": "", "created_at": "2025-01-14T09:12:44Z", "version": "0.7",
        "FAIL_TO_PASS": ["tests/test_tools/test_helpers.py::test_convert_kelvin"],
        "PASS_TO_PASS": ["tests/test_tools/test_helpers.py::test_convert_celsius"],
        "environment_setup_commit": "6a1fb0fc7b7e6f3a8d1a0c0b9f2f2b2a9e0c6e31",
    }
    record.update(changes)
    return record


def test_swe_rebench_install_config_becomes_the_env_spec(tmp_path):
    record = swe_bench_record(
        install_config={"python": "3.10", "pre_install": ["apt-get install -y libgomp1"],
                        "reqs_path": ["requirements/dev.txt"], "pip_packages": ["pytest==8.3.4"],
                        "install": "pip install -e .", "test_cmd": "pytest -rA --tb=no",
                        "packages": "requirements.txt"},
        meta={"has_test_patch": True, "llm_score": {"difficulty_score": 1}},
        docker_image="swerebench/sweb.eval.x86_64.oemof_1776_tespy-653")
    result = load_instances(write_jsonl(tmp_path / "rebench.jsonl", [record]))
    (instance,) = result.instances
    assert result.format == "swe-rebench" and instance.source == "swe-rebench"
    assert instance.env == EnvSpec(python="3.10", pre_install=("apt-get install -y libgomp1",),
                                   reqs_path=("requirements/dev.txt",),
                                   pip_packages=("pytest==8.3.4",), install="pip install -e .",
                                   test_cmd="pytest -rA --tb=no")
    assert instance.image == "swerebench/sweb.eval.x86_64.oemof_1776_tespy-653"
    meta = instance.meta()
    assert meta["has_test_patch"] is True and meta["llm_score"] == {"difficulty_score": 1}
    assert meta["install_config"] == {"packages": "requirements.txt"}  # kept, not dropped


def test_swe_rebench_sparse_install_config_keeps_defaults(tmp_path):
    config = json.dumps({"python": "3.9", "install": "pip install ."})  # some exports encode it
    record = swe_bench_record(install_config=config)
    (instance,) = load_instances(write_jsonl(tmp_path / "r.jsonl", [record])).instances
    assert instance.env.python == "3.9"
    assert instance.env.test_cmd == DEFAULT_TEST_CMD and instance.env.pip_packages == ()


def test_swe_gym_is_swe_bench_with_its_own_source(tmp_path):
    path = write_jsonl(tmp_path / "gym.jsonl", [swe_bench_record(
        instance_id="getmoto__moto-5752", repo="getmoto/moto")])
    assert load_instances(path).instances[0].source == "swe-bench"
    gym = load_instances(path, format="swe-gym")
    assert gym.format == "swe-gym" and gym.instances[0].source == "swe-gym"
    assert gym.instances[0].fail_to_pass == (
        "tests/test_tools/test_helpers.py::test_convert_kelvin",)


def test_a_json_list_with_encoded_test_lists_loads(tmp_path):
    record = swe_bench_record(FAIL_TO_PASS='["t::a", "t::b"]', PASS_TO_PASS="[]",
                              difficulty="15 min - 1 hour", split="train")
    path = tmp_path / "verified.json"
    path.write_text(json.dumps([record]))
    (instance,) = load_instances(path).instances
    assert instance.fail_to_pass == ("t::a", "t::b") and instance.pass_to_pass == ()
    assert (instance.difficulty, instance.split) == ("medium", "train")


def test_internal_rows_keep_every_field(tmp_path):
    original = Instance(
        instance_id="demo__calc-1", repo="demo/calc", base_commit="main",
        problem_statement="add() subtracts", patch=PATCH, test_patch=TEST_PATCH,
        fail_to_pass=("tests/test_calc.py::test_add",), pass_to_pass=(),
        env=EnvSpec(python="3.11", pip_packages=("pytest",), origin="swebench",
                    build_error="no spec"), source="builtin", split="train",
        difficulty="easy", log_parser="pytest", meta_json='{"family": "arith"}')
    path = write_jsonl(tmp_path / "internal.jsonl", [original.to_row()])
    assert detect_format([original.to_row()]) == "internal"
    assert load_instances(path).instances == [original]


def test_detect_format_from_columns():
    assert detect_format([swe_bench_record()]) == "swe-bench"
    assert detect_format([swe_bench_record(install_config={})]) == "swe-rebench"
    assert detect_format([{"instance_id": "x", "image_name": "i", "patch": ""}]) == "swe-smith"


# --------------------------------------------------------------------------- SWE-smith


CALC = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"

# Hand-written, as SWE-smith stores it: applying it *introduces* the bug in add().
BUG = "\n".join([
    "diff --git a/src/calc.py b/src/calc.py",
    "index 5e1c3a2..9b7d0f4 100644",
    "--- a/src/calc.py",
    "+++ b/src/calc.py",
    "@@ -1,5 +1,5 @@",
    " def add(a, b):",
    "-    return a + b",
    "+    return a - b",
    " ",
    " ",
    " def sub(a, b):",
    "",
])

# The same diff reversed by hand: the gold fix.
FIX = "\n".join([
    "diff --git a/src/calc.py b/src/calc.py",
    "index 9b7d0f4..5e1c3a2 100644",
    "--- a/src/calc.py",
    "+++ b/src/calc.py",
    "@@ -1,5 +1,5 @@",
    " def add(a, b):",
    "-    return a - b",
    "+    return a + b",
    " ",
    " ",
    " def sub(a, b):",
    "",
])


def smith_record(**changes) -> dict:
    record = {
        "instance_id": "demo__calc.5e1c3a2f.func_pm_op_swap__k3j2x9q1",
        "repo": "swesmith/demo__calc.5e1c3a2f", "patch": BUG,
        "FAIL_TO_PASS": ["tests/test_calc.py::test_add"],
        "PASS_TO_PASS": ["tests/test_calc.py::test_sub"],
        "image_name": "jyangballin/swesmith.x86_64.demo_1776_calc.5e1c3a2f",
        "problem_statement": "add(2, 2) returns 0 instead of 4",
    }
    record.update(changes)
    return record


def git(repo: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=repo, input=stdin, text=True,
                          capture_output=True, check=True)


def test_swe_smith_gold_patch_is_the_reversed_bug(tmp_path):
    (instance,) = load_instances(write_jsonl(tmp_path / "smith.jsonl", [smith_record()])).instances
    assert instance.source == "swe-smith"
    assert instance.patch == FIX
    assert instance.base_commit == instance.instance_id  # the SWE-smith task branch
    assert instance.image == "jyangballin/swesmith.x86_64.demo_1776_calc.5e1c3a2f"
    assert instance.meta()["bug_patch"] == BUG
    assert instance.meta()["upstream_commit"] == "5e1c3a2f"
    assert instance.test_patch == ""


def test_swe_smith_patches_apply_with_git(tmp_path):
    """Bug then fix, through real `git apply`, gives the clean file back."""
    (instance,) = load_instances(write_jsonl(tmp_path / "smith.jsonl", [smith_record()])).instances
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / "src" / "calc.py").write_text(CALC)
    git(repo, "init", "-q")
    git(repo, "apply", "-", stdin=instance.meta()["bug_patch"])
    assert "return a - b\n\n\ndef sub" in (repo / "src" / "calc.py").read_text()
    git(repo, "apply", "-", stdin=instance.patch)
    assert (repo / "src" / "calc.py").read_text() == CALC


# --------------------------------------------------------------------------- reverse_patch


def test_reverse_new_file_becomes_deletion():
    new = "\n".join(["diff --git a/notes.txt b/notes.txt", "new file mode 100644",
                     "index 0000000..3b18e51", "--- /dev/null", "+++ b/notes.txt",
                     "@@ -0,0 +1,2 @@", "+hello", "+world", ""])
    gone = "\n".join(["diff --git a/notes.txt b/notes.txt", "deleted file mode 100644",
                      "index 3b18e51..0000000", "--- a/notes.txt", "+++ /dev/null",
                      "@@ -1,2 +0,0 @@", "-hello", "-world", ""])
    assert reverse_patch(new) == gone
    assert reverse_patch(gone) == new


def test_reverse_puts_removals_first_in_each_changed_run():
    # -a +b -c +d  reversed swaps signs (+a -b +c -d) then orders removals first: -b -d +a +c
    diff = "\n".join(["--- a/f", "+++ b/f", "@@ -1,3 +1,3 @@", "-a", "+b", "-c", "+d", " e"])
    assert reverse_patch(diff) == "\n".join(
        ["--- a/f", "+++ b/f", "@@ -1,3 +1,3 @@", "-b", "-d", "+a", "+c", " e"])


def test_reverse_keeps_no_newline_markers_with_their_line():
    diff = "\n".join(["--- a/f", "+++ b/f", "@@ -1 +1 @@", "-old", "\\ No newline at end of file",
                      "+new", "\\ No newline at end of file", ""])
    assert reverse_patch(diff) == "\n".join(
        ["--- a/f", "+++ b/f", "@@ -1 +1 @@", "-new", "\\ No newline at end of file",
         "+old", "\\ No newline at end of file", ""])


def test_reverse_rename_and_mode_change():
    diff = "\n".join(["diff --git a/a.py b/b.py", "old mode 100644", "new mode 100755",
                      "similarity index 100%", "rename from a.py", "rename to b.py", ""])
    assert reverse_patch(diff) == "\n".join(
        ["diff --git a/b.py b/a.py", "old mode 100755", "new mode 100644",
         "similarity index 100%", "rename from b.py", "rename to a.py", ""])


def test_reverse_reads_hunk_lines_by_count_not_by_look():
    """A removed SQL comment '-- x' looks like a '--- ' header; the hunk counts say otherwise."""
    # body: removed "-- x", added "++ y"; reversed: removed "++ y", added "-- x"
    diff = "\n".join(["--- a/q.sql", "+++ b/q.sql", "@@ -1 +1 @@", "--- x", "+++ y", ""])
    assert reverse_patch(diff) == "\n".join(
        ["--- a/q.sql", "+++ b/q.sql", "@@ -1 +1 @@", "-++ y", "+-- x", ""])


def test_reverse_refuses_binary_patches():
    with pytest.raises(ValueError, match="binary"):
        reverse_patch("diff --git a/x.png b/x.png\nGIT binary patch\nliteral 4\n")


def test_reverse_refuses_a_truncated_hunk():
    with pytest.raises(ValueError, match="hunk ends early"):
        reverse_patch("--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n")


# --------------------------------------------------------------------------- Parquet and builtin


def write_parquet(path: Path, records: list[dict]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq
    pq.write_table(pa.Table.from_pylist(records), path)
    return path


def test_parquet_with_list_columns_and_struct_install_config(tmp_path):
    """Hub Parquet stores test lists as list<string> and install_config as a struct whose
    missing keys read back as nulls."""
    records = [swe_bench_record(instance_id="oemof__tespy-653", install_config={
                   "python": "3.11", "install": "pip install -e .", "test_cmd": "pytest -rA",
                   "pip_packages": ["pytest"], "pre_install": None, "reqs_path": None}),
               swe_bench_record(instance_id="oemof__tespy-654", install_config={
                   "python": "3.9", "install": None, "test_cmd": None,
                   "pip_packages": None, "pre_install": ["apt-get update"], "reqs_path": None})]
    result = load_instances(write_parquet(tmp_path / "rebench.parquet", records))
    first, second = result.instances
    assert result.format == "swe-rebench"
    assert first.env.pip_packages == ("pytest",) and first.env.test_cmd == "pytest -rA"
    assert second.env.install == "" and second.env.test_cmd == DEFAULT_TEST_CMD
    assert second.env.pre_install == ("apt-get update",)


def test_swe_smith_parquet_is_detected(tmp_path):
    result = load_instances(write_parquet(tmp_path / "smith.parquet", [smith_record()]))
    assert result.format == "swe-smith" and result.instances[0].patch == FIX


def test_builtin_suite_loads_through_the_same_checks():
    builtin = pytest.importorskip("swe_rlvr.builtin", reason="the built-in suite is not installed")
    try:
        expected = builtin.load_builtin()
    except FileNotFoundError as exc:
        pytest.skip(f"built-in suite not generated: {exc}")
    result = load_instances("builtin")
    assert result.skipped == [] and result.instances == expected
    assert {i.source for i in result.instances} == {"builtin"}


def test_paths_go_through_fsspec():
    """An fsspec URL (here the in-memory filesystem, standing in for s3://) works both ways."""
    import fsspec
    with fsspec.open("memory://swe-rlvr-test/in.jsonl", "w") as handle:
        handle.write(json.dumps(swe_bench_record()) + "\n")
    (instance,) = load_instances("memory://swe-rlvr-test/in.jsonl").instances
    write_instances("memory://swe-rlvr-test/instances.parquet", [instance])
    assert read_instances("memory://swe-rlvr-test/instances.parquet") == [instance]
    fsspec.filesystem("memory").rm("/swe-rlvr-test", recursive=True)
