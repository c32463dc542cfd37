"""What a test log says beyond SWE-bench's per-test statuses: the evidence the grader's guards use.

Per-test statuses come from SWE-bench's own parsers (`sandbox.reference`). This module reads two
other things, each only from where pytest itself writes results, never from captured output:
- `summary_section`: the `-rA` short test summary, the block after pytest's last
  "short test summary info" header. Captured stdout/stderr of tests (pytester's inner runs print
  `FAILED x.py::t` lines, a logger prints `ERROR    app:app.py:1441 ...`) comes before it in the
  PASSES/FAILURES sections, so nothing a test prints is read as a result here;
- `junit_statuses`: pytest's `--junitxml` report, written to a file outside the working copy.
  `junit_key` maps a test id to the (classname, name) pair under which pytest writes it there,
  following pytest's `mangle_test_address`.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Callable

PASSED, FAILED, SKIPPED, ERROR, XFAIL = "PASSED", "FAILED", "SKIPPED", "ERROR", "XFAIL"
OK = (PASSED, XFAIL)
"""Statuses that count as passing, in SWE-bench's sense."""
JunitIndex = dict[tuple[str, str], list[str]]
"""Junit statuses by (classname, name) key (`junit_index`)."""

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_SUMMARY_HEADER = re.compile(r"^=+ short test summary info =+$")
_FINAL_LINE = re.compile(r"^=+ .*\b(passed|failed|error|errors|skipped|xfailed|xpassed|deselected|"
                         r"no tests ran)\b.* in [\d.]+s.* =+$")


def summary_section(log: str) -> list[str] | None:
    """The lines of pytest's last short test summary (ANSI colours removed), None without one."""
    lines = [_ANSI.sub("", line).rstrip() for line in log.splitlines()]
    starts = [i for i, line in enumerate(lines) if _SUMMARY_HEADER.match(line)]
    if not starts:
        return None
    out = []
    for line in lines[starts[-1] + 1:]:
        if _FINAL_LINE.match(line):
            break
        out.append(line)
    return out


def reported_failures(log: str) -> int | None:
    """FAILED / ERROR results in the short test summary (XPASS(strict) is reported as FAILED);
    None when the log has no summary section to read."""
    section = summary_section(log)
    if section is None:
        return None
    return sum(1 for line in section if line.split(" ", 1)[0] in (FAILED, ERROR))


# --------------------------------------------------------------------------- junit


def junit_key(node_id: str) -> tuple[str, str]:
    """pytest node id -> (classname, name) as pytest's junitxml writes it.

    "tests/test_a.py::TestX::test_y[1::2]" -> ("tests.test_a.TestX", "test_y[1::2]"): the
    parameters (after the first "[") are kept whole, as pytest's `mangle_test_address` does."""
    path, bracket, params = node_id.partition("[")
    names = path.split("::")
    names[0] = re.sub(r"\.py$", "", names[0].replace("/", "."))
    names[-1] += bracket + params
    return ".".join(names[:-1]), names[-1]


def junit_statuses(xml_text: str) -> list[tuple[str, str, str]]:
    """(classname, name, status) of every testcase of a junit XML report, in report order."""
    root = ET.fromstring(xml_text)
    return [(case.get("classname", ""), case.get("name", ""), _junit_status(case))
            for case in root.iter("testcase")]


def junit_index(xml_text: str, parse: Callable[[str], dict[str, str]]) -> JunitIndex:
    """Junit statuses keyed the way SWE-bench's parser `parse` would key the same test.

    Each testcase's name goes through the parser on a synthetic "PASSED x::<name>" line, so an id
    that SWE-bench cuts at its first space (`test_x[a b]` -> `test_x[a`) or whose path-like option it
    rewrites (pydicom) lands under the same key as the dataset's id. One key may stand for several
    tests (every parametrisation sharing a prefix); all their statuses are kept."""
    index: JunitIndex = {}
    for classname, name, status in junit_statuses(xml_text):
        keys = list(parse(f"PASSED x::{name}"))
        short = keys[0][len("x::"):] if len(keys) == 1 and keys[0].startswith("x::") else name
        index.setdefault((classname, short), []).append(status)
    return index


def _junit_status(case: ET.Element) -> str:
    tags = {child.tag for child in case}
    if "error" in tags:
        return ERROR
    if "failure" in tags:
        return FAILED
    if "skipped" in tags:
        skipped = case.find("skipped")
        xfail = skipped is not None and skipped.get("type") == "pytest.xfail"
        return XFAIL if xfail else SKIPPED
    return PASSED
