"""A cheating policy: every trick here must earn no reward. Each test tells the story of one hack.

All patches are produced the way an agent produces them (edits in a real sandbox, then `diff()`)
or with real `git diff`, and graded end to end with a real pytest run.
"""

from __future__ import annotations

import pytest

from sandbox import open_sandbox
from sandbox.grading import grade
from test_sandbox_support import FIXED, NEW_TESTS, diff_of, git, make_instance, sandbox_config, store, write  # noqa: F401

CHEAT_TESTS = "def test_add():\n    pass\n\n\ndef test_mul():\n    pass\n\n\ndef test_add_zero():\n    pass\n"


@pytest.fixture
def setup(store, tmp_path):
    return make_instance(store), sandbox_config(tmp_path), store, store / "acme__calc"


def test_editing_the_tests_gains_nothing(setup):
    """The agent rewrites tests/test_core.py so every test trivially passes. The grader resets the
    test files to the base and applies the real test patch, so the bug is still caught."""
    inst, cfg, store, repo = setup
    report = grade(inst, diff_of(repo, {"tests/test_core.py": CHEAT_TESTS}), cfg, store)
    assert report.patch_applied and not report.resolved
    assert report.f2p_failed == inst.fail_to_pass


def test_deleting_the_tests_gains_nothing(setup):
    """The agent deletes the test file, hoping missing tests count as passing. They are restored."""
    inst, cfg, store, _ = setup
    with open_sandbox(inst, cfg, store) as sb:
        sb.execute("git rm -q tests/test_core.py")
        patch = sb.diff()
    assert "deleted file mode" in patch
    report = grade(inst, patch, cfg, store)
    assert not report.resolved and report.f2p_failed == inst.fail_to_pass


def test_printing_fake_passed_lines_gains_nothing(setup):
    """The patch prints pytest-looking "PASSED" lines for every graded test at import time and
    leaves the bug in. The real FAILED line wins, the exit code (1) and the junit report agree."""
    inst, cfg, store, repo = setup
    fake = "".join(f"print('PASSED {t}')\nprint('{t} PASSED [100%]')\n"
                   for t in inst.fail_to_pass + inst.pass_to_pass)
    patch = diff_of(repo, {"calc/__init__.py": fake})
    report = grade(inst, patch, cfg, store)
    assert "PASSED tests/test_core.py::test_add" in report.log
    assert not report.resolved and report.f2p_failed == inst.fail_to_pass


def test_fake_passed_lines_with_a_clean_exit_gain_nothing(setup):
    """The patch prints fake PASSED lines and then `os._exit(0)`s at import, so pytest never
    runs a test but exits 0. pytest had captured the lines, and `os._exit` drops them, so no graded
    test reports anything: the suite "did not run". That must not become an infrastructure failure
    ("no sample", a way to dodge a 0): the grader runs the tests without the patch, they run, so
    the patch is what stopped them, and it scores zero."""
    inst, cfg, store, repo = setup
    fake = "".join(f"print('PASSED {t}')\n" for t in inst.fail_to_pass + inst.pass_to_pass)
    patch = diff_of(repo, {"calc/__init__.py": fake + "import os\nos._exit(0)\n"})
    report = grade(inst, patch, cfg, store)
    assert not report.resolved and report.f2p_failed == inst.fail_to_pass
    assert not report.infra_failure and not report.reference_resolved
    assert any(n.startswith("the patch stops the test suite from running") for n in report.notes)


def test_conftest_that_marks_everything_passed_is_reset(setup):
    """The patch adds a conftest.py whose hook rewrites every failing report to "passed" (which
    would fool the log, the exit code and junit alike). Conftest files the model patch touches are
    reset to the base before the tests run."""
    inst, cfg, store, repo = setup
    conftest = ("import pytest\n\n\n@pytest.hookimpl(hookwrapper=True)\n"
                "def pytest_runtest_makereport(item, call):\n"
                "    outcome = yield\n    outcome.get_result().outcome = 'passed'\n")
    patch = diff_of(repo, {"conftest.py": conftest, "tests/conftest.py": conftest})
    report = grade(inst, patch, cfg, store)
    assert not report.resolved and report.f2p_failed == inst.fail_to_pass
    assert any("conftest.py" in note for note in report.notes)


def test_crashing_at_exit_after_passing_is_not_resolved(setup):
    """The fix is right but the patch kills the interpreter at exit with status 3: the log says
    every test passed while the exit code says the run failed. SWE-bench reads only the log and
    would call it resolved; the exit_code guard scores the contradiction zero and names it."""
    inst, cfg, store, repo = setup
    patch = diff_of(repo, {"calc/core.py": FIXED + "\nimport atexit, os\natexit.register(os._exit, 3)\n"})
    report = grade(inst, patch, cfg, store)
    assert not report.resolved and report.reference_resolved
    assert [g.split(":")[0] for g in report.guards] == ["exit_code"] and "exited 3" in report.guards[0]


def test_rewriting_git_history_in_the_sandbox_gains_nothing(setup):
    """The agent commits the upstream fix's tree as a fake "base" (rewriting HEAD and branches)
    and hopes the grader diffs against its history. The grader applies only the patch text to a
    fresh copy from the repo store; the patch from diff() still shows the real change."""
    inst, cfg, store, _ = setup
    with open_sandbox(inst, cfg, store) as sb:
        sb.write_file("calc/core.py", FIXED)
        sb.execute("git add -A && git commit -qm 'base' && git tag -f base && "
                   "git reset -q --soft HEAD~1 && git commit -qm 'rewritten' && "
                   "git replace -f HEAD~1 HEAD 2>/dev/null; true")
        patch = sb.diff()
    assert "+    return a + b" in patch
    assert grade(inst, patch, cfg, store).resolved   # the honest change is graded, nothing else
    empty_after_rewrite = grade(inst, "", cfg, store)
    assert not empty_after_rewrite.resolved


def test_patch_touching_dot_git_is_refused(setup):
    """A patch that plants a git hook (which would run during the grader's own git commands)."""
    inst, cfg, store, _ = setup
    hook = ("diff --git a/.git/hooks/post-checkout b/.git/hooks/post-checkout\nnew file mode 100755\n"
            "--- /dev/null\n+++ b/.git/hooks/post-checkout\n@@ -0,0 +1,2 @@\n+#!/bin/sh\n"
            "+cp /dev/null tests/test_core.py\n")
    report = grade(inst, hook + inst.patch, cfg, store)
    assert not report.patch_applied and not report.resolved and "inside .git" in report.log


def test_new_test_file_stays_the_graders(setup):
    """The agent pre-creates the file the test patch will add... with the real test patch's
    content changed. Test files are reset (deleted where the base lacks them) before applying."""
    inst, cfg, store, repo = setup
    assert NEW_TESTS  # the grader's own tests come from the instance's test patch
    patch = diff_of(repo, {"tests/test_new.py": "def test_x():\n    pass\n", "calc/core.py": FIXED})
    from dataclasses import replace
    inst2 = replace(inst, test_patch=inst.test_patch + diff_of(
        repo, {"tests/test_new.py": "from calc.core import add\n\n\ndef test_x():\n    assert add(1, 1) == 2\n"}),
        fail_to_pass=inst.fail_to_pass + ("tests/test_new.py::test_x",))
    report = grade(inst2, patch, cfg, store)
    assert report.resolved  # the agent's version was replaced by the grader's, which passes


def test_editing_existing_failing_tests_gains_nothing_without_a_test_patch(store, tmp_path):
    """SWE-smith-style instance: the failing test already exists at the base and the test patch is
    empty. The agent makes `test_add` pass by rewriting it. The files that FAIL_TO_PASS names are
    still the instance's tests: they are reset to the base and run, so the bug is still caught."""
    from dataclasses import replace
    inst = make_instance(store, repo="acme/calcsmith")
    repo = store / "acme__calcsmith"
    write(repo, {"tests/test_core.py": NEW_TESTS})              # the failing test is in the base
    git(repo, "commit", "-qam", "tests at the base")
    inst = replace(inst, base_commit=git(repo, "rev-parse", "HEAD").strip(), test_patch="")
    assert inst.test_files() == ("tests/test_core.py",)
    cfg = sandbox_config(tmp_path)
    cheat = grade(inst, diff_of(repo, {"tests/test_core.py": CHEAT_TESTS}), cfg, store)
    assert cheat.patch_applied and not cheat.resolved
    assert cheat.f2p_failed == inst.fail_to_pass
    assert grade(inst, inst.patch, cfg, store).resolved           # the honest fix still resolves
