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
  or any module the test environment has installed, in the directories Python searches first (the
  repo root, `src/`, the test files' directories, and each one's basedir that pytest's default
  import mode puts on `sys.path`). A module the base already has is code under test and kept:
  pytest's own `src/_pytest` in the pytest repository. Of SWE-bench Lite's 312 gold patches none
  touches a file these rules reset. The import mode stays pytest's default, as in SWE-bench's
  harness (no `--import-mode=importlib`, no `python -P`): these resets cover the shadowing they
  would prevent, without changing how any repository's tests import.
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
- `junit`: pytest also writes a junit XML report: on the local backend to the command's fd 4, a
  pipe whose other end only the runner outside the command holds (`suite_run.JUNIT_CHANNEL`; no
  file of the jail holds the report, and a second document or any other byte in the pipe is
  tampering, `suite_run.junit_stream`); on Docker to a fixed directory in the sandbox's private
  temp dir (`JUNIT_DIR`; a random separator carries it out of the output). A test passes
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

**The static screen** (`sandbox.screen`, config key `sandbox.static_screen`): the patch's
non-test Python files, read with `ast` before and after it, must not newly reach for the test
machinery or for introspection (pytest's internals and hooks, `atexit`, frames, `gc`, writes to
`sys.modules` or builtins, the runners' environment variables such as `PYTEST_CURRENT_TEST`,
`ctypes`, writes outside the repository, pytest's report text); a patch that does is `tampered`,
with the rule in the reason. Its rules, its repository awareness (a package the repository ships is
the code under repair) and its blind spots are that module's docstring. No gold patch of the
built-in suite, the real set or SWE-bench Lite trips it (`tests/screen_gold.py`).

**The runtime guard** (modules `sandbox.runtime_guard` and `sandbox.guard_plugin`, config key
`sandbox.runtime_guard`; pytest suites the grader runs itself, not pytest's own repositories): code the tests import
has full control of pytest's process, so canaries catch only tampering that is blind to them. The
grader loads a plugin of its own with `-p`, under a random module name, from its private directory,
before any of the repository's code: an audit hook (PEP 578) refuses to the lines the patch added
(`git diff -U0` after it applied) frame and object walks (`sys._getframe`, a traceback's frame,
`gc.get_objects`...), tracing and `ctypes`, and to any frame of them the grader's own files (the
junit report, even from an `atexit` handler); pytest's and pluggy's functions must stay as they
were, and a hook implementation the patch added is unregistered. What it refuses or finds is
written with a random token to the process's original stdout, and grades the run `tampered`, as
does a run that ended normally without the guard's `end` record. It cannot see what needs none of
this: reading `PYTEST_CURRENT_TEST` or `sys.modules`, or calling pytest's objects it was handed
(the static screen looks for those in the patch's text).

**Hidden variant tests** (`sandbox.variants`, config key `sandbox.variant_tests`; built-in instances
that have them, `swe_rlvr.builtin.variants`): the fixed functions at inputs no visible test uses,
planted after the patch as a test file with random names and run with the graded tests. A patch
that resolves the visible tests and fails one of them recognises the tests rather than fixing the
code, and is `tampered`. An instance without variants says so in its notes.

Infrastructure failures (repository or environment missing, the sandbox failing, the test patch
not applying to the base, a suite that does not run, a gold patch that does not resolve or whose
canaries say "tampered") set `infra_failure` with a reason. A tampered grade is not one: it is a
sample.
The eval-script path (docker) applies no exit-code or junit guard, no runtime guard and no variant
tests: the script's exit status is its last command's, it writes no junit report, and it runs pytest
its own way.

Simplifications: FAIL_TO_FAIL and PASS_TO_FAIL are reported empty (instances here carry no such
lists).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
import shlex
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sandbox.base import Sandbox, SandboxError
from sandbox.canaries import canary_rng
from sandbox.grade_report import GradeReport, InfraFailure
from sandbox.model_patch import apply_model_patch
from sandbox.runtime_guard import new_guard
from sandbox.screen import instance_tests, screen, screened
from sandbox.suite_run import SuiteRun, prepare_tests, run_tests, uses_guard, uses_junit
from sandbox.tamper import GIT, plant_checks
from sandbox.variants import plant_variants
from sandbox.verdict import judge, score
from swe_rlvr.patches import patch_files

if TYPE_CHECKING:
    from swe_rlvr.config import SandboxConfig
    from swe_rlvr.instances import Instance

GRADING_OUTPUT_BYTES = 16 << 20


# --------------------------------------------------------------------------- entry points


def grade(instance: Instance, model_patch: str, cfg: SandboxConfig, repo_store: str | Path,
          episode_id: str = "") -> GradeReport:
    """Grade `model_patch` on `instance` in a fresh sandbox; see the module docstring."""
    start = time.monotonic()
    base = GradeReport(instance_id=instance.instance_id, episode_id=episode_id,
                       patch_exists=bool(model_patch and model_patch.strip()))
    try:
        report = _grade(instance, model_patch, cfg, repo_store, base, canary_rng(instance, episode_id))
    except (InfraFailure, SandboxError) as exc:
        report = dataclasses.replace(base, infra_failure=True, infra_reason=str(exc)[:2000],
                                     f2p_failed=instance.fail_to_pass, p2p_failed=instance.pass_to_pass)
    return dataclasses.replace(report, duration_s=time.monotonic() - start)


def grade_many(items: Iterable[tuple[Instance, str] | tuple[Instance, str, str]], cfg: SandboxConfig,
               repo_store: str | Path, workers: int, progress: bool = True) -> list[GradeReport]:
    """Grade (instance, patch[, episode_id]) items in parallel threads; reports in input order."""
    jobs = list(items)
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        futures = [pool.submit(grade, item[0], item[1], cfg, repo_store, *item[2:3]) for item in jobs]
        if progress:
            from concurrent.futures import as_completed

            from tqdm import tqdm
            for _ in tqdm(as_completed(futures), total=len(futures), desc="grading", unit="inst"):
                pass
        return [f.result() for f in futures]


def grade_run(instance: Instance, run: SuiteRun, junit: bool, patch_applied: bool = True) -> GradeReport:
    """The report for a recorded test run, decided as `grade` decides it, without a sandbox (and so
    without the control run that a run in which no graded test reported would get, and without
    the pristine test files: canaries only as `run` names them, and no XFAIL counts)."""
    report = GradeReport(instance_id=instance.instance_id, patch_exists=patch_applied,
                         patch_applied=patch_applied)
    verdict = judge(instance, run, junit)
    return score(instance, report, verdict, run.log, verdict.notes)


# --------------------------------------------------------------------------- steps


def _grade(instance: Instance, model_patch: str, cfg: SandboxConfig, repo_store: str | Path, report: GradeReport,
           rng: random.Random) -> GradeReport:
    cfg = dataclasses.replace(cfg, output_limit_bytes=max(cfg.output_limit_bytes, GRADING_OUTPUT_BYTES))
    attempt = _attempt(instance, model_patch, cfg, repo_store, rng)
    report = dataclasses.replace(report, patch_applied=attempt.applied, apply_method=attempt.method)
    if attempt.run is None:  # the patch did not apply, or the test patch did not apply beside it
        report = dataclasses.replace(report, log=attempt.apply_log, notes=attempt.notes,
                                     f2p_failed=instance.fail_to_pass, p2p_failed=instance.pass_to_pass)
        if attempt.applied:
            require_gold(instance, model_patch, cfg, repo_store, report)
        return report
    verdict = judge(instance, attempt.run, junit=uses_junit(instance, cfg))
    if attempt.flag:
        verdict = dataclasses.replace(verdict, tamper_reason="; ".join(
            r for r in (f"static screen: {attempt.flag}", verdict.tamper_reason) if r))
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
    report = dataclasses.replace(report, canaries=tuple(attempt.run.canaries) + attempt.run.variants)
    report = score(instance, report, verdict, attempt.run.log, notes + verdict.notes)
    require_gold(instance, model_patch, cfg, repo_store, report)
    return report


def require_gold(instance: Instance, model_patch: str, cfg: SandboxConfig, repo_store: str | Path,
                 report: GradeReport) -> None:
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
    flag: str = ""
    """What the static screen found in the applied patch ("" if nothing; `sandbox.screen`)."""


def _attempt(instance: Instance, model_patch: str, cfg: SandboxConfig, repo_store: str | Path,
             rng: random.Random | None = None) -> Attempt:
    """Apply the patch, prepare the tests and run them, in one fresh sandbox."""
    from sandbox import open_sandbox
    with open_sandbox(instance, cfg, repo_store) as sb:
        notes, method = tuple(getattr(sb, "env_notes", ())), ""
        if model_patch and model_patch.strip():
            method, apply_log = apply_model_patch(sb, model_patch)
            if not method:
                return Attempt(run=None, apply_log=apply_log, notes=notes)
        flag = static_flag(sb, instance, model_patch) if cfg.static_screen and method else ""
        guard = new_guard(sb, instance, model_patch, GIT) if uses_guard(instance, cfg) else None
        try:
            notes += prepare_tests(sb, instance, model_patch)
        except InfraFailure as exc:
            if not method:
                raise  # without a patch, the instance itself is broken
            return Attempt(run=None, applied=True, method=method, apply_log=str(exc),
                           notes=notes + (PREPARE_FAILED,))
        checks = plant_checks(sb, instance, cfg, rng)
        variants = plant_variants(sb, instance, cfg, rng)
        run = dataclasses.replace(run_tests(sb, instance, cfg, guard, extra=(variants.path,) if variants.path else ()),
                                  canaries=checks.canaries, xfail_expected=checks.xfail_expected,
                                  variants=variants.tests)
        return Attempt(run=run, applied=bool(method), method=method,
                       notes=notes + checks.notes + variants.notes, flag=flag)


def static_flag(sb: Sandbox, instance: Instance, model_patch: str) -> str:
    """The static screen's flag on the applied patch, from the files as the sandbox has them
    before (the base commit) and after it ("" if none)."""
    tests = instance_tests(instance)
    paths = [p for p in patch_files(model_patch) if screened(p, tests)]
    before, after = {}, {}
    for path in paths:
        base = sb.execute(f"{GIT} show HEAD:{shlex.quote(path)}", timeout=60)
        now = sb.execute(f"cat -- {shlex.quote(path)}", timeout=60)
        before[path] = base.output if base.exit_code == 0 else None
        after[path] = now.output if now.exit_code == 0 else None
    flag = screen(instance.repo, before, after, tests=tests)
    return str(flag) if flag else ""


_ONCE: dict[tuple[str, str], tuple[bool, str]] = {}
_ONCE_LOCKS: dict[tuple[str, str], threading.Lock] = {}
_ONCE_GUARD = threading.Lock()


def _once(kind: str, instance: Instance, cfg: SandboxConfig,
          compute: Callable[[], tuple[bool, str]]) -> tuple[bool, str]:
    """`compute()` once per (kind, instance, environment, backend) in a process, across threads."""
    key = (kind, hashlib.sha256(json.dumps([instance.to_row(), cfg.backend, cfg.docker_image, cfg.junit,
                                            cfg.canaries, cfg.variant_tests, cfg.python_fallback],
                                           sort_keys=True, default=str).encode()).hexdigest())
    with _ONCE_GUARD:
        lock = _ONCE_LOCKS.setdefault(key, threading.Lock())
    with lock:
        if key not in _ONCE:
            _ONCE[key] = compute()
        return _ONCE[key]


ENVIRONMENT_TIMEOUT_FLOOR_S = 120.0
"""The least time the environment's own runs get (the control run without a patch, the gold
check). They ask whether the environment runs the suite, and reproduces the instance, at all, so
they must not inherit a budget set for the patched run: with a short `sandbox.test_timeout_s` on a
busy machine, an unpatched suite that merely started slowly read as a broken environment, and a
patch that hung the tests became "no sample" instead of a failure. More time here can only turn
"no sample" into a graded failure, never a patch's failure into a pass."""


def environment_cfg(cfg: SandboxConfig) -> SandboxConfig:
    """`cfg` for the environment's own runs: the test timeout at least ENVIRONMENT_TIMEOUT_FLOOR_S."""
    return dataclasses.replace(cfg, test_timeout_s=max(cfg.test_timeout_s, ENVIRONMENT_TIMEOUT_FLOOR_S))


def control_run(instance: Instance, cfg: SandboxConfig, repo_store: str | Path) -> tuple[bool, str]:
    """Do the instance's tests run at all without a model patch? (ran, why not)."""
    def compute() -> tuple[bool, str]:
        run = _attempt(instance, "", environment_cfg(cfg), repo_store).run
        assert run is not None  # with no patch to apply, `_attempt` runs the tests or raises
        verdict = judge(instance, run, junit=uses_junit(instance, cfg))
        return verdict.ran, verdict.not_run_reason
    return _once("control", instance, cfg, compute)


def gold_check(instance: Instance, cfg: SandboxConfig, repo_store: str | Path,
               report: GradeReport | None = None) -> tuple[bool, str]:
    """Does the instance's gold patch resolve it in this environment? (resolved, why not). A
    report of the gold patch itself, when given, is the answer (and is remembered)."""
    def compute() -> tuple[bool, str]:
        gold = report or grade(instance, instance.patch, dataclasses.replace(environment_cfg(cfg), gold_check=False),
                               repo_store)
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
