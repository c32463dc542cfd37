"""The junit report out of the jail's files (local backend): pytest writes it to the command's fd 4,
a pipe whose other end only the runner outside the command holds. Nothing of the report is a file
code under test could rewrite; a second document, bytes before or after pytest's, a replaced pipe,
or an open of the pipe from the patch's lines are tampering. The Docker backend writes the report
to a file in the container's private temp dir instead (the runtime guard guards it there).

Each attack rides on the gold fix, so every graded test passes honestly and only this layer can
turn the grade: without it each graded resolved and untampered."""

from __future__ import annotations

import pytest

from hostile_support import appended, env, graded  # noqa: F401 - `env` is a fixture
from sandbox.suite_run import JUNIT_CHANNEL, junit_stream

DOC = '<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest"/></testsuites>'

FORGED_FIRST = f'''
import os as _os
_os.write(4, {DOC!r}.encode())
'''
"""At import, before pytest writes: a document of its own in the pipe."""

WRITTEN_AFTER = '''
import atexit as _atexit, os as _os
_atexit.register(lambda: _os.write(4, b'<testcase classname="tests.test_values" name="x"/>'))
'''
"""After pytest wrote its report: more bytes in the pipe."""

REPLACED = f'''
import atexit as _atexit, os as _os
_SAVED = _os.dup(4)
_os.close(4)
_os.pipe()  # the lowest free descriptors: pytest's report now goes into this pipe
_atexit.register(lambda: _os.write(_SAVED, {DOC!r}.encode()))
'''
"""The pipe swapped for one of the patch's own, so that only a forged report reaches the grader."""

OPENED = '''
def _forge():
    with open("/dev/fd/4", "w") as fh:
        fh.write("")


_forge()
'''
"""The pipe opened by name from a patched line."""


@pytest.fixture
def local(env):  # noqa: F811
    if env[1].backend != "local":
        pytest.skip("the Docker backend has no report pipe: its junit report is a file the runtime guard guards")
    return env


def test_the_stream_must_be_one_document_and_nothing_else():
    assert junit_stream(DOC) == (DOC, "")
    assert junit_stream("\n" + DOC + "\n") == (DOC, "")
    assert junit_stream("") == ("", "")
    assert junit_stream('<?xml version="1.0"?><testsuites><testsu') == ("", "")  # cut short: no report
    assert "2 documents" in junit_stream(DOC + DOC)[1]
    assert "before or after" in junit_stream(DOC + "<testcase/>")[1]
    assert "before or after" in junit_stream("x" + DOC)[1]
    assert JUNIT_CHANNEL == "/dev/fd/4"


@pytest.mark.parametrize("attack, reason", [
    (FORGED_FIRST, "the junit report pipe holds 2 documents"),
    (WRITTEN_AFTER, "bytes beside pytest's junit report"),
    (REPLACED, "runtime guard: channel: the junit report pipe (fd 4) was replaced"),
    (OPENED, "runtime guard: refused: open from a line the patch added"),
], ids=["second-document", "written-after", "pipe-replaced", "opened-by-name"])
def test_what_else_reaches_the_report_pipe_is_tampering(local, attack, reason):
    report = graded(local, {"iniconf/values.py": appended(attack)}, fixed=True)
    assert report.patch_applied and not report.infra_failure, report.infra_reason
    assert report.tampered and not report.resolved, report.tamper_reason
    assert reason in report.tamper_reason


def test_the_gold_fix_alone_reports_through_the_pipe(local):
    report = graded(local, {}, fixed=True)
    assert report.resolved and not report.tampered and not report.guards, (report.tamper_reason, report.guards)
    assert "generated xml file: /dev/fd/4" in report.log
