"""The loaders turn every SWE-bench-family format into the same `Instance`.

The SWE-bench Lite records are real (../shared/data beside the checkout); the SWE-rebench,
SWE-smith, SWE-Gym and internal records are small hand-made ones with real-looking fields.

The hand-made records come from records_support. SWE-smith's own rules (the stored patch is the
bug) are tested in test_swe_smith, and `reverse_patch` on hand-written diffs in
test_reverse_patch.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from records_support import PATCH, TEST_PATCH, swe_bench_record, write_jsonl, write_parquet
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


# --------------------------------------------------------------------------- Parquet and builtin


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
