"""The grade report: what grading one patch found, as a VALIDATIONS row and an entry of SWE-bench's
report.json, and the run summary over many reports (`sandbox.grading` says how each field is
decided)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

EXCERPT_CHARS = 4000


class InfraFailure(Exception):
    """The harness, not the patch, failed; the message is the report's `infra_reason`."""


@dataclass(frozen=True)
class GradeReport:
    instance_id: str
    episode_id: str = ""
    patch_exists: bool = False
    patch_applied: bool = False
    apply_method: str = ""
    tests_status: dict = field(default_factory=dict)
    f2p_passed: tuple[str, ...] = ()
    f2p_failed: tuple[str, ...] = ()
    p2p_passed: tuple[str, ...] = ()
    p2p_failed: tuple[str, ...] = ()
    resolution: str = "NO"
    resolved: bool = False
    reference_resolved: bool = False
    """What SWE-bench's parser and resolution logic alone say about the same log."""
    guards: tuple[str, ...] = ()
    """"<guard>: <what it saw>" for every guard that failed a test SWE-bench let pass."""
    tampered: bool = False
    """A canary test had the wrong outcome: the patch changed how the tests run. Never resolved."""
    tamper_reason: str = ""
    infra_failure: bool = False
    infra_reason: str = ""
    log: str = ""
    canaries: tuple[str, ...] = ()
    """The tests the grader planted in this run, the canaries (`sandbox.canaries`) and the hidden
    variant tests (`sandbox.variants`): never shown in `log_excerpt`."""
    notes: tuple[str, ...] = ()
    duration_s: float = 0.0

    def to_row(self) -> dict:
        """One `validations.parquet` row (exactly the VALIDATIONS columns)."""
        lines = [f"[grader] {n}\n" for n in self.notes] + [f"[guard] {g}\n" for g in self.guards]
        return {"episode_id": self.episode_id, "instance_id": self.instance_id,
                "patch_applied": self.patch_applied, "apply_method": self.apply_method,
                "tests_status_json": json.dumps(self.tests_status, sort_keys=True),
                "f2p_passed": list(self.f2p_passed), "f2p_failed": list(self.f2p_failed),
                "p2p_passed": list(self.p2p_passed), "p2p_failed": list(self.p2p_failed),
                "resolution": self.resolution, "resolved": self.resolved,
                "reference_resolved": self.reference_resolved, "guards": list(self.guards),
                "tampered": self.tampered, "tamper_reason": self.tamper_reason,
                "infra_failure": self.infra_failure, "infra_reason": self.infra_reason,
                "log_excerpt": excerpt(hide_canaries("".join(lines) + self.log, self.canaries)),
                "duration_s": self.duration_s}

    def to_swebench(self) -> dict:
        """The entry of SWE-bench's per-instance report.json."""
        lists = lambda ok, bad: {"success": list(ok), "failure": list(bad)}  # noqa: E731
        return {self.instance_id: {
            "patch_is_None": not self.patch_exists, "patch_exists": self.patch_exists,
            "patch_successfully_applied": self.patch_applied, "resolved": self.resolved,
            "tests_status": {"FAIL_TO_PASS": lists(self.f2p_passed, self.f2p_failed),
                             "PASS_TO_PASS": lists(self.p2p_passed, self.p2p_failed),
                             "FAIL_TO_FAIL": lists((), ()), "PASS_TO_FAIL": lists((), ())}}}


_SECTION = re.compile(r"^_{3,} (.*?) _{3,}\s*$")


def hide_canaries(log: str, test_ids: tuple[str, ...]) -> str:
    """`log` without the lines that name a canary and without a canary's failure section, so the
    excerpt that guidance shows the policy does not teach it what the canaries look like. (pytest's
    progress characters and totals still count them.)"""
    names = {t.rsplit("::", 1)[-1] for t in test_ids}
    if not names:
        return log
    out, hiding = [], False
    for line in log.splitlines(keepends=True):
        header = _SECTION.match(line)
        if header or line.startswith("==="):
            hiding = header is not None and any(n in header.group(1) for n in names)
        if not hiding and not any(n in line for n in names):
            out.append(line)
    return "".join(out)


def excerpt(log: str, limit: int = EXCERPT_CHARS) -> str:
    """Head and tail of a log (the summary of a pytest run is at its end)."""
    if len(log) <= limit:
        return log
    return log[: limit // 4] + "\n[... log truncated ...]\n" + log[-(3 * limit) // 4:]


def summary(reports: list[GradeReport], submitted: int | None = None) -> dict:
    """A run summary shaped like SWE-bench's `<model>.<run_id>.json`."""
    ids = lambda pred: sorted(r.instance_id for r in reports if pred(r))  # noqa: E731
    completed = ids(lambda r: not r.infra_failure and r.patch_exists)
    resolved = ids(lambda r: r.resolved)
    return {"total_instances": len(reports),
            "submitted_instances": len(reports) if submitted is None else submitted,
            "completed_instances": len(completed), "resolved_instances": len(resolved),
            "unresolved_instances": len(completed) - len(resolved),
            "empty_patch_instances": len(ids(lambda r: not r.patch_exists)),
            "error_instances": len(ids(lambda r: r.infra_failure)),
            "completed_ids": completed, "resolved_ids": resolved,
            "unresolved_ids": sorted(set(completed) - set(resolved)),
            "empty_patch_ids": ids(lambda r: not r.patch_exists),
            "error_ids": ids(lambda r: r.infra_failure), "schema_version": 2}
