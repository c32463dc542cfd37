"""The verdict on one test run (step 4 of `sandbox.grading`, whose docstring says what each guard is
for): SWE-bench's statuses of the log, then this project's guards and the canaries, and the
FAIL_TO_PASS / PASS_TO_PASS lists and resolution they give (`score`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sandbox import reference, runtime_guard
from sandbox.canaries import canary_verdict
from sandbox.grade_report import GradeReport
from sandbox.logparse import FAILED, OK, SKIPPED, XFAIL, JunitIndex, junit_index, junit_key, reported_failures
from sandbox.suite_run import SuiteRun, junit_stream
from sandbox.variants import variant_failures, variant_reason

if TYPE_CHECKING:
    from swe_rlvr.instances import Instance


@dataclass(frozen=True)
class Verdict:
    statuses: dict[str, str]
    """SWE-bench's status map with every guard's failures applied."""
    reference: dict[str, str]
    """SWE-bench's status map of the log, untouched."""
    ran: bool
    """Some FAIL_TO_PASS or PASS_TO_PASS test reported a result."""
    not_run_reason: str = ""
    guards: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    tamper_reason: str = ""
    """What the canaries say is wrong ("" when nothing is)."""
    variants_failed: tuple[str, ...] = ()
    """The hidden variant tests that did not pass (`sandbox.variants`)."""
    variants: tuple[str, ...] = ()
    """The hidden variant tests of the run."""


def judge(instance: Instance, run: SuiteRun, junit: bool) -> Verdict:
    """SWE-bench's statuses of the run's log, then the guards and the canaries (see
    `sandbox.grading`'s docstring). Canaries are read from the log and junit, and left out of every
    status map."""
    parse = reference.instance_parser(instance)
    parsed = parse(run.log)
    ref = {t: s for t, s in parsed.items() if t not in run.canaries and t not in run.variants}
    index: JunitIndex | None = None
    xml, channel = junit_stream(run.junit_xml or "") if run.junit_channel else (run.junit_xml, "")
    if junit and xml:
        try:
            index = junit_index(xml, parse)
        except Exception:  # noqa: BLE001 - an unreadable report is no evidence of a pass
            index = None
    listed = list(dict.fromkeys(instance.fail_to_pass + instance.pass_to_pass))
    ran = any(t in ref for t in listed) or bool(index and any(junit_key(t) in index for t in listed))
    notes: tuple[str, ...] = ("the test run timed out",) if run.timed_out else ()
    if run.script:
        notes += (SCRIPT_NOTE,)
    guarded = runtime_guard.verdict(run.guard, run.exit_code, run.timed_out, ran)
    tamper = "; ".join(reason for reason in (canary_verdict(run, parsed, index), guarded, channel) if reason)
    if not ran:
        return Verdict(statuses=dict(ref), reference=ref, ran=False, not_run_reason=why_not_run(run),
                       notes=notes, tamper_reason=tamper)
    statuses, guards = dict(ref), []
    for name, guard in GUARDS:
        failed, detail = guard(instance, run, statuses, listed, junit, index)
        failed = [t for t in failed if statuses.get(t) in NOT_FAILED]  # guards only add failures
        if failed:
            statuses.update({t: FAILED for t in failed})
            shown = ", ".join(failed[:5]) + (", ..." if len(failed) > 5 else "")
            guards.append(f"{name}: {detail} ({len(failed)} tests: {shown})")
    return Verdict(statuses=statuses, reference=ref, ran=True, guards=tuple(guards), notes=notes,
                   tamper_reason=tamper, variants=run.variants,
                   variants_failed=variant_failures(run.variants, parsed, index if junit else None))


def _junit_guard(instance: Instance, run: SuiteRun, statuses: dict[str, str], listed: list[str], junit: bool,
                 index: JunitIndex | None) -> tuple[list[str], str]:
    if not junit:
        return [], ""
    passing = [t for t in listed if statuses.get(t) in OK]
    if index is None:
        return passing, "no readable junit report, though the log reports results"
    bad = [t for t in passing if not any(s in OK for s in index.get(junit_key(t), ()))]
    return bad, "the log says passed, the junit report does not"


def _exit_code_guard(instance: Instance, run: SuiteRun, statuses: dict[str, str], listed: list[str], junit: bool,
                     index: JunitIndex | None) -> tuple[list[str], str]:
    if run.script or not reference.is_pytest(instance):
        return [], ""
    passing = [t for t in listed if statuses.get(t) in OK]
    if run.timed_out:
        return passing, f"the test run timed out (exit {run.exit_code}); its results are incomplete"
    if run.exit_code not in (0, 1):
        meaning = EXIT_MEANING.get(run.exit_code, "killed or crashed")
        return passing, f"pytest exited {run.exit_code} ({meaning}) after reporting results"
    failures = reported_failures(run.log)
    if failures is None and index is not None:
        failures = sum(s not in OK and s != SKIPPED for statuses_ in index.values() for s in statuses_)
    if failures is None or (run.exit_code == 0) == (failures == 0):
        return [], ""
    return passing, f"pytest exited {run.exit_code} but its summary reports {failures} failures"


def _skipped_f2p_guard(instance: Instance, run: SuiteRun, statuses: dict[str, str], listed: list[str],
                       junit: bool, index: JunitIndex | None) -> tuple[list[str], str]:
    return ([t for t in instance.fail_to_pass if statuses.get(t) == SKIPPED],
            "a FAIL_TO_PASS test skipped, so it shows no fix")


def _xfail_guard(instance: Instance, run: SuiteRun, statuses: dict[str, str], listed: list[str], junit: bool,
                 index: JunitIndex | None) -> tuple[list[str], str]:
    if not reference.is_pytest(instance):
        return [], ""
    expected = run.xfail_expected or frozenset()
    xfailed = [t for t in listed if statuses.get(t) == XFAIL or XFAIL in (index or {}).get(junit_key(t), ())]
    return ([t for t in xfailed if t not in expected],
            "XFAIL, but the pristine test file does not mark the test xfail")


Guard = Callable[["Instance", SuiteRun, dict[str, str], list[str], bool, JunitIndex | None], tuple[list[str], str]]
"""`(instance, run, statuses, listed, junit, index) -> (tests it fails, why)`."""
GUARDS: tuple[tuple[str, Guard], ...] = (
    ("junit", _junit_guard), ("exit_code", _exit_code_guard), ("skipped_f2p", _skipped_f2p_guard),
    ("xfail", _xfail_guard))
NOT_FAILED = OK + (SKIPPED,)
"""What SWE-bench does not count as a failure: the only statuses a guard may turn into FAILED."""

SCRIPT_NOTE = ("the record's eval script ran the tests its own way: no runtime guard, junit report or "
               "exit-code guard")

EXIT_MEANING = {2: "interrupted, e.g. by errors during collection", 3: "internal error",
                4: "usage error", 5: "no tests collected", 124: "timed out",
                126: "the test command is not executable", 127: "the test command was not found"}


def why_not_run(run: SuiteRun) -> str:
    """Why a run reported no graded test, in one line, with the log's last words."""
    tail = " | ".join(line.strip() for line in run.log.strip().splitlines()[-3:] if line.strip())
    if not run.log.strip():
        what = f"the test command printed nothing (exit {run.exit_code})"
    elif run.timed_out:
        what = "the test run timed out before any graded test reported"
    elif run.exit_code in EXIT_MEANING:
        what = f"exit {run.exit_code}: {EXIT_MEANING[run.exit_code]}"
    else:
        what = f"no FAIL_TO_PASS or PASS_TO_PASS test reported a result (exit {run.exit_code})"
    return what + (f"; the log ends: {tail[-400:]}" if tail else "")


def score(instance: Instance, report: GradeReport, verdict: Verdict, log: str, notes: tuple[str, ...]) -> GradeReport:
    """F2P/P2P lists and the resolution, by SWE-bench's logic, with and without the guards."""
    statuses = verdict.statuses if verdict.ran else {}
    tests = reference.tests_report(instance, statuses)
    reason = verdict.tamper_reason
    if not reason and verdict.variants_failed and report.patch_applied and reference.resolution(tests) == "FULL":
        reason = variant_reason(verdict.variants_failed, verdict.variants)
    tampered = bool(reason)
    resolution = reference.resolution(tests) if report.patch_applied and not tampered else "NO"
    ref_resolved = (verdict.ran and report.patch_applied
                    and reference.resolution(reference.tests_report(instance, verdict.reference)) == "FULL")
    lists = lambda name, key: tuple(tests[name][key])  # noqa: E731
    return dataclasses.replace(
        report, tests_status=verdict.statuses, f2p_passed=lists("FAIL_TO_PASS", "success"),
        f2p_failed=lists("FAIL_TO_PASS", "failure"), p2p_passed=lists("PASS_TO_PASS", "success"),
        p2p_failed=lists("PASS_TO_PASS", "failure"), resolution=resolution,
        resolved=resolution == "FULL", reference_resolved=ref_resolved, guards=verdict.guards,
        tampered=tampered, tamper_reason=reason, log=log, notes=notes)
