"""One run of an instance's tests in the grading sandbox (steps 2 and 3 of `sandbox.grading`): reset
the test files and the test infrastructure to the base, apply the test patch, run the test command
(or the record's eval script on docker), pytest's junit report carried out of the output after a
random separator. `SuiteRun` is what a run leaves: the evidence every verdict
(`sandbox.verdict`) is computed from."""

from __future__ import annotations

import secrets
import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sandbox import reference
from sandbox.base import ExecResult, Sandbox
from sandbox.executor_wire import REPORT_FD
from sandbox.grade_report import InfraFailure
from sandbox.runtime_guard import Guard, applies
from sandbox.tamper import GIT, infrastructure_resets
from swe_rlvr.patches import patch_files

if TYPE_CHECKING:
    from swe_rlvr.config import SandboxConfig
    from swe_rlvr.instances import Instance

TEST_PATCH_FILE = ".git/swe-rlvr-test.patch"
START_MARK, END_MARK = ">>>>> Start Test Output", ">>>>> End Test Output"
JUNIT_DIR = "${TMPDIR:-/tmp}/swe-rlvr-grade"
"""The grader's private directory in the sandbox (the runtime guard's plugin), and where pytest
writes its junit report where the sandbox has no report channel (Docker): outside the working
copy, fixed (see `sandbox.grading`'s docstring)."""
JUNIT_CHANNEL = f"/dev/fd/{REPORT_FD}"
"""Where pytest writes its junit report on the local backend: the command's report pipe, whose
read end only the runner outside the command holds (`sandbox.executor_wire.REPORT_FD`). No file
of the jail holds the report, so nothing can rewrite it after pytest wrote it; what else reaches
the pipe is evidence (`junit_stream`)."""


@dataclass(frozen=True)
class SuiteRun:
    """What one run of an instance's tests left: the evidence every verdict is computed from."""

    log: str
    """The test command's output: what SWE-bench's parser reads."""
    exit_code: int
    timed_out: bool = False
    junit_xml: str | None = None
    """pytest's junit report ("" when none was written); None when it was not asked for."""
    script: bool = False
    """The record's own eval_script ran (its exit status is its last command's)."""
    canaries: dict[str, str] = field(default_factory=dict)
    """The canary tests planted in the test files: {test id: the status it must report}."""
    xfail_expected: frozenset[str] | None = None
    """The graded tests whose pristine test file expects XFAIL; None when unknown (none counts)."""
    guard: tuple[dict, ...] | None = None
    """The runtime guard's records (`sandbox.runtime_guard`), in order; None when it did not run."""
    variants: tuple[str, ...] = ()
    """The hidden variant tests planted for this run (`sandbox.variants`); each must pass."""
    junit_channel: bool = False
    """`junit_xml` is everything the run wrote to the report pipe (`JUNIT_CHANNEL`), not a file."""


def prepare_tests(sb: Sandbox, instance: Instance, model_patch: str) -> tuple[str, ...]:
    """One command: reset the test files and the test infrastructure to the base (deleting what it
    lacks), apply the test patch. Returns the notes that name every reset."""
    resets = infrastructure_resets(sb, instance, model_patch)
    lines = ["set -e", f"base=$({GIT} rev-parse HEAD)"]
    for f in map(shlex.quote, dict.fromkeys([*(path for path, _ in resets), *instance.test_files()])):
        lines.append(f'if {GIT} cat-file -e "$base:"{f} 2>/dev/null; then {GIT} checkout "$base" -- {f}; '
                     f"else rm -rf -- {f}; fi")
    if instance.test_patch.strip():
        sb.write_file(TEST_PATCH_FILE, instance.test_patch if instance.test_patch.endswith("\n")
                      else instance.test_patch + "\n")
        lines.append(f"{GIT} apply --verbose {TEST_PATCH_FILE}")
    result = sb.execute("\n".join(lines), timeout=120)
    if result.exit_code != 0:
        raise InfraFailure(f"Resetting test files or applying the test patch to the base failed: "
                           f"{result.output[-800:]}")
    return reset_notes(instance, model_patch, resets)


def reset_notes(instance: Instance, model_patch: str, resets: list[tuple[str, str]]) -> tuple[str, ...]:
    """"reset to base (<why>): <paths>" for each kind of reset the model patch caused."""
    touched = set(patch_files(model_patch))
    groups = {"the instance's test files": [f for f in instance.test_files() if f in touched]}
    for path, why in resets:
        groups.setdefault(why, []).append(path)
    return tuple(f"reset to base ({why}): {', '.join(paths)}" for why, paths in groups.items() if paths)


def runs_pytest(instance: Instance, cfg: SandboxConfig) -> bool:
    """Whether the grader itself runs pytest (not the record's eval script on docker)."""
    return (reference.is_pytest(instance) and "pytest" in instance.env.test_cmd
            and not (instance.env.eval_script and cfg.backend == "docker"))


def uses_junit(instance: Instance, cfg: SandboxConfig) -> bool:
    """Whether the run writes (and the verdict checks) pytest's junit report."""
    return cfg.junit and runs_pytest(instance, cfg)


def uses_guard(instance: Instance, cfg: SandboxConfig) -> bool:
    """Whether the run loads the grader's runtime guard (`sandbox.runtime_guard`)."""
    return cfg.runtime_guard and runs_pytest(instance, cfg) and applies(instance)


def run_tests(sb: Sandbox, instance: Instance, cfg: SandboxConfig, guard: Guard | None = None,
              extra: tuple[str, ...] = ()) -> SuiteRun:
    """Run the instance's tests once, and the test files `extra` (with `guard`'s plugin loaded, when
    given); the junit report travels after a random separator, the guard's records on lines of
    their own."""
    if instance.env.eval_script and cfg.backend == "docker":
        result = _run(sb, instance.env.eval_script, cfg)
        return SuiteRun(log=script_section(result.output), exit_code=result.exit_code,
                       timed_out=result.timed_out, script=True)
    files = " ".join(map(shlex.quote, [*appended_test_files(instance), *extra]))
    existing = f"$(for f in {files}; do [ -e \"$f\" ] && printf '%s ' \"$f\"; done)" if files else ""
    use_junit = uses_junit(instance, cfg)
    channel = use_junit and hasattr(sb, "execute_reporting")
    token = secrets.token_hex(16)
    junit = f" --junitxml={JUNIT_CHANNEL if channel else JUNIT_DIR + '/junit.xml'}" if use_junit else ""
    setup = f"rm -rf {JUNIT_DIR}; mkdir -p {JUNIT_DIR}"
    if guard is not None:
        setup += "\n" + guard.install(JUNIT_DIR, REPORT_FD if channel else None)
    option = guard.option() if guard is not None else ""
    cmd = f"{setup}\n{instance.env.test_cmd}{option}{junit} {existing}"
    if use_junit and not channel:
        cmd += f"\ncode=$?; echo; echo {token}; cat {JUNIT_DIR}/junit.xml 2>/dev/null; exit $code"
    result = sb.execute_reporting(cmd, cfg.test_timeout_s) if channel else _run(sb, cmd, cfg)  # type: ignore[attr-defined]
    log, xml = result.output, None
    if channel:
        xml = "" if result.report_dropped else (result.report or b"").decode("utf-8", "replace")
    elif use_junit:
        log, found, xml = result.output.rpartition(f"\n{token}\n")
        if not found:  # killed before the separator (a timeout): everything is log
            log, xml = result.output, ""
    log, records = guard.records(log) if guard is not None else (log, None)
    return SuiteRun(log=log, exit_code=result.exit_code, timed_out=result.timed_out, junit_xml=xml,
                    guard=records, junit_channel=channel)


def appended_test_files(instance: Instance) -> list[str]:
    """The instance's Python test files that its test command does not already name: the grader
    runs `test_cmd` followed by these (those missing from the checkout are dropped at run time)."""
    named = set(shlex.split(instance.env.test_cmd))
    return [f for f in instance.test_files() if f.endswith(".py") and f not in named]


def _run(sb: Sandbox, cmd: str, cfg: SandboxConfig) -> ExecResult:
    return sb.execute(cmd, timeout=cfg.test_timeout_s)


def script_section(output: str) -> str:
    """The part of an eval script's output between SWE-bench's start/end markers, as SWE-bench's
    `get_logs_eval` reads it (the whole output when the markers are missing)."""
    start, end = output.find(START_MARK), output.find(END_MARK, output.find(START_MARK) + 1)
    if start != -1 and end > start:
        return output[start + len(START_MARK):end]
    return output


def junit_stream(stream: str) -> tuple[str, str]:
    """(the one junit document of a report pipe's `stream`, what is wrong with the stream): pytest
    writes exactly one document, once, at the end of its session, so a second document or any
    other byte before or after it was written by code under test. An empty stream (a run cut short)
    is no document and no problem."""
    documents = stream.count("<?xml")
    if not stream.strip():
        return "", ""
    if documents != 1:
        return "", f"the junit report pipe holds {documents} documents; pytest writes one"
    start, end = stream.index("<?xml"), stream.rfind("</testsuites>")
    if end == -1:
        return "", ""  # cut short while pytest wrote it: no report, not a forgery
    document = stream[start:end + len("</testsuites>")]
    extra = stream[:start] + stream[end + len("</testsuites>"):]
    if extra.strip():
        return "", f"{len(extra.strip())} bytes beside pytest's junit report in its pipe (written before or after it)"
    return document, ""
