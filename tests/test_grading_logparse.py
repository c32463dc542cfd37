"""Log parsers and the fail-closed cross-checks, on hand-written logs shaped like SWE-bench's."""

from __future__ import annotations

from sandbox.grading import check_exit_code, cross_check_junit
from sandbox.logparse import junit_key, junit_statuses, parse_log

PYTEST_RA = """\
============================= test session starts ==============================
collected 5 items

tests/test_a.py ..F.x                                                    [100%]

=================================== FAILURES ===================================
___________________________________ test_bad ___________________________________
E       assert 1 == 2
=========================== short test summary info ============================
PASSED tests/test_a.py::test_one
PASSED tests/test_a.py::TestK::test_two[1-2]
PASSED tests/test_a.py::test_space[a b]
XFAIL tests/test_a.py::test_known - reason: flaky
SKIPPED [1] tests/test_a.py:40: no network
FAILED tests/test_a.py::test_bad - assert 1 == 2
==================== 1 failed, 3 passed, 1 xfailed in 0.12s ====================
"""


def test_pytest_short_summary():
    got = parse_log(PYTEST_RA, "pytest")
    assert got["tests/test_a.py::test_one"] == "PASSED"
    assert got["tests/test_a.py::TestK::test_two[1-2]"] == "PASSED"
    assert got["tests/test_a.py::test_known"] == "XFAIL"
    assert got["tests/test_a.py::test_bad"] == "FAILED"
    # ids with spaces: the full id and SWE-bench's first-token spelling are both recorded
    assert got["tests/test_a.py::test_space[a b]"] == "PASSED"
    assert got["tests/test_a.py::test_space[a"] == "PASSED"
    assert not any(k.startswith("[") for k in got)   # "SKIPPED [1] path:line" names no test


def test_pytest_verbose_lines_and_colour():
    log = ("tests/t.py::test_a PASSED                                   [ 50%]\n"
           "\x1b[32mtests/t.py::test_b FAILED\x1b[0m                     [100%]\n"
           "tests/t.py::test_c XPASS                                   [100%]\n")
    got = parse_log(log, "pytest")
    assert got == {"tests/t.py::test_a": "PASSED", "tests/t.py::test_b": "FAILED",
                   "tests/t.py::test_c": "FAILED"}


def test_worst_status_wins():
    """PASSED in the call and ERROR in teardown: SWE-bench keeps the last line; we keep ERROR."""
    log = "PASSED tests/t.py::test_a\nERROR tests/t.py::test_a - teardown boom\nPASSED tests/t.py::test_a\n"
    assert parse_log(log, "pytest") == {"tests/t.py::test_a": "ERROR"}


def test_markers_limit_the_parsed_section():
    log = ("PASSED tests/t.py::test_fake\n>>>>> Start Test Output\nFAILED tests/t.py::test_a\n"
           ">>>>> End Test Output\nPASSED tests/t.py::test_after\n")
    assert parse_log(log, "pytest") == {"tests/t.py::test_a": "FAILED"}


def test_django_parser():
    log = ("test_ok (admin.tests.T) ... ok\n"
           "test_doc (admin.tests.T)\nDocstring here. ... ok\n"
           "test_bad (admin.tests.T) ... FAIL\n"
           "test_err (admin.tests.T) ... ERROR\n"
           "test_skip (admin.tests.T) ... skipped 'no db'\n"
           "test_xf (admin.tests.T) ... expected failure\n")
    got = parse_log(log, "django")
    assert got["test_ok (admin.tests.T)"] == "PASSED"
    assert got["test_bad (admin.tests.T)"] == "FAILED" and got["test_err (admin.tests.T)"] == "ERROR"
    assert got["test_skip (admin.tests.T)"] == "SKIPPED" and got["test_xf (admin.tests.T)"] == "XFAIL"


def test_sympy_parser():
    got = parse_log("test_a ok\ntest_b F\ntest_c E\ntest_d f\n", "sympy")
    assert got == {"test_a": "PASSED", "test_b": "FAILED", "test_c": "ERROR", "test_d": "XFAIL"}


def test_exit_code_must_agree_with_the_log():
    """All PASSED but exit code 3 (internal error), or exit 0 with a failure: nothing passes."""
    ok = {"t.py::a": "PASSED", "t.py::b": "PASSED"}
    assert check_exit_code(ok, 0) == (ok, [])
    statuses, notes = check_exit_code(ok, 3)
    assert set(statuses.values()) == {"FAILED"} and "contradicts" in notes[0]
    statuses, _ = check_exit_code({"t.py::a": "PASSED", "t.py::b": "FAILED"}, 0)
    assert set(statuses.values()) == {"FAILED"}
    mixed = {"t.py::a": "PASSED", "t.py::b": "FAILED"}
    assert check_exit_code(mixed, 1) == (mixed, [])
    assert check_exit_code({}, 0) == ({}, ["exit code 0 contradicts the log (0 tests, failures=False)"])


JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" tests="3">
<testcase classname="tests.test_a" name="test_one" time="0.001"/>
<testcase classname="tests.test_a.TestK" name="test_two[1-2]" time="0.001"><failure message="x"/></testcase>
<testcase classname="tests.test_a" name="test_known" time="0.001"><skipped type="pytest.xfail" message="x"/></testcase>
</testsuite></testsuites>"""


def test_junit_keys_and_statuses():
    assert junit_key("tests/test_a.py::TestK::test_two[1-2]") == ("tests.test_a.TestK", "test_two[1-2]")
    got = junit_statuses(JUNIT)
    assert got[("tests.test_a", "test_one")] == "PASSED"
    assert got[("tests.test_a.TestK", "test_two[1-2]")] == "FAILED"
    assert got[("tests.test_a", "test_known")] == "XFAIL"


def test_junit_cross_check_catches_forged_lines():
    """A printed "PASSED" line for a test that junit says failed (or never ran) does not count."""
    log_says = {"tests/test_a.py::test_one": "PASSED", "tests/test_a.py::TestK::test_two[1-2]": "PASSED",
                "tests/test_a.py::test_never_ran": "PASSED"}
    statuses, notes = cross_check_junit(log_says, JUNIT)
    assert statuses["tests/test_a.py::test_one"] == "PASSED"
    assert statuses["tests/test_a.py::TestK::test_two[1-2]"] == "FAILED"
    assert statuses["tests/test_a.py::test_never_ran"] == "FAILED"
    assert "junit disagrees on 2" in notes[0]
    statuses, notes = cross_check_junit(log_says, "<not xml")
    assert set(statuses.values()) == {"FAILED"} and "no readable junit" in notes[0]
