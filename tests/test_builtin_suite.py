"""The built-in instance suite: its shape, its grading semantics, and its reproducibility.

Each instance is checked the way the grader will use it: materialise the project, check out the
base commit in a fresh clone, apply the test patch, run pytest on the touched test files (exactly
FAIL_TO_PASS fails, PASS_TO_PASS passes), then apply the gold patch (everything listed passes).
That runs on every hand-written instance and a sample of the generated ones (`builtin_sample`);
the records themselves are checked for all. The tier balance is a property of the hand-written
instances: the generated ones are one-line bugs by design, in the `easy` tier (the first four
projects' first generation) or the `generated` tier (tests/test_builtin_mutations.py).
"""

from __future__ import annotations

import dataclasses
import re
import threading
from pathlib import Path

import pytest

from builtin_support import builtin_sample
from swe_rlvr.builtin import load_builtin, materialize, store
from swe_rlvr.builtin.build import build_instances, tier_of
from swe_rlvr.builtin.mutants import generate_instances
from swe_rlvr.builtin.mutations import FIRST_PROJECTS
from swe_rlvr.builtin.outcomes import passed, run_pytest
from swe_rlvr.builtin.repository import git
from swe_rlvr.instances import DEFAULT_TEST_CMD

INSTANCES = load_builtin()
HANDWRITTEN = load_builtin(kind="handwritten")
TIERS = ("easy", "medium", "hard")
RANK = {"easy": 1, "medium": 2, "hard": 3}


@pytest.fixture
def repo_store(builtin_repo_store) -> Path:
    return builtin_repo_store


def test_counts_projects_and_splits():
    projects = {i.repo for i in HANDWRITTEN}
    assert len(HANDWRITTEN) >= 24
    assert len(projects) >= 4
    assert all(sum(i.repo == p for i in HANDWRITTEN) >= 6 for p in projects)
    assert {i.split for i in HANDWRITTEN} == {"train", "test"}
    test_share = sum(i.split == "test" for i in HANDWRITTEN) / len(HANDWRITTEN)
    assert 0.25 <= test_share <= 0.4  # about a third
    assert projects == {f"swe-rlvr/{p}" for p in FIRST_PROJECTS} < {i.repo for i in INSTANCES}
    assert {i.split for i in INSTANCES} == {"train", "dev", "test"}   # dev: generated only
    assert INSTANCES[:len(HANDWRITTEN)] == HANDWRITTEN       # hand-written first, then generated
    assert {i.meta()["kind"] for i in INSTANCES[len(HANDWRITTEN):]} <= {"mutation"}


def test_tiers_are_balanced_and_in_both_splits():
    for tier in TIERS:
        assert sum(i.difficulty == tier for i in HANDWRITTEN) >= len(HANDWRITTEN) / 4
    for split in ("train", "test"):
        assert {i.difficulty for i in load_builtin(split, kind="handwritten")} == set(TIERS)
        assert {i.difficulty for i in load_builtin(split)} == {*TIERS, "generated"}


def test_test_split_is_not_easier_than_train():
    """Among the hand-written instances; the generated ones are all easy in both splits."""
    def mean_rank(split: str) -> float:
        ranks = [RANK[i.difficulty] for i in load_builtin(split, kind="handwritten")]
        return sum(ranks) / len(ranks)
    assert mean_rank("test") >= mean_rank("train")


def test_records_follow_the_builtin_conventions():
    for inst in INSTANCES:
        project = inst.repo.split("/")[1]
        number = {"easy": r"m\d{3}", "generated": r"g\d{3}"}[inst.difficulty] \
            if inst.meta()["kind"] == "mutation" else r"\d+"
        assert re.fullmatch(rf"swe-rlvr__{project}-{number}", inst.instance_id)
        assert inst.meta()["project"] == project
        assert inst.source == "builtin" and inst.log_parser == "pytest"
        assert inst.env.python == "3.11" and inst.env.pip_packages == ("pytest",)
        assert inst.env.test_cmd == DEFAULT_TEST_CMD
        assert inst.fail_to_pass and not set(inst.fail_to_pass) & set(inst.pass_to_pass)
        assert all(t.startswith(inst.test_files()) for t in inst.fail_to_pass + inst.pass_to_pass)
        assert all(" " not in t for t in inst.fail_to_pass + inst.pass_to_pass)


def test_patches_split_source_from_tests_and_match_the_tier():
    for inst in INSTANCES:
        assert inst.patch.startswith("diff --git a/")
        assert not any(f.startswith("tests/") for f in inst.fix_files()), inst.instance_id
        assert all(f.startswith("tests/") for f in inst.test_files()), inst.instance_id
        shape = "easy" if inst.difficulty == "generated" else inst.difficulty   # one line
        assert tier_of(inst.patch) == shape, inst.instance_id


def test_problem_statements_do_not_contain_the_fix():
    for inst in INSTANCES:
        added = [ln[1:].strip() for ln in inst.patch.splitlines()
                 if ln.startswith("+") and not ln.startswith("+++")]
        leaks = [ln for ln in added if len(ln) >= 12 and ln in inst.problem_statement]
        assert not leaks, f"{inst.instance_id} states its fix: {leaks}"


def test_load_builtin_rejects_unknown_split_and_kind():
    with pytest.raises(ValueError, match="choose one of"):
        load_builtin("validation")
    with pytest.raises(ValueError, match="choose one of: handwritten, mutation"):
        load_builtin(kind="generated")


@pytest.mark.e2e
@pytest.mark.parametrize("instance", builtin_sample(), ids=lambda i: i.instance_id)
def test_instance_fails_then_passes_with_gold_patch(instance, repo_store, tmp_path):
    """SWE-bench semantics on the touched test files: F2P fail and P2P pass before, all pass after."""
    work = tmp_path / "work"
    git(tmp_path, "clone", "-q", "--no-checkout", str(materialize(instance.repo, repo_store)), str(work))
    git(work, "checkout", "-q", instance.base_commit)
    if instance.test_patch:
        git(work, "apply", "-", stdin=instance.test_patch)
    listed = set(instance.fail_to_pass) | set(instance.pass_to_pass)
    before = run_pytest(work, instance.test_files())
    assert set(before) == listed
    assert passed(before) == set(instance.pass_to_pass)
    git(work, "apply", "-", stdin=instance.patch)
    after = run_pytest(work, instance.test_files())
    assert set(after) == listed and passed(after) == listed


def test_jsonl_is_in_sync_with_specs():
    """Rebuilding without running tests reproduces every hand-written record except the derived
    test lists, which the per-instance test above checks against real pytest runs. (The generated
    records are checked against the enumeration in tests/test_builtin_mutations.py.)"""
    def strip(inst):
        return dataclasses.replace(inst, fail_to_pass=(), pass_to_pass=())
    assert [strip(i) for i in build_instances(run_tests=False)] == [strip(i) for i in HANDWRITTEN]


@pytest.mark.slow
def test_full_rebuild_is_identical(request):
    """The whole build, pytest derivation included, reproduces instances.jsonl exactly."""
    if "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("re-runs every instance's tests and every candidate mutant's (several "
                    "minutes); opt in with -m slow")
    assert build_instances() + generate_instances() == INSTANCES


def test_materialize_is_deterministic_and_idempotent(tmp_path):
    repo = INSTANCES[0].repo
    first = materialize(repo, tmp_path / "a")
    second = materialize(repo, tmp_path / "b")
    refs = [git(path, "for-each-ref", "--format=%(objectname) %(refname)") for path in (first, second)]
    assert refs[0] == refs[1]
    assert first.name == repo.replace("/", "__")
    head = (first / ".git" / "HEAD").stat().st_mtime_ns
    assert materialize(repo, tmp_path / "a") == first
    assert (first / ".git" / "HEAD").stat().st_mtime_ns == head  # not rebuilt


def test_materialize_under_concurrent_callers(tmp_path):
    repo = INSTANCES[-1].repo
    results: list[Path] = []
    threads = [threading.Thread(target=lambda: results.append(materialize(repo, tmp_path)))
               for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 3 and len(set(results)) == 1
    assert [p.name for p in tmp_path.iterdir() if p.is_dir()] == [results[0].name]


def test_materialize_refuses_a_stale_record(tmp_path):
    inst = INSTANCES[0]
    stale = dataclasses.replace(inst, base_commit="0" * 40)
    with pytest.raises(store.MaterializeError, match="python -m swe_rlvr.builtin.build"):
        store.materialize(inst.repo, tmp_path, [stale])


def test_materialize_rejects_unknown_repo(tmp_path):
    with pytest.raises(store.MaterializeError, match="choose one of"):
        materialize("psf/requests", tmp_path)
