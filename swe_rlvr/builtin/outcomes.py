"""Per-test outcomes of a plain pytest run, for deriving and checking FAIL_TO_PASS/PASS_TO_PASS.

The run mirrors the instances' `test_cmd` (`python -m pytest -rA -p no:cacheprovider <files>`)
and reads pytest's `-rA` short summary. Simplifications: plugin autoloading is off (the projects
need none, and it keeps each run well under a second); only PASSED/FAILED/ERROR/XFAIL/XPASS lines
are read, and a test that does not appear at all counts as failed, as the grader counts it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

_STATUSES = ("PASSED", "FAILED", "ERROR", "XFAIL", "XPASS")


def run_pytest(cwd: Path, files: list[str] | tuple[str, ...], timeout: float = 120) -> dict[str, str]:
    """Run pytest on `files` inside `cwd`; return {node id: status}."""
    return parse_summary(pytest_log(cwd, files, timeout=timeout))


def pytest_log(cwd: Path, files: list[str] | tuple[str, ...], options: tuple[str, ...] = (),
               timeout: float = 120, hash_seed: str | None = None) -> str:
    """pytest's stdout for `files` (all of `testpaths` when empty) with extra `options`.

    `hash_seed` pins PYTHONHASHSEED, so set orders in assertion messages repeat run to run.
    Raises `subprocess.TimeoutExpired` (the child killed) when the run exceeds `timeout`.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(PYTHONDONTWRITEBYTECODE="1", PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    if hash_seed is not None:
        env["PYTHONHASHSEED"] = hash_seed
    cmd = [sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", "-q", *options, *files]
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    return proc.stdout


def parse_summary(log: str) -> dict[str, str]:
    """`PASSED tests/a.py::t` / `FAILED tests/a.py::u - msg` lines -> {node id: status}."""
    statuses: dict[str, str] = {}
    for line in log.splitlines():
        status, _, rest = line.partition(" ")
        if status in _STATUSES and "::" in rest:
            node_id = rest.split(" - ")[0].strip()
            statuses.setdefault(node_id, status)
    return statuses


def passed(statuses: dict[str, str]) -> set[str]:
    """Ids that count as passing (XFAIL is an expected failure, so it passes)."""
    return {t for t, s in statuses.items() if s in ("PASSED", "XFAIL")}
