"""Hand-made logs, each the shape of a real one that a grader got wrong, graded through `grade()`.

The `replay` backend (tests/grading_replay.py) hands the grader a recorded test run instead of
running one, so each log goes through the whole path: SWE-bench's parser, the guards, "did the
tests run?" and the control run. The pure pieces (summary section, junit keys) are tested by hand.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from grading_replay import Recorded, junit_xml, replay
from sandbox.grading import grade
from sandbox.logparse import junit_index, junit_key, reported_failures, summary_section
from sandbox.reference import parser
from sandbox.suite_run import SuiteRun
from sandbox.verdict import judge
from swe_rlvr.config import SandboxConfig
from swe_rlvr.instances import Instance

CFG = SandboxConfig(backend="replay", gold_check=False, runtime_guard=False)
"""A replayed run has no pytest process for the runtime guard to load into (test_runtime_guard.py
runs it for real)."""
PATCH = ("diff --git a/pkg/core.py b/pkg/core.py\n--- a/pkg/core.py\n+++ b/pkg/core.py\n"
         "@@ -1 +1 @@\n-x = 1\n+x = 2\n")


def instance(f2p, p2p=(), repo="acme/fmt", **kw) -> Instance:
    return Instance(instance_id=f"{repo.replace('/', '__')}-1", repo=repo, base_commit="0" * 40,
                    problem_statement="bug", patch=PATCH, test_patch="", fail_to_pass=tuple(f2p),
                    pass_to_pass=tuple(p2p), **kw)


def pytest_log(*summary: str, body: str = "", final: str = "2 passed in 0.05s") -> str:
    return ("============================= test session starts ==============================\n"
            "collected 2 items\n\ntests/test_fmt.py ..                                  [100%]\n\n"
            + body + "=========================== short test summary info ============================\n"
            + "".join(line + "\n" for line in summary) + f"============================== {final} ===============================\n")


# --------------------------------------------------------------------------- the four bugs


def test_an_id_cut_at_its_first_space_passes_when_its_tests_pass(monkeypatch):
    """SWE-bench stores `test_fmt[a b]` as `test_fmt[a`, which stands for every parametrisation
    that shares the prefix. The junit report knows only full names; it must be keyed the same way,
    or the cross-check forces a passing test to FAILED."""
    log = pytest_log("PASSED tests/test_fmt.py::test_one", "PASSED tests/test_fmt.py::test_fmt[a b]",
                     "PASSED tests/test_fmt.py::test_fmt[a c]", final="3 passed in 0.05s")
    junit = junit_xml(("tests.test_fmt", "test_one", "PASSED"), ("tests.test_fmt", "test_fmt[a b]", "PASSED"),
                      ("tests.test_fmt", "test_fmt[a c]", "PASSED"))
    replay(monkeypatch, patched=Recorded(log, 0, junit))
    report = grade(instance(["tests/test_fmt.py::test_fmt[a"], ["tests/test_fmt.py::test_one"]), PATCH, CFG, "")
    assert report.resolved and report.reference_resolved and report.guards == ()


def test_captured_error_and_failed_lines_are_not_results(monkeypatch):
    """A fix whose tests log `ERROR    flask_test:app.py:1441 ...`, or run an inner pytest that
    prints `FAILED x.py::t`, passes: captured output (the PASSES section) is not the summary."""
    body = ("==================================== PASSES ====================================\n"
            "______________________________ test_error_logged _______________________________\n"
            "------------------------------ Captured log call -------------------------------\n"
            "ERROR    flask_test:app.py:1441 Exception on /fail [GET]\n"
            "________________________________ test_inner_run ________________________________\n"
            "----------------------------- Captured stdout call -----------------------------\n"
            "=========================== short test summary info ============================\n"
            "FAILED test_assertion_rewrite.py::test_this - assert 0\n"
            "ERROR: file or directory not found: asd\n"
            "========================= 1 failed, 1 error in 0.01s ==========================\n")
    log = pytest_log("PASSED tests/test_app.py::test_error_logged", "PASSED tests/test_app.py::test_inner_run",
                     body=body)
    junit = junit_xml(("tests.test_app", "test_error_logged", "PASSED"), ("tests.test_app", "test_inner_run", "PASSED"))
    replay(monkeypatch, patched=Recorded(log, 0, junit))
    report = grade(instance(["tests/test_app.py::test_error_logged"], ["tests/test_app.py::test_inner_run"]),
                   PATCH, CFG, "")
    assert report.resolved and report.guards == ()
    assert report.tests_status["flask_test:app.py:1441"] == "ERROR"  # SWE-bench's own key, unlisted


def test_exit_127_is_an_infrastructure_failure_not_a_zero(monkeypatch):
    """No interpreter: nothing ran, with or without the patch. No sample, never reward 0."""
    replay(monkeypatch, base=Recorded("bash: line 1: pytest: command not found\n", 127),
           patched=Recorded("bash: line 1: pytest: command not found\n", 127))
    for patch in ("", PATCH):
        report = grade(instance(["tests/test_app.py::test_a"]), patch, CFG, "")
        assert report.infra_failure and not report.resolved, patch
        assert "exit 127: the test command was not found" in report.infra_reason
        assert "command not found" in report.infra_reason
    assert "even without the model patch" in report.infra_reason


def test_an_empty_collection_did_not_run(monkeypatch):
    """pytest collected nothing (exit 5): the suite did not run. Without a patch that is an
    infrastructure failure; when the suite runs without the patch, the patch emptied it: zero."""
    empty = ("============================= test session starts ==============================\n"
             "collected 0 items\n\n============================ no tests ran in 0.01s =============================\n")
    replay(monkeypatch, base=Recorded(empty, 5), patched=Recorded(empty, 5))
    inst = replace(instance(["tests/test_app.py::test_a"]), instance_id="empty-both")
    report = grade(inst, "", CFG, "")
    assert report.infra_failure and "exit 5: no tests collected" in report.infra_reason
    base = pytest_log("FAILED tests/test_app.py::test_a - assert 1 == 2", final="1 failed in 0.01s")
    replay(monkeypatch, base=Recorded(base, 1, junit_xml(("tests.test_app", "test_a", "FAILED"))),
           patched=Recorded(empty, 5))
    report = grade(replace(inst, instance_id="empty-patched"), PATCH, CFG, "")
    assert not report.infra_failure and not report.resolved
    assert report.notes[-1].startswith("the patch stops the test suite from running (exit 5")


# --------------------------------------------------------------------------- the guards


def test_a_collection_error_from_the_patch_scores_zero(monkeypatch):
    crash = ("collected 0 items / 1 error\n\n==================================== ERRORS ====================================\n"
             "E   SyntaxError: invalid syntax\n"
             "=========================== short test summary info ============================\n"
             "ERROR tests/test_app.py\n!!!!!!!!!!!!!!!!!!!! Interrupted: 1 error during collection !!!!!!!!!!!!!!!!!!!!\n"
             "=============================== 1 error in 0.12s ===============================\n")
    ok = pytest_log("PASSED tests/test_app.py::test_a", final="1 passed in 0.01s")
    replay(monkeypatch, base=Recorded(ok, 0, junit_xml(("tests.test_app", "test_a", "PASSED"))),
           patched=Recorded(crash, 2, junit_xml(("", "tests.test_app", "ERROR"))))
    report = grade(replace(instance(["tests/test_app.py::test_a"]), instance_id="crash"), PATCH, CFG, "")
    assert not report.infra_failure and not report.resolved and not report.reference_resolved
    assert "exit 2: interrupted" in report.notes[-1]


def test_a_forged_log_is_failed_by_junit_and_named(monkeypatch):
    """The log claims a pass that the junit report does not have: SWE-bench alone would call it
    resolved, the junit guard does not, and the report names the guard and the test."""
    log = pytest_log("PASSED tests/test_app.py::test_a", "PASSED tests/test_app.py::test_b")
    replay(monkeypatch, patched=Recorded(log, 0, junit_xml(("tests.test_app", "test_a", "FAILED"),
                                                           ("tests.test_app", "test_b", "PASSED"))))
    report = grade(instance(["tests/test_app.py::test_a"], ["tests/test_app.py::test_b"]), PATCH, CFG, "")
    assert report.reference_resolved and not report.resolved
    assert report.guards == ("junit: the log says passed, the junit report does not (1 tests: tests/test_app.py::test_a)",)
    assert report.f2p_failed == ("tests/test_app.py::test_a",) and report.p2p_passed == ("tests/test_app.py::test_b",)
    assert "[guard] junit:" in report.to_row()["log_excerpt"] and report.to_row()["guards"] == list(report.guards)


def test_exit_code_that_contradicts_the_summary_fails_and_is_named(monkeypatch):
    log = pytest_log("PASSED tests/test_app.py::test_a", final="1 passed in 0.01s")
    replay(monkeypatch, patched=Recorded(log, 1, junit_xml(("tests.test_app", "test_a", "PASSED"))))
    report = grade(instance(["tests/test_app.py::test_a"]), PATCH, CFG, "")
    assert report.reference_resolved and not report.resolved
    assert report.guards[0].startswith("exit_code: pytest exited 1 but its summary reports 0 failures")


def test_a_skipped_pass_to_pass_is_maintained_and_a_skipped_fail_to_pass_is_not():
    """SWE-bench (4.x and 5.x) counts a skipped test in neither list. For PASS_TO_PASS that is
    kept (pylint's needs_two_cores tests skip on one core); a skipped FAIL_TO_PASS test shows no
    fix, and the skipped_f2p guard fails it."""
    log = ("test_fix (app.tests.T) ... skipped 'no db'\ntest_keep (app.tests.T) ... skipped 'no db'\n"
           "test_ok (app.tests.T) ... ok\n")
    inst = instance(["test_fix (app.tests.T)"], ["test_keep (app.tests.T)", "test_ok (app.tests.T)"],
                    repo="django/django", log_parser="django")
    verdict = judge(inst, SuiteRun(log=log, exit_code=0), junit=False)
    assert verdict.reference["test_keep (app.tests.T)"] == "SKIPPED"
    assert verdict.statuses["test_keep (app.tests.T)"] == "SKIPPED"
    assert verdict.statuses["test_fix (app.tests.T)"] == "FAILED"
    assert verdict.guards[0].startswith("skipped_f2p: a FAIL_TO_PASS test skipped")


def test_a_zero_is_only_given_where_the_gold_patch_resolves(monkeypatch):
    """An unresolved patch is checked against the instance's gold patch (once per instance): if
    gold does not resolve in this environment either, no patch can be graded fairly, and the
    report is an infrastructure failure that names what gold fails, not a 0."""
    failing = pytest_log("FAILED tests/test_app.py::test_a - assert 1 == 2", final="1 failed in 0.01s")
    passing = pytest_log("PASSED tests/test_app.py::test_a", final="1 passed in 0.01s")
    cfg = replace(CFG, gold_check=True)
    replay(monkeypatch, patched=Recorded(failing, 1, junit_xml(("tests.test_app", "test_a", "FAILED"))),
           gold=Recorded(passing, 0, junit_xml(("tests.test_app", "test_a", "PASSED"))))
    inst = instance(["tests/test_app.py::test_a"])
    wrong = PATCH.replace("+x = 2", "+x = 3")
    report = grade(replace(inst, instance_id="gold-ok"), wrong, cfg, "")
    assert not report.resolved and not report.infra_failure
    fails = Recorded(failing, 1, junit_xml(("tests.test_app", "test_a", "FAILED")))
    replay(monkeypatch, base=fails, patched=fails, gold=fails)
    for iid, patch in (("gold-broken", wrong), ("gold-broken", PATCH), ("gold-broken", "")):
        report = grade(replace(inst, instance_id=iid), patch, cfg, "")
        assert report.infra_failure and "gold patch does not resolve it (it fails 1 tests: tests/test_app.py::test_a)" \
            in report.infra_reason, patch


# --------------------------------------------------------------------------- pure pieces


def test_summary_section_is_the_last_one():
    inner = "=========================== short test summary info ============================\nFAILED x.py::t\n"
    log = pytest_log("PASSED a.py::t", body=inner + "=============== 1 failed in 0.1s ===============\n")
    assert summary_section(log) == ["PASSED a.py::t"]
    assert reported_failures(log) == 0
    assert reported_failures(pytest_log("FAILED a.py::t - x", "ERROR a.py::u - y")) == 2
    assert reported_failures("no summary here\n") is None


@pytest.mark.parametrize("node, key", [
    ("tests/test_a.py::TestX::test_y[1-2]", ("tests.test_a.TestX", "test_y[1-2]")),
    ("tests/test_a.py::test_y[a::b/c.d]", ("tests.test_a", "test_y[a::b/c.d]")),
    ("tests/test_a.py::test_y[a", ("tests.test_a", "test_y[a")),
    ("tests/test_a.py", ("", "tests.test_a")),
])
def test_junit_key_follows_pytests_mangling(node, key):
    assert junit_key(node) == key


def test_junit_index_keys_names_as_swebench_parsers_do():
    xml = junit_xml(("t.test_v", "test_valid[a b]", "PASSED"), ("t.test_v", "test_valid[a c]", "FAILED"),
                    ("t.test_v", "test_path[/data/test_files/CT_small.dcm]", "PASSED"))
    plain = junit_index(xml, parser("parse_log_pytest"))
    assert plain[("t.test_v", "test_valid[a")] == ["PASSED", "FAILED"]
    options = junit_index(xml, parser("parse_log_pytest_options"))
    assert options[("t.test_v", "test_path[/CT_small.dcm]")] == ["PASSED"]   # pydicom's rewrite
