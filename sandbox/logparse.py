"""Test-log parsers: a test log -> {test id: status}, following SWE-bench's parsers.

Parsers are picked by `Instance.log_parser` from `PARSERS` ("pytest", "django", "sympy"; the loader
maps SWE-bench's `parse_log_*` names onto these families). Statuses are SWE-bench's: PASSED,
FAILED, SKIPPED, ERROR, XFAIL.

Differences from SWE-bench, all failing closed:
- when a test is reported more than once (e.g. PASSED in the call and ERROR in teardown, or a
  verbose line and a summary line), the worst status wins instead of the last line read;
- a summary line whose test id contains spaces records the full id as well as SWE-bench's first
  whitespace-separated token, so both spellings of a dataset's test list match.

`junit_statuses` reads pytest's `--junitxml` report, and `junit_key` maps a pytest node id to the
(classname, name) pair under which pytest writes it there; grading cross-checks the two.

Simplification: the django and sympy parsers cover the common line shapes of SWE-bench's, not every
per-version special case.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

PASSED, FAILED, SKIPPED, ERROR, XFAIL = "PASSED", "FAILED", "SKIPPED", "ERROR", "XFAIL"
STATUSES = (PASSED, FAILED, SKIPPED, ERROR, XFAIL)
SEVERITY = {PASSED: 0, XFAIL: 0, SKIPPED: 1, FAILED: 2, ERROR: 2}
OK = (PASSED, XFAIL)
START_MARK, END_MARK = ">>>>> Start Test Output", ">>>>> End Test Output"

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_VERBOSE = re.compile(r"^(\S+::\S.*?)\s+(PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)(?:\s+\[\s*\d+%\])?\s*$")


def record(statuses: dict[str, str], test: str, status: str) -> None:
    """Set `test`'s status unless a worse one is already recorded."""
    old = statuses.get(test)
    if old is None or SEVERITY[status] > SEVERITY[old]:
        statuses[test] = status


def test_section(log: str) -> str:
    """The part between SWE-bench's start/end markers when present, else the whole log."""
    start, end = log.find(START_MARK), log.rfind(END_MARK)
    if start != -1 and end > start:
        return log[start + len(START_MARK):end]
    return log


def parse_pytest(log: str) -> dict[str, str]:
    """`-rA` short-summary lines ("PASSED a.py::t", "FAILED a.py::t - msg") and verbose lines
    ("a.py::t PASSED [ 50%]"). XPASS counts as FAILED (a strict xfail that passed)."""
    statuses: dict[str, str] = {}
    for raw in test_section(log).splitlines():
        line = _ANSI.sub("", raw).strip()
        verbose = _VERBOSE.match(line)
        if verbose:
            record(statuses, verbose.group(1), _normal(verbose.group(2)))
            continue
        word, _, rest = line.partition(" ")
        if word in STATUSES + ("XPASS",) and rest.strip():
            _summary_line(statuses, _normal(word), rest.strip())
    return statuses


def _normal(word: str) -> str:
    return FAILED if word == "XPASS" else word


def _summary_line(statuses: dict[str, str], status: str, rest: str) -> None:
    if status in (SKIPPED, XFAIL) and rest.startswith("["):
        return  # "SKIPPED [1] a.py:3: reason" names no test id
    full = rest.split(" - ", 1)[0].strip()
    record(statuses, full, status)
    token = rest.split()[0]
    if token != full:
        record(statuses, token, status)


_DJANGO = re.compile(r"^(\w+ \([\w.]+\))(?: \S.*)? \.\.\. ?(.*)$")


def parse_django(log: str) -> dict[str, str]:
    """Django's runner: "test_x (module.Class) ... ok|FAIL|ERROR|skipped '...'|expected failure"."""
    statuses: dict[str, str] = {}
    for line in test_section(log).splitlines():
        match = _DJANGO.match(line.strip())
        if not match:
            continue
        test, outcome = match.group(1), match.group(2).strip()
        if outcome.endswith("ok") or outcome == "OK":
            record(statuses, test, PASSED)
        elif outcome.startswith("skipped"):
            record(statuses, test, SKIPPED)
        elif outcome.startswith("expected failure"):
            record(statuses, test, XFAIL)
        elif outcome in ("FAIL", "ERROR"):
            record(statuses, test, FAILED if outcome == "FAIL" else ERROR)
    return statuses


_SYMPY = re.compile(r"^(test_\w+)\s+(ok|F|E|f|s|Ok|Skip.*|X)\s*$")


def parse_sympy(log: str) -> dict[str, str]:
    """SymPy's bin/test: "test_name ok", "test_name F", "test_name E", "test_name f" (xfail)."""
    codes = {"ok": PASSED, "Ok": PASSED, "F": FAILED, "E": ERROR, "f": XFAIL, "s": SKIPPED, "X": FAILED}
    statuses: dict[str, str] = {}
    for line in test_section(log).splitlines():
        match = _SYMPY.match(line.strip())
        if match:
            record(statuses, match.group(1), codes.get(match.group(2), SKIPPED))
    return statuses


PARSERS = {"pytest": parse_pytest, "django": parse_django, "sympy": parse_sympy}


def parse_log(log: str, parser: str) -> dict[str, str]:
    if parser not in PARSERS:
        raise ValueError(f"Unknown log parser {parser!r}; choose one of: {', '.join(PARSERS)}.")
    return PARSERS[parser](log)


# --------------------------------------------------------------------------- junit


def junit_key(node_id: str) -> tuple[str, str]:
    """pytest node id -> (classname, name) as pytest's junitxml writes it.

    "tests/test_a.py::TestX::test_y[1]" -> ("tests.test_a.TestX", "test_y[1]")."""
    parts = node_id.split("::")
    path = parts[0][:-3] if parts[0].endswith(".py") else parts[0]
    classname = ".".join([path.replace("/", ".")] + parts[1:-1])
    return classname, parts[-1] if len(parts) > 1 else ""


def junit_statuses(xml_text: str) -> dict[tuple[str, str], str]:
    """(classname, name) -> status from a junit XML report; worst status per test wins."""
    root = ET.fromstring(xml_text)
    out: dict[tuple[str, str], str] = {}
    for case in root.iter("testcase"):
        key = (case.get("classname", ""), case.get("name", ""))
        status = _junit_status(case)
        if key not in out or SEVERITY[status] > SEVERITY[out[key]]:
            out[key] = status
    return out


def _junit_status(case: ET.Element) -> str:
    tags = {child.tag for child in case}
    if "error" in tags:
        return ERROR
    if "failure" in tags:
        return FAILED
    if "skipped" in tags:
        skipped = case.find("skipped")
        return XFAIL if (skipped.get("type") or "") == "pytest.xfail" else SKIPPED
    return PASSED
