"""Grading on a small real instance: SWE-bench semantics, failing closed.

Each test builds the `acme/calc` repository of `test_sandbox_support` (add() subtracts; the test
patch adds `test_add`) and grades a patch through the real local backend and a real pytest run.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from sandbox.grade_report import summary
from sandbox.grading import grade, grade_many
from swe_rlvr.artifacts import VALIDATIONS, table
from test_sandbox_support import BUGGY, diff_of, make_instance, sandbox_config, store  # noqa: F401


@pytest.fixture
def setup(store, tmp_path):
    return make_instance(store), sandbox_config(tmp_path), store


def test_gold_resolves_and_empty_does_not(setup):
    inst, cfg, store = setup
    gold, empty = grade_many([(inst, inst.patch, "e/gold"), (inst, "", "e/empty")], cfg, store,
                             workers=2, progress=False)
    assert gold.resolved and gold.resolution == "FULL" and gold.apply_method == "git-apply"
    assert gold.f2p_passed == inst.fail_to_pass and gold.p2p_failed == ()
    assert not empty.resolved and not empty.patch_exists and empty.f2p_failed == inst.fail_to_pass
    assert not gold.infra_failure and not empty.infra_failure
    assert table("validations", [gold.to_row(), empty.to_row()]).schema.names == VALIDATIONS.names
    assert gold.to_row()["episode_id"] == "e/gold"


def test_report_json_matches_swebench(setup):
    inst, cfg, store = setup
    entry = grade(inst, inst.patch, cfg, store).to_swebench()[inst.instance_id]
    assert entry["resolved"] and entry["patch_successfully_applied"] and not entry["patch_is_None"]
    assert entry["tests_status"]["FAIL_TO_PASS"] == {"success": list(inst.fail_to_pass), "failure": []}
    assert set(entry["tests_status"]) == {"FAIL_TO_PASS", "PASS_TO_PASS", "FAIL_TO_FAIL", "PASS_TO_FAIL"}


def test_skipped_fail_to_pass_test_fails(setup):
    """`-rA` reports a skip as "SKIPPED [1] path:line: reason", with no test id, so SWE-bench's
    parser finds no status for the FAIL_TO_PASS test, and a missing test fails. (Where a log does
    name a skipped F2P test, the skipped_f2p guard fails it: tests/test_grading_logparse.py.)"""
    inst, cfg, store = setup
    inst = replace(inst, test_patch=diff_of(store / "acme__calc", {"tests/test_core.py": (
        (store / "acme__calc/tests/test_core.py").read_text()
        + "\n\nimport pytest\n\n\n@pytest.mark.skip\ndef test_add():\n    assert False\n")}))
    report = grade(inst, inst.patch, replace(cfg, gold_check=False), store)  # gold itself fails here
    assert not report.resolved and report.f2p_failed == inst.fail_to_pass
    assert not report.reference_resolved and not report.infra_failure


def test_missing_test_fails(setup):
    inst, cfg, store = setup
    inst = replace(inst, fail_to_pass=inst.fail_to_pass + ("tests/test_core.py::test_not_there",))
    report = grade(inst, inst.patch, replace(cfg, gold_check=False), store)
    assert not report.resolved and report.resolution == "PARTIAL"
    checked = grade(inst, inst.patch, cfg, store)   # gold cannot resolve this: no fair grade here
    assert checked.infra_failure and "gold patch does not resolve it (it fails 1 tests: " \
        "tests/test_core.py::test_not_there)" in checked.infra_reason
    assert report.f2p_failed == ("tests/test_core.py::test_not_there",)


def test_patch_that_does_not_apply(setup):
    inst, cfg, store = setup
    broken = inst.patch.replace("calc/core.py", "calc/absent.py")
    report = grade(inst, broken, cfg, store)
    assert not report.patch_applied and not report.resolved and not report.infra_failure
    assert "failed to apply" in report.log


def test_fuzzy_patch_falls_back(setup):
    """A patch whose context is off by a few lines still applies, and the method is recorded."""
    inst, cfg, store = setup
    shifted = inst.patch.replace("@@ -1,6 +1,6 @@", "@@ -3,6 +3,6 @@")
    report = grade(inst, shifted, cfg, store)
    assert report.patch_applied and report.apply_method in ("git-apply", "3way", "patch-fuzz")


def test_missing_repository_is_an_infrastructure_failure(setup):
    inst, cfg, store = setup
    report = grade(replace(inst, repo="acme/gone"), inst.patch, cfg, store)
    assert report.infra_failure and "acme__gone" in report.infra_reason and not report.resolved


def test_a_missing_interpreter_is_an_infrastructure_failure_not_unresolved(setup):
    """The test command's interpreter is not there (exit 127): the suite never ran, with the gold
    patch or without one. That is "no sample" with its reason, never a reward of 0."""
    inst, cfg, store = setup
    inst = replace(inst, env=replace(inst.env, test_cmd="python2.1 -m pytest -rA -p no:cacheprovider"))
    for patch in ("", inst.patch):
        report = grade(inst, patch, cfg, store)
        assert report.infra_failure and not report.resolved, patch
        assert "exit 127: the test command was not found" in report.infra_reason
        assert "python2.1" in report.infra_reason


def test_a_patch_that_hangs_the_tests_fails_rather_than_escaping_as_no_sample(setup):
    """A patch whose code sleeps forever must not be dropped as an infrastructure failure
    ("no sample"): that would let a policy dodge its 0 reward by hanging the test run. As in
    SWE-bench, the timed-out run is graded on its log, and the unfinished tests fail."""
    inst, cfg, store = setup
    slow = diff_of(store / "acme__calc", {"calc/core.py": BUGGY.replace(
        "return a - b", "import time; time.sleep(60); return a + b")})
    report = grade(inst, slow, replace(cfg, test_timeout_s=3), store)
    assert not report.infra_failure and not report.resolved
    assert any("timed out" in note for note in report.notes)
    assert "timed out" in report.to_row()["log_excerpt"]


def test_summary_counts(setup):
    inst, cfg, store = setup
    reports = grade_many([(inst, inst.patch), (inst, "")], cfg, store, workers=2, progress=False)
    result = summary(reports)
    assert result["resolved_instances"] == 1 and result["empty_patch_instances"] == 1
    assert result["total_instances"] == 2 and result["error_instances"] == 0
