"""A sandbox backend that replays a recorded test run, so hand-made logs go through `grade()` whole.

Every command succeeds with no output except reading a file (`cat`, which finds none: so the
grader plants no canary tests, and no XFAIL is expected) and the test run, which prints the log
given for the current state ("gold" once the instance's gold patch was applied, when a "gold" run is given;
"patched" once any other patch was; else "base"), then the grader's separator
and the junit report, and exits with the recorded code. Register it with `replay(monkeypatch, ...)`
and grade with `sandbox.backend=replay`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sandbox.base import ExecResult


@dataclass(frozen=True)
class Recorded:
    log: str
    exit_code: int = 0
    junit: str | None = None
    """The junit XML pytest wrote; None when it wrote none."""


class ReplaySandbox:
    runs: dict[str, Recorded] = {}
    workdir = "/testbed"

    def __init__(self, instance, cfg, repo_store):
        self.instance, self.state, self.patch = instance, "base", ""

    def execute(self, cmd: str, timeout: float | None = None) -> ExecResult:
        if "swe-rlvr-model.patch" in cmd:
            gold = self.patch.strip() == self.instance.patch.strip() and "gold" in self.runs
            self.state = "gold" if gold else "patched"
        if cmd.startswith("cat -- "):
            return ExecResult(1, "", False, False, 0.0)
        if "--junitxml" not in cmd and "pytest" not in cmd:
            return ExecResult(0, "", False, False, 0.0)
        run = self.runs[self.state]
        token = re.search(r"echo ([0-9a-f]{32})", cmd)
        out = run.log
        if token:
            out += f"\n{token.group(1)}\n" + (run.junit or "")
        return ExecResult(run.exit_code, out, False, False, 0.0)

    def write_file(self, path: str, content: str) -> None:
        if path.endswith("swe-rlvr-model.patch"):
            self.patch = content

    def read_file(self, path: str) -> str:
        return ""

    def diff(self) -> str:
        return ""

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass


def replay(monkeypatch, **runs: Recorded) -> None:
    """Make `sandbox.backend=replay` replay `runs` ("base", "patched", "gold")."""
    import sandbox
    monkeypatch.setitem(sandbox.BACKENDS, "replay", "grading_replay:ReplaySandbox")
    monkeypatch.setattr(ReplaySandbox, "runs", dict(runs))


def junit_xml(*cases: tuple[str, str, str]) -> str:
    """A junit report of (classname, name, status) cases, as pytest writes them."""
    body = {"PASSED": "", "FAILED": '<failure message="x"/>', "ERROR": '<error message="x"/>',
            "SKIPPED": '<skipped message="x"/>'}
    from xml.sax.saxutils import quoteattr
    rows = "".join(f"<testcase classname={quoteattr(c)} name={quoteattr(n)} time=\"0.01\">{body[s]}</testcase>"
                   for c, n, s in cases)
    return f'<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">{rows}</testsuite></testsuites>'
