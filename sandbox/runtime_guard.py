"""The host side of the grader's runtime guard (`sandbox.guard_plugin`, whose docstring says what it
refuses and checks): which lines the patch added, the plugin and its spec written into the grading
run's private directory under a random module name, and the records it leaves in the output.

The module name and the records' token are random per run, so code under test can neither shadow
the plugin with a module of the same name nor print records that pass for the guard's. The guard
runs only where the grader runs pytest itself (not an eval script) and not on the repositories
whose code *is* the test machinery (pytest, pluggy): there every line is pytest's.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from swe_rlvr.patches import parse_patch

if TYPE_CHECKING:
    from sandbox.base import Sandbox
    from swe_rlvr.instances import Instance

SOURCE = (Path(__file__).parent / "guard_plugin.py").read_text()
SPEC_ENV = "SWE_RLVR_GUARD_SPEC"
MACHINERY_REPOS = frozenset({"pytest-dev/pytest", "pytest-dev/pluggy"})
"""Repositories whose own code is pytest's: the guard cannot tell their lines from pytest's."""
DIFF = "diff --no-color --no-ext-diff --no-renames -U0 HEAD"


@dataclass(frozen=True)
class Guard:
    """One grading run's guard: the plugin's module name, the records' token and the spec."""

    module: str
    token: str
    added: dict[str, list[list[int]] | str]

    def install(self, folder: str, channel: int | None = None) -> str:
        """Shell lines that write the plugin and its spec into `folder/guard` and export what the
        test command needs (run after `folder` is made, before the test command). `channel`: the
        fd of the junit report pipe, which must stay the one it is (and closed to the patch's code)."""
        spec = json.dumps({"token": self.token, "added": self.added, "channel": channel})
        end = f"SWE_RLVR_EOF_{secrets.token_hex(8)}"
        return "\n".join([
            f'mkdir -p {folder}/guard',
            f"cat > {folder}/guard/{self.module}.py <<'{end}'\n{SOURCE}{end}",
            f"cat > {folder}/guard/spec.json <<'{end}'\n{spec}\n{end}",
            f'export {SPEC_ENV}={folder}/guard/spec.json',
            f'export PYTHONPATH={folder}/guard${{PYTHONPATH:+:$PYTHONPATH}}'])

    def option(self) -> str:
        return f" -p {self.module}"

    def records(self, output: str) -> tuple[str, tuple[dict, ...]]:
        """The log and the guard's records, in order. The log is what pytest printed before the
        guard's `end` record (written as pytest unconfigures, after its last report line): what
        code prints after it (an `atexit` handler's second summary) is not read."""
        kept: list[str] = []
        found: list[dict] = []
        for line in output.split("\n"):
            if not line.startswith(self.token + " "):
                if not any(r.get("kind") == "end" for r in found[-1:]):
                    kept.append(line)
                continue
            try:
                found.append(json.loads(line[len(self.token) + 1:]))
            except ValueError:
                found.append({"kind": "garbled", "detail": line[len(self.token) + 1:][:200]})
        return "\n".join(kept), tuple(found)


def applies(instance: Instance) -> bool:
    return instance.repo not in MACHINERY_REPOS


def new_guard(sb: Sandbox, instance: Instance, model_patch: str, git: str) -> Guard:
    """The guard for a run of `instance` with `model_patch` applied in `sb` (call before the test
    files are reset): the lines it added, as git sees them in the working copy."""
    diff = sb.execute(f"{git} {DIFF} -- '*.py'", timeout=60).output if model_patch.strip() else ""
    new_files = {f.path for f in _sections(model_patch) if f.new_file}
    return Guard(module=f"swe_rlvr_guard_{secrets.token_hex(6)}", token=secrets.token_hex(16),
                 added=added_lines(diff, new_files, set(instance.test_files())))


def added_lines(diff: str, new_files: set[str], skip: set[str]) -> dict[str, list[list[int]] | str]:
    """{path: [[first, last], ...] of added lines, or "*" for a new file} for the Python files of a
    `git diff -U0` (`skip`: the instance's test files, restored before the run)."""
    added: dict[str, list[list[int]] | str] = {p: "*" for p in new_files if p.endswith(".py") and p not in skip}
    for section in _sections(diff):
        if section.deleted or section.path in skip or not section.path.endswith(".py") or section.path in added:
            continue
        ranges = [[h.new_start, h.new_start + h.new_len - 1] for h in section.hunks if h.new_len > 0]
        if ranges:
            added[section.path] = ranges
    return added


def verdict(records: tuple[dict, ...] | None, exit_code: int, timed_out: bool, ran: bool) -> str:
    """Why the guard's records say the run was tampered with ("" if they do not)."""
    if records is None:
        return ""
    found = [r for r in records if r.get("kind") != "end"]
    if found:
        shown = "; ".join(f"{r.get('kind')}: {r.get('detail')}" for r in found[:3])
        return f"runtime guard: {shown}" + (f" (and {len(found) - 3} more)" if len(found) > 3 else "")
    ended = any(r.get("kind") == "end" for r in records)
    if ran and not ended and not timed_out and exit_code in (0, 1):
        return ("runtime guard: pytest ended normally but the guard's end record is missing (its "
                "plugin did not load, or its report channel was closed)")
    return ""


def _sections(patch: str) -> list:
    try:
        return parse_patch(patch)
    except ValueError:
        return []
