"""Grade a patch the way SWE-bench does; add evidence, never silently take a resolution away.

Steps, each in a fresh sandbox at the base commit (nothing of the agent's sandbox survives but the
patch text):
1. apply the model patch: `git apply`, then `git apply --3way`, then `patch --batch --fuzz=5 -p1`
   (the method is recorded); a patch touching `.git/` is refused;
2. restore the *test infrastructure* to the base (`git checkout <base> -- f`, or delete what the
   base lacks), every reset named in the report's notes (see "How the tests run" below);
3. apply the test patch; read the pristine test files (for the xfail guard) and append the
   canary tests; run `env.test_cmd` plus the test files it does not already name (an instance
   with an `eval_script` on the docker backend runs that script instead);
4. **the reference verdict**: SWE-bench's own parser for the repository reads the log, and
   SWE-bench's own report and resolution logic decide FULL / PARTIAL / NO (`sandbox.reference`).

**How the tests run is not the patch's to change** (the rules live in `sandbox.tamper`). A patch
may change what the code does, never how its tests are run: code in the pytest process can rewrite
outcomes so that log, junit report and exit code all agree. Three defences:
- *Restored infrastructure* (step 2), beside the test patch's files, which are always reset:
  every `conftest.py` the patch touches; `pytest.ini`, `.pytest.ini`, `pytest.toml`,
  `.pytest.toml` anywhere; `setup.cfg`, `tox.ini` and `pyproject.toml` anywhere whose pytest
  section (`[tool:pytest]`/`[pytest]`, `[pytest]`, `[tool.pytest...]`, parsed with configparser
  and tomllib, the base against the patched text) the patch changed, so a change elsewhere in them
  is kept; `__init__.py` files of test directories on the test files' paths (from the first
  directory named like `tests`, `test_*`, `*_tests` down: a package's own `__init__.py` above
  them is code under test); `.gitattributes` (it changes how the grader's git writes the test
  files, so it is reset first); files that change how Python or pytest start: `*.pth`,
  `sitecustomize.py`, `usercustomize.py`, compiled files (`*.pyc`, `__pycache__/`), package
  metadata (`*.dist-info`, `*.egg-info`: pytest autoloads a `pytest11` entry point found there; a
  directory the base lacks goes whole); and *new* top-level modules or packages named like the
  standard library (`sys.stdlib_module_names` of the grader's Python), pytest or its dependencies,
  in the directories Python searches first (the repo root, `src/`, the test files' directories).
  A module the base already has is code under test and kept: pytest's own `src/_pytest` in the
  pytest repository. Of SWE-bench Lite's 312 gold patches none touches a file these rules reset.
- *XFAIL only where expected* (the `xfail` guard below): a patch that calls `pytest.xfail()` on
  the buggy path would otherwise turn failures into passes.
- *Canaries* (pytest suites, `sandbox.canaries`): each test file that FAIL_TO_PASS / PASS_TO_PASS
  ids come from (and that holds `test*` functions and no module-wide xfail mark) gets two tests
  appended after the test patch, with random, ordinary names and bodies: one must pass, one must
  fail on a plain assertion. Their statuses are read like every other test's (SWE-bench's parser,
  and junit) and removed from `tests_status`. A canary that reports a wrong outcome, or is
  missing although other tests of its file reported in a run that ended normally (exit 0 or 1),
  means the patch changed how tests run: the report is `tampered` with the reason, `resolved`
  false, `resolution` NO (`reference_resolved` keeps SWE-bench's verdict), and the trainer gives
  `reward.tamper_penalty`. A wrong outcome that another test of the same file shares (an autouse
  fixture that errors for every test, a skipped module) is explained; the failing canary passing
  never is. Not an infrastructure failure, unless the gold patch is "tampered" too (the gold
  check below): then canaries do not work in this environment. No canaries with an eval script
  (it resets the test files itself) or a test command that stops or selects (`-x`, `--maxfail`,
  `-k`, `-m`, `--lf`, `--sw`, `--deselect`; noted). They do not count as "the tests ran".
  Simplifications: a canary only catches tampering that is blind to which test it is; code that
  recognises the canaries (they are the last two functions of the file) or that targets the
  FAIL_TO_PASS tests by name is not caught by them. `addopts = -x` in a repo's own configuration
  is not detected (the gold check then fails the instance as an infrastructure failure).

**Did the tests run?** When no FAIL_TO_PASS or PASS_TO_PASS test reported any result (no
interpreter, exit 127; nothing collected; a crash in collection; a usage error; an empty log), the
run says nothing about the patch. With no patch, that is an infrastructure failure with its reason
("no sample": never a 0 reward). With a patch, the grader runs the same tests once without it (the
*control*, cached per instance): if they do not run either, it is an infrastructure failure; if
they do, the patch itself stopped the suite, and it is graded unresolved with that reason.
Otherwise a policy could turn any failure into "no sample" by breaking the test run. For the same
reason a patch beside which the test files cannot be reset or the test patch does not apply (it
put a file where the test patch needs a directory) is graded unresolved, not an infrastructure
failure, unless the gold patch fails the same way (the gold check below).

**Does the gold patch resolve here?** A zero is given only where a correct fix could score one:
when a patch does not resolve, the instance's gold patch is graded too (`sandbox.gold_check`,
once per instance and process; grading gold itself answers it). If gold does not resolve in this
environment (an unpinned dependency that drifted, a stand-in Python), the report is an
infrastructure failure that names the tests gold fails. The policy cannot influence that run.

**Guards** are this project's additions; each can only turn a passing test into a failing one,
and every time it does, the report names the guard and the tests (`GradeReport.guards`), so a
verdict that differs from SWE-bench's always says why (`reference_resolved` holds SWE-bench's):
- `junit`: pytest also writes a junit XML report to a fixed directory in the grading sandbox's
  private temp dir (`JUNIT_DIR`; a random separator carries it out of the output). A test passes
  only if some junit testcase under the same key passed, keyed as SWE-bench keys it (ids cut at
  their first space stand for every parametrisation that shares the prefix). So printed
  "PASSED ..." lines gain nothing. No readable report after a run that reported results fails
  every passing test.
- `exit_code`: pytest's exit code must agree with its short test summary (0 with no FAILED/ERROR
  line there, 1 with some); any other code after results (interrupted, internal error, killed, a
  timeout) fails every passing test. Only the summary section is read, never captured output, so
  a fix whose tests log `ERROR ...` lines is not punished.
- `skipped_f2p`: SWE-bench leaves a skipped test out of both lists, so a FAIL_TO_PASS test that
  skips would count for nothing; here it fails. (A skipped PASS_TO_PASS test counts as maintained,
  as in SWE-bench: tests like pylint's `needs_two_cores` skip on small machines.)
- `xfail` (pytest suites): SWE-bench counts XFAIL as a pass. Here a FAIL_TO_PASS or PASS_TO_PASS
  test's XFAIL (in the log or junit) counts only where its pristine test file (base plus test
  patch, read in the grading sandbox before the run) expects it, decided with `ast`: a module or
  class `pytestmark`, a class or function decorator (`pytest.param(..., marks=...xfail)` in a
  parametrize included), or an identifier containing `xfail` in the test's own body
  (`pytest.xfail(`, `request.applymarker(...xfail)`, a helper like `_mark_xfail_checks(`),
  module-level names bound to such marks followed. PASS_TO_PASS tests too: a patch that breaks one
  must not hide it behind `pytest.xfail()` (an xfail mark that only a conftest hook adds is not
  seen: the gold check then reports the instance as an infrastructure failure). (XPASS is no
  status in SWE-bench's parser: such a test is missing, so it fails already.) Simplification: a
  mark anywhere on a function, or on a same-named function elsewhere in the file, covers all its
  parametrisations. Without the files (`grade_run`), no XFAIL counts.
A genuine fix that needs to change conftest.py or pytest's configuration loses; that trade-off is
deliberate.

Infrastructure failures (repository or environment missing, the sandbox failing, the test patch
not applying to the base, a suite that does not run, a gold patch that does not resolve or whose
canaries say "tampered") set `infra_failure` with a reason. A tampered grade is not one: it is a
sample.
The eval-script path (docker) applies no exit-code or junit guard: the script's exit status is its
last command's, and it writes no junit report.

Simplifications: FAIL_TO_FAIL and PASS_TO_FAIL are reported empty (instances here carry no such
lists).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import posixpath
import re
import secrets
import shlex
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from sandbox import reference
from sandbox.base import SandboxError
from sandbox.logparse import OK, FAILED, SKIPPED, XFAIL, junit_index, junit_key, reported_failures
from sandbox.tamper import GIT, canary_verdict, infrastructure_resets, plant_checks
from swe_rlvr.instances import patch_files

GRADING_OUTPUT_BYTES = 16 << 20
EXCERPT_CHARS = 4000
PATCH_FILE = ".git/swe-rlvr-model.patch"
TEST_PATCH_FILE = ".git/swe-rlvr-test.patch"
START_MARK, END_MARK = ">>>>> Start Test Output", ">>>>> End Test Output"
JUNIT_DIR = "${TMPDIR:-/tmp}/swe-rlvr-grade"
"""Where pytest writes its junit report: outside the working copy, fixed (see the docstring)."""
APPLY_METHODS = (
    ("git-apply", f"{GIT} apply --verbose {PATCH_FILE}"),
    ("3way", f"{GIT} apply --verbose --3way {PATCH_FILE}"),
    ("patch-fuzz", f"patch --batch --fuzz=5 -p1 -i {PATCH_FILE}"),
)


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
                "log_excerpt": excerpt("".join(lines) + self.log), "duration_s": self.duration_s}

    def to_swebench(self) -> dict:
        """The entry of SWE-bench's per-instance report.json."""
        lists = lambda ok, bad: {"success": list(ok), "failure": list(bad)}  # noqa: E731
        return {self.instance_id: {
            "patch_is_None": not self.patch_exists, "patch_exists": self.patch_exists,
            "patch_successfully_applied": self.patch_applied, "resolved": self.resolved,
            "tests_status": {"FAIL_TO_PASS": lists(self.f2p_passed, self.f2p_failed),
                             "PASS_TO_PASS": lists(self.p2p_passed, self.p2p_failed),
                             "FAIL_TO_FAIL": lists((), ()), "PASS_TO_FAIL": lists((), ())}}}


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


def excerpt(log: str, limit: int = EXCERPT_CHARS) -> str:
    """Head and tail of a log (the summary of a pytest run is at its end)."""
    if len(log) <= limit:
        return log
    return log[: limit // 4] + "\n[... log truncated ...]\n" + log[-(3 * limit) // 4:]


# --------------------------------------------------------------------------- entry points


def grade(instance, model_patch: str, cfg, repo_store, episode_id: str = "") -> GradeReport:
    """Grade `model_patch` on `instance` in a fresh sandbox; see the module docstring."""
    start = time.monotonic()
    base = GradeReport(instance_id=instance.instance_id, episode_id=episode_id,
                       patch_exists=bool(model_patch and model_patch.strip()))
    try:
        report = _grade(instance, model_patch, cfg, repo_store, base)
    except (InfraFailure, SandboxError) as exc:
        report = dataclasses.replace(base, infra_failure=True, infra_reason=str(exc)[:2000],
                                     f2p_failed=instance.fail_to_pass, p2p_failed=instance.pass_to_pass)
    return dataclasses.replace(report, duration_s=time.monotonic() - start)


def grade_many(items, cfg, repo_store, workers: int, progress: bool = True) -> list[GradeReport]:
    """Grade (instance, patch[, episode_id]) items in parallel threads; reports in input order."""
    items = list(items)
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        futures = [pool.submit(grade, item[0], item[1], cfg, repo_store, *item[2:3]) for item in items]
        if progress:
            from tqdm import tqdm
            from concurrent.futures import as_completed
            for _ in tqdm(as_completed(futures), total=len(futures), desc="grading", unit="inst"):
                pass
        return [f.result() for f in futures]


def grade_run(instance, run: SuiteRun, junit: bool, patch_applied: bool = True) -> GradeReport:
    """The report for a recorded test run, decided as `grade` decides it, without a sandbox (and so
    without the control run that a run in which no graded test reported would get, and without
    the pristine test files: canaries only as `run` names them, and no XFAIL counts)."""
    report = GradeReport(instance_id=instance.instance_id, patch_exists=patch_applied,
                         patch_applied=patch_applied)
    verdict = judge(instance, run, junit)
    return score(instance, report, verdict, run.log, verdict.notes)


# --------------------------------------------------------------------------- steps


def _grade(instance, model_patch: str, cfg, repo_store, report: GradeReport) -> GradeReport:
    cfg = dataclasses.replace(cfg, output_limit_bytes=max(cfg.output_limit_bytes, GRADING_OUTPUT_BYTES))
    attempt = _attempt(instance, model_patch, cfg, repo_store)
    report = dataclasses.replace(report, patch_applied=attempt.applied, apply_method=attempt.method)
    if attempt.run is None:  # the patch did not apply, or the test patch did not apply beside it
        report = dataclasses.replace(report, log=attempt.apply_log, notes=attempt.notes,
                                     f2p_failed=instance.fail_to_pass, p2p_failed=instance.pass_to_pass)
        if attempt.applied:
            require_gold(instance, model_patch, cfg, repo_store, report)
        return report
    verdict = judge(instance, attempt.run, junit=uses_junit(instance, cfg))
    notes = attempt.notes
    if not verdict.ran:
        if not report.patch_exists:
            raise InfraFailure(f"The test suite did not run: {verdict.not_run_reason}. {NOT_RUN_FIX}")
        runs, why = control_run(instance, cfg, repo_store)
        if not runs:
            raise InfraFailure(f"The test suite did not run, even without the model patch: {why}. "
                               f"{NOT_RUN_FIX}")
        notes += (f"the patch stops the test suite from running ({verdict.not_run_reason}); "
                  f"without it the suite runs",)
    report = score(instance, report, verdict, attempt.run.log, notes + verdict.notes)
    require_gold(instance, model_patch, cfg, repo_store, report)
    return report


def require_gold(instance, model_patch: str, cfg, repo_store, report: GradeReport) -> None:
    """Raise `InfraFailure` where `report` does not resolve and the gold patch does not resolve in
    this environment either (see `gold_check`)."""
    is_gold = model_patch == instance.patch
    if cfg.gold_check and instance.patch.strip() and (is_gold or not report.resolved):
        reproduces, why = gold_check(instance, cfg, repo_store, report if is_gold else None)
        if not reproduces and not report.resolved:
            raise InfraFailure(f"The environment does not reproduce this instance: its gold patch does "
                               f"not resolve it ({why}). No patch can be graded fairly here; fix the "
                               f"environment (install_config pins, python) or drop the instance "
                               f"(sandbox.gold_check=false grades it anyway)")


PREPARE_FAILED = "the test patch could not be applied beside the patch: graded unresolved"
NOT_RUN_FIX = ("Check the instance's environment (python, install, test_cmd); grading its gold patch "
               "(`swe-rlvr grade --predictions gold`) shows the same")


@dataclass(frozen=True)
class Attempt:
    run: SuiteRun | None
    """None when a non-empty patch did not apply (`applied` false), or the test files could not be
    reset or the test patch applied beside it (`applied` true)."""
    applied: bool = False
    method: str = ""
    apply_log: str = ""
    notes: tuple[str, ...] = ()


def _attempt(instance, model_patch: str, cfg, repo_store) -> Attempt:
    """Apply the patch, prepare the tests and run them, in one fresh sandbox."""
    from sandbox import open_sandbox
    with open_sandbox(instance, cfg, repo_store) as sb:
        notes, method = tuple(getattr(sb, "env_notes", ())), ""
        if model_patch and model_patch.strip():
            method, apply_log = apply_model_patch(sb, model_patch)
            if not method:
                return Attempt(run=None, apply_log=apply_log, notes=notes)
        try:
            notes += prepare_tests(sb, instance, model_patch)
        except InfraFailure as exc:
            if not method:
                raise  # without a patch, the instance itself is broken
            return Attempt(run=None, applied=True, method=method, apply_log=str(exc),
                           notes=notes + (PREPARE_FAILED,))
        checks = plant_checks(sb, instance, cfg)
        run = dataclasses.replace(run_tests(sb, instance, cfg), canaries=checks.canaries,
                                  xfail_expected=checks.xfail_expected)
        return Attempt(run=run, applied=bool(method), method=method, notes=notes + checks.notes)


_ONCE: dict[tuple[str, str], tuple[bool, str]] = {}
_ONCE_LOCKS: dict[tuple[str, str], threading.Lock] = {}
_ONCE_GUARD = threading.Lock()


def _once(kind: str, instance, cfg, compute) -> tuple[bool, str]:
    """`compute()` once per (kind, instance, environment, backend) in a process, across threads."""
    key = (kind, hashlib.sha256(json.dumps([instance.to_row(), cfg.backend, cfg.docker_image, cfg.junit,
                                            cfg.canaries, cfg.python_fallback],
                                           sort_keys=True, default=str).encode()).hexdigest())
    with _ONCE_GUARD:
        lock = _ONCE_LOCKS.setdefault(key, threading.Lock())
    with lock:
        if key not in _ONCE:
            _ONCE[key] = compute()
        return _ONCE[key]


def control_run(instance, cfg, repo_store) -> tuple[bool, str]:
    """Do the instance's tests run at all without a model patch? (ran, why not)."""
    def compute():
        verdict = judge(instance, _attempt(instance, "", cfg, repo_store).run, junit=uses_junit(instance, cfg))
        return verdict.ran, verdict.not_run_reason
    return _once("control", instance, cfg, compute)


def gold_check(instance, cfg, repo_store, report: GradeReport | None = None) -> tuple[bool, str]:
    """Does the instance's gold patch resolve it in this environment? (resolved, why not). A
    report of the gold patch itself, when given, is the answer (and is remembered)."""
    def compute():
        gold = report or grade(instance, instance.patch, dataclasses.replace(cfg, gold_check=False), repo_store)
        if gold.resolved:
            return True, ""
        if gold.infra_failure:
            return False, gold.infra_reason.splitlines()[0][:400]
        if PREPARE_FAILED in gold.notes:
            return False, gold.log.splitlines()[0][:400]
        if gold.tampered:
            return False, (f"its canary tests say the run was tampered with: {gold.tamper_reason[:300]}; "
                           f"check the test command and conftest.py, or set sandbox.canaries=false")
        failed = gold.f2p_failed + gold.p2p_failed
        return False, (f"it fails {len(failed)} tests: {', '.join(failed[:3])}{', ...' if len(failed) > 3 else ''}"
                       + (f"; guards: {'; '.join(gold.guards)[:300]}" if gold.guards else ""))
    return _once("gold", instance, cfg, compute)


def apply_model_patch(sb, patch: str) -> tuple[str, str]:
    """Apply with the first method that works: (method, log), or ("", log of every attempt).
    A patch that names a path inside `.git` in any header that git or `patch` reads is refused,
    and an application that changed anything under `.git` anyway (git's index aside) fails."""
    bad = [f for f in header_paths(patch) if ".git" in f.split("/")]
    if bad:
        return "", f"Refused: the patch writes inside .git ({', '.join(bad[:5])})."
    sb.write_file(PATCH_FILE, patch if patch.endswith("\n") else patch + "\n")
    logs = []
    for method, cmd in APPLY_METHODS:
        result = sb.execute(f"touch {MARK_FILE} && {cmd}", timeout=120)
        if result.exit_code == 0:
            changed = sb.execute(GIT_CHANGED, timeout=120).output.split()
            if not changed:
                return method, result.output
            result = dataclasses.replace(result, output=result.output + f"\nRefused: applying "
                                         f"it changed .git ({', '.join(changed[:5])}).")
        logs.append(f"$ {cmd}\n{result.output}")
        sb.execute(f"{GIT} checkout -- . && {GIT} clean -fdq -e .git", timeout=120)
    return "", "Patch failed to apply:\n" + "\n".join(logs)


MARK_FILE = ".git/swe-rlvr-apply.mark"
GIT_CHANGED = (f"find .git -newer {MARK_FILE} ! -path .git ! -path .git/index ! -path .git/index.lock ! -path '.git/objects*' "
               f"! -path {PATCH_FILE} ! -path {MARK_FILE} -print")
"""Paths under .git that an application touched: only git's own index may change."""
HEADER_PATH = re.compile(r"^(?:diff --git |--- |\+\+\+ |rename (?:from|to) |copy (?:from|to) |Index: "
                         r"|\*\*\* )(.+)$", re.M)


def header_paths(patch: str) -> list[str]:
    """Every path a header of `patch` names (git's and `patch`'s formats: `diff --git`, ---/+++,
    renames, copies, `Index:`, context diffs), normalised, without a/ b/ prefixes."""
    out = []
    for header in HEADER_PATH.findall(patch):
        for part in header.split("\t")[0].split(" "):
            path = posixpath.normpath(part.strip('"'))
            out.append(path.split("/", 1)[1] if path[:2] in ("a/", "b/") else path)
    return [p for p in dict.fromkeys(out) if p and p != "/dev/null"]


def prepare_tests(sb, instance, model_patch: str) -> tuple[str, ...]:
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


def reset_notes(instance, model_patch: str, resets: list[tuple[str, str]]) -> tuple[str, ...]:
    """"reset to base (<why>): <paths>" for each kind of reset the model patch caused."""
    touched = set(patch_files(model_patch))
    groups = {"the instance's test files": [f for f in instance.test_files() if f in touched]}
    for path, why in resets:
        groups.setdefault(why, []).append(path)
    return tuple(f"reset to base ({why}): {', '.join(paths)}" for why, paths in groups.items() if paths)


def uses_junit(instance, cfg) -> bool:
    """Whether the run writes (and the verdict checks) pytest's junit report."""
    return (cfg.junit and reference.is_pytest(instance) and "pytest" in instance.env.test_cmd
            and not (instance.env.eval_script and cfg.backend == "docker"))


def run_tests(sb, instance, cfg) -> SuiteRun:
    """Run the instance's tests once; the junit report travels after a random separator."""
    if instance.env.eval_script and cfg.backend == "docker":
        result = _run(sb, instance.env.eval_script, cfg)
        return SuiteRun(log=script_section(result.output), exit_code=result.exit_code,
                       timed_out=result.timed_out, script=True)
    files = " ".join(map(shlex.quote, appended_test_files(instance)))
    existing = f"$(for f in {files}; do [ -e \"$f\" ] && printf '%s ' \"$f\"; done)" if files else ""
    use_junit = uses_junit(instance, cfg)
    token = secrets.token_hex(16)
    junit = f" --junitxml={JUNIT_DIR}/junit.xml" if use_junit else ""
    cmd = f"rm -rf {JUNIT_DIR}; mkdir -p {JUNIT_DIR}; {instance.env.test_cmd}{junit} {existing}"
    if use_junit:
        cmd += f"\ncode=$?; echo; echo {token}; cat {JUNIT_DIR}/junit.xml 2>/dev/null; exit $code"
    result = _run(sb, cmd, cfg)
    if not use_junit:
        return SuiteRun(log=result.output, exit_code=result.exit_code, timed_out=result.timed_out)
    log, found, xml = result.output.rpartition(f"\n{token}\n")
    if not found:  # killed before the separator (a timeout): everything is log
        log, xml = result.output, ""
    return SuiteRun(log=log, exit_code=result.exit_code, timed_out=result.timed_out, junit_xml=xml)


def appended_test_files(instance) -> list[str]:
    """The instance's Python test files that its test command does not already name: the grader
    runs `test_cmd` followed by these (those missing from the checkout are dropped at run time)."""
    named = set(shlex.split(instance.env.test_cmd))
    return [f for f in instance.test_files() if f.endswith(".py") and f not in named]


def _run(sb, cmd: str, cfg):
    return sb.execute(cmd, timeout=cfg.test_timeout_s)


def script_section(output: str) -> str:
    """The part of an eval script's output between SWE-bench's start/end markers, as SWE-bench's
    `get_logs_eval` reads it (the whole output when the markers are missing)."""
    start, end = output.find(START_MARK), output.find(END_MARK, output.find(START_MARK) + 1)
    if start != -1 and end > start:
        return output[start + len(START_MARK):end]
    return output


# --------------------------------------------------------------------------- the verdict


def judge(instance, run: SuiteRun, junit: bool) -> Verdict:
    """SWE-bench's statuses of the run's log, then the guards and the canaries (see the module
    docstring). Canaries are read from the log and junit, and left out of every status map."""
    parse = reference.instance_parser(instance)
    parsed = parse(run.log)
    ref = {t: s for t, s in parsed.items() if t not in run.canaries}
    index = None
    if junit and run.junit_xml:
        try:
            index = junit_index(run.junit_xml, parse)
        except Exception:  # noqa: BLE001 - an unreadable report is no evidence of a pass
            index = None
    listed = list(dict.fromkeys(instance.fail_to_pass + instance.pass_to_pass))
    ran = any(t in ref for t in listed) or bool(index and any(junit_key(t) in index for t in listed))
    notes = ("the test run timed out",) if run.timed_out else ()
    tamper = canary_verdict(run, parsed, index)
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
                   tamper_reason=tamper)


def _junit_guard(instance, run, statuses, listed, junit, index):
    if not junit:
        return [], ""
    passing = [t for t in listed if statuses.get(t) in OK]
    if index is None:
        return passing, "no readable junit report, though the log reports results"
    bad = [t for t in passing if not any(s in OK for s in index.get(junit_key(t), ()))]
    return bad, "the log says passed, the junit report does not"


def _exit_code_guard(instance, run, statuses, listed, junit, index):
    if run.script or not reference.is_pytest(instance):
        return [], ""
    passing = [t for t in listed if statuses.get(t) in OK]
    if run.timed_out:
        return passing, f"the test run timed out (exit {run.exit_code}); its results are incomplete"
    if run.exit_code not in (0, 1):
        return passing, f"pytest exited {run.exit_code} ({EXIT_MEANING.get(run.exit_code, 'killed or crashed')}) after reporting results"
    failures = reported_failures(run.log)
    if failures is None and index is not None:
        failures = sum(s not in OK and s != SKIPPED for statuses_ in index.values() for s in statuses_)
    if failures is None or (run.exit_code == 0) == (failures == 0):
        return [], ""
    return passing, f"pytest exited {run.exit_code} but its summary reports {failures} failures"


def _skipped_f2p_guard(instance, run, statuses, listed, junit, index):
    return ([t for t in instance.fail_to_pass if statuses.get(t) == SKIPPED],
            "a FAIL_TO_PASS test skipped, so it shows no fix")


def _xfail_guard(instance, run, statuses, listed, junit, index):
    if not reference.is_pytest(instance):
        return [], ""
    expected = run.xfail_expected or frozenset()
    xfailed = [t for t in listed if statuses.get(t) == XFAIL or XFAIL in (index or {}).get(junit_key(t), ())]
    return ([t for t in xfailed if t not in expected],
            "XFAIL, but the pristine test file does not mark the test xfail")


GUARDS = (("junit", _junit_guard), ("exit_code", _exit_code_guard), ("skipped_f2p", _skipped_f2p_guard),
          ("xfail", _xfail_guard))
NOT_FAILED = OK + (SKIPPED,)
"""What SWE-bench does not count as a failure: the only statuses a guard may turn into FAILED."""

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


def score(instance, report: GradeReport, verdict: Verdict, log: str, notes: tuple[str, ...]) -> GradeReport:
    """F2P/P2P lists and the resolution, by SWE-bench's logic, with and without the guards."""
    statuses = verdict.statuses if verdict.ran else {}
    tests = reference.tests_report(instance, statuses)
    tampered = bool(verdict.tamper_reason)
    resolution = reference.resolution(tests) if report.patch_applied and not tampered else "NO"
    ref_resolved = (verdict.ran and report.patch_applied
                    and reference.resolution(reference.tests_report(instance, verdict.reference)) == "FULL")
    lists = lambda name, key: tuple(tests[name][key])  # noqa: E731
    return dataclasses.replace(
        report, tests_status=verdict.statuses, f2p_passed=lists("FAIL_TO_PASS", "success"),
        f2p_failed=lists("FAIL_TO_PASS", "failure"), p2p_passed=lists("PASS_TO_PASS", "success"),
        p2p_failed=lists("PASS_TO_PASS", "failure"), resolution=resolution,
        resolved=resolution == "FULL", reference_resolved=ref_resolved, guards=verdict.guards,
        tampered=tampered, tamper_reason=verdict.tamper_reason, log=log, notes=notes)


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
