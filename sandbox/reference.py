"""SWE-bench as the grading reference, used as a library (`swebench==4.1.0`).

Everything that decides what SWE-bench would say about a test log comes from the `swebench`
package, not from a copy of its tables:
- the log parser of the instance's repository (`MAP_REPO_TO_PARSER`, or the record's own
  `log_parser` name, e.g. `parse_log_pydicom`): it cuts a parametrised id at its first space and
  rewrites path-like options exactly as the ids in FAIL_TO_PASS / PASS_TO_PASS were made;
- the per-test report (`get_eval_tests_report`: a test passes with PASSED or XFAIL, fails when it
  is missing or FAILED/ERROR, and a SKIPPED test is in neither list) and the resolution
  (`get_resolution_status`: FULL, PARTIAL or NO).

The grader (`sandbox.grading`) computes this reference verdict first and then lets its own guards
add evidence on top; see there. Importing `swebench` costs about 3 s (it loads its whole harness),
so it happens on first use, once per process.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from types import SimpleNamespace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from swe_rlvr.instances import Instance

FAMILY_PARSERS = {"pytest": "parse_log_pytest", "django": "parse_log_django",
                  "sympy": "parse_log_sympy"}
"""Parsers for instances with no SWE-bench record behind them (the built-in suite), by family."""

RESOLUTION = {"RESOLVED_FULL": "FULL", "RESOLVED_PARTIAL": "PARTIAL", "RESOLVED_NO": "NO"}

LogParser = Callable[[str], dict[str, str]]
"""`log -> {test id: status}`."""
TestsReport = dict[str, dict[str, list[str]]]
"""SWE-bench's per-list report: {"FAIL_TO_PASS": {"success": [...], "failure": [...]}, ...}."""


@functools.lru_cache(maxsize=1)
def _swebench() -> SimpleNamespace:
    from swebench.harness import grading, log_parsers
    from swebench.harness.constants import FAIL_ONLY_REPOS, EvalType
    return SimpleNamespace(grading=grading, log_parsers=log_parsers, fail_only=FAIL_ONLY_REPOS,
                           eval_type=EvalType)


def parser_name(repo: str, log_parser: str, original: str) -> str:
    """The name of SWE-bench's parser for an instance: the record's own (`original`, e.g.
    "parse_log_pydicom") when SWE-bench has it, else the repository's, else the family's."""
    sb = _swebench()
    if original and _find(original) is not None:
        return original
    by_repo = sb.log_parsers.MAP_REPO_TO_PARSER.get(repo)
    if by_repo is not None:
        return by_repo.__name__
    return FAMILY_PARSERS.get(log_parser, "parse_log_pytest")


@functools.lru_cache(maxsize=256)
def _find(name: str) -> Callable[..., dict[str, str]] | None:
    import importlib
    import pkgutil
    package = _swebench().log_parsers
    for module in pkgutil.iter_modules(package.__path__):
        found = getattr(importlib.import_module(f"{package.__name__}.{module.name}"), name, None)
        if callable(found):
            return found
    return None


@functools.lru_cache(maxsize=64)
def parser(name: str) -> LogParser:
    """`log -> {test id: status}` with SWE-bench's parser `name`."""
    found = _require(name)
    return lambda log: found(log, None)  # the Python parsers never read their test_spec


def _require(name: str) -> Callable[..., dict[str, str]]:
    found = _find(name)
    if found is None:
        raise ValueError(f"swebench has no log parser {name!r}; set the record's log_parser to one "
                         f"of swebench.harness.log_parsers (e.g. parse_log_pytest).")
    return found


def instance_parser_name(instance: Instance) -> str:
    """The function name of SWE-bench's parser for `instance` (aliases such as parse_log_astroid
    resolve to the function they name, here parse_log_pytest)."""
    original = json.loads(instance.meta_json or "{}").get("log_parser", "")
    name = parser_name(instance.repo, instance.log_parser, original if isinstance(original, str) else "")
    return _require(name).__name__


def instance_parser(instance: Instance) -> LogParser:
    """SWE-bench's parser for `instance` (see `parser_name`)."""
    return parser(instance_parser_name(instance))


def statuses(instance: Instance, log: str) -> dict[str, str]:
    """The status map SWE-bench reads from the test command's output."""
    return instance_parser(instance)(log)


def tests_report(instance: Instance, status_map: dict[str, str]) -> TestsReport:
    """SWE-bench's per-list report: {"FAIL_TO_PASS": {"success": [...], "failure": [...]}, ...}."""
    sb = _swebench()
    kind = sb.eval_type.FAIL_ONLY if instance.repo in sb.fail_only else sb.eval_type.PASS_AND_FAIL
    gold = {"FAIL_TO_PASS": list(instance.fail_to_pass), "PASS_TO_PASS": list(instance.pass_to_pass)}
    return sb.grading.get_eval_tests_report(status_map, gold, eval_type=kind)


def resolution(report: TestsReport) -> str:
    """FULL, PARTIAL or NO, from SWE-bench's `get_resolution_status`."""
    return RESOLUTION[_swebench().grading.get_resolution_status(report)]


def is_pytest(instance: Instance) -> bool:
    """Whether the instance's log is pytest's (its parser is one of SWE-bench's pytest parsers)."""
    return instance_parser_name(instance).startswith("parse_log_pytest")
