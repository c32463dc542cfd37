"""Grade a patch the way SWE-bench does, and fail closed.

Steps, each in a fresh sandbox at the base commit (nothing of the agent's sandbox survives but the
patch text):
1. apply the model patch: `git apply`, then `git apply --3way`, then `patch --batch --fuzz=5 -p1`
   (the method is recorded); a patch touching `.git/` is refused;
2. reset *protected* files to the base (`git checkout <base> -- f`, or delete them where the base
   lacks them): every file the test patch touches, and every `conftest.py` the model patch touches;
3. apply the test patch; run `env.test_cmd + test files` (an instance with an `eval_script` on the
   docker backend runs that script instead) and parse the log;
4. FAIL_TO_PASS / PASS_TO_PASS results and SWE-bench's FULL / PARTIAL / NO resolution.

Fail-closed rules beyond SWE-bench (each has a regression test in tests/test_grading_*.py):
- a test passes only with status PASSED or XFAIL; missing, SKIPPED, FAILED and ERROR all fail,
  for P2P as for F2P (SWE-bench leaves skipped tests out of both lists);
- the pytest exit code must agree with the log: 0 with any failure, 1 with none, or any other code
  (interrupted, internal error, no tests) makes every test of the run count as failed;
- pytest also writes a junit XML report to a fresh directory outside the working copy, in the
  grading sandbox's private temp dir (`-p no:cacheprovider` is in the default command); a test
  passes only if the junit report agrees. Printing fake "PASSED" lines therefore gains nothing.
  A patch that changes pytest's behaviour in-process could still forge both, which is why
  model-patch conftest.py changes are reset (a genuine fix that needs a conftest change loses;
  that trade-off is deliberate). The report's directory has a fixed name (`JUNIT_DIR`): pytest
  echoes it into the log, and logs must repeat between reruns; a random name would hide nothing
  from the tests, which see it in their own argv. The separator the report travels behind in the
  output stays random.
- infrastructure failures (repository or environment missing, the sandbox failing, the test patch
  not applying to the base) set `infra_failure` with a reason: "no sample", never a 0 reward;
- a test run that times out is *not* an infrastructure failure: as in SWE-bench, the patch is
  graded on what the log shows, and the contradicting exit code fails every test. Otherwise a
  patch that hangs the tests would escape its 0 reward by being dropped as "no sample".

Simplifications: FAIL_TO_FAIL and PASS_TO_FAIL are reported empty (instances here carry no such
lists). The eval-script path trusts the script's own markers and skips the exit-code/junit checks.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import shlex
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from sandbox.base import SandboxError
from sandbox.logparse import OK, junit_key, junit_statuses, parse_log
from swe_rlvr.instances import patch_files

GRADING_OUTPUT_BYTES = 16 << 20
EXCERPT_CHARS = 4000
PATCH_FILE = ".git/swe-rlvr-model.patch"
TEST_PATCH_FILE = ".git/swe-rlvr-test.patch"
JUNIT_DIR = "${TMPDIR:-/tmp}/swe-rlvr-grade"
"""Where pytest writes its junit report: outside the working copy, fixed (see the docstring)."""
GIT = "git -c core.hooksPath=/dev/null -c core.fsmonitor=false"
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
    infra_failure: bool = False
    infra_reason: str = ""
    log: str = ""
    notes: tuple[str, ...] = ()
    duration_s: float = 0.0

    def to_row(self) -> dict:
        """One `validations.parquet` row (exactly the VALIDATIONS columns)."""
        return {"episode_id": self.episode_id, "instance_id": self.instance_id,
                "patch_applied": self.patch_applied, "apply_method": self.apply_method,
                "tests_status_json": json.dumps(self.tests_status, sort_keys=True),
                "f2p_passed": list(self.f2p_passed), "f2p_failed": list(self.f2p_failed),
                "p2p_passed": list(self.p2p_passed), "p2p_failed": list(self.p2p_failed),
                "resolution": self.resolution, "resolved": self.resolved,
                "infra_failure": self.infra_failure, "infra_reason": self.infra_reason,
                "log_excerpt": excerpt("".join(f"[grader] {n}\n" for n in self.notes) + self.log), "duration_s": self.duration_s}

    def to_swebench(self) -> dict:
        """The entry of SWE-bench's per-instance report.json."""
        lists = lambda ok, bad: {"success": list(ok), "failure": list(bad)}  # noqa: E731
        return {self.instance_id: {
            "patch_is_None": not self.patch_exists, "patch_exists": self.patch_exists,
            "patch_successfully_applied": self.patch_applied, "resolved": self.resolved,
            "tests_status": {"FAIL_TO_PASS": lists(self.f2p_passed, self.f2p_failed),
                             "PASS_TO_PASS": lists(self.p2p_passed, self.p2p_failed),
                             "FAIL_TO_FAIL": lists((), ()), "PASS_TO_FAIL": lists((), ())}}}


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


# --------------------------------------------------------------------------- steps


def _grade(instance, model_patch: str, cfg, repo_store, report: GradeReport) -> GradeReport:
    from sandbox import open_sandbox
    cfg = dataclasses.replace(cfg, output_limit_bytes=max(cfg.output_limit_bytes, GRADING_OUTPUT_BYTES))
    with open_sandbox(instance, cfg, repo_store) as sb:
        notes: list[str] = []
        if report.patch_exists:
            method, apply_log = apply_model_patch(sb, model_patch)
            if not method:
                return dataclasses.replace(report, log=apply_log, f2p_failed=instance.fail_to_pass,
                                           p2p_failed=instance.pass_to_pass)
            report = dataclasses.replace(report, patch_applied=True, apply_method=method)
            notes += reset_protected_note(instance, model_patch)
        prepare_tests(sb, instance, model_patch if report.patch_applied else "")
        statuses, log, run_notes = run_tests(sb, instance, cfg)
    return score(instance, report, statuses, log, tuple(notes + run_notes))


def apply_model_patch(sb, patch: str) -> tuple[str, str]:
    """Apply with the first method that works: (method, log), or ("", log of every attempt)."""
    bad = [f for f in patch_files(patch) if f == ".git" or f.startswith(".git/") or "/.git/" in f]
    if bad:
        return "", f"Refused: the patch writes inside .git ({', '.join(bad)})."
    sb.write_file(PATCH_FILE, patch if patch.endswith("\n") else patch + "\n")
    logs = []
    for method, cmd in APPLY_METHODS:
        result = sb.execute(cmd, timeout=120)
        if result.exit_code == 0:
            return method, result.output
        logs.append(f"$ {cmd}\n{result.output}")
        sb.execute(f"{GIT} checkout -- . && {GIT} clean -fdq -e .git", timeout=120)
    return "", "Patch failed to apply:\n" + "\n".join(logs)


def protected_files(instance, model_patch: str) -> list[str]:
    """Files reset to the base before the test patch: the test patch's, and model-touched conftests."""
    conftests = sorted(f for f in patch_files(model_patch) if f.rsplit("/", 1)[-1] == "conftest.py")
    return list(dict.fromkeys(list(instance.test_files()) + conftests))


def reset_protected_note(instance, model_patch: str) -> list[str]:
    touched = set(patch_files(model_patch))
    reset = [f for f in protected_files(instance, model_patch) if f in touched]
    return [f"reset to base: {', '.join(reset)}"] if reset else []


def prepare_tests(sb, instance, model_patch: str) -> None:
    """One command: reset protected files to the base (deleting ones it lacks), apply the test patch."""
    lines = ["set -e", f"base=$({GIT} rev-parse HEAD)"]
    for f in map(shlex.quote, protected_files(instance, model_patch)):
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


def run_tests(sb, instance, cfg) -> tuple[dict[str, str], str, list[str]]:
    """Run the tests; statuses failed closed against the exit code and the junit report."""
    if instance.env.eval_script and cfg.backend == "docker":
        result = _run(sb, instance.env.eval_script, cfg)
        return parse_log(result.output, instance.log_parser), result.output, ["ran eval_script"]
    files = " ".join(shlex.quote(f) for f in instance.test_files() if f.endswith(".py"))
    existing = f"$(for f in {files}; do [ -e \"$f\" ] && printf '%s ' \"$f\"; done)" if files else ""
    is_pytest = instance.log_parser == "pytest" and "pytest" in instance.env.test_cmd
    use_junit = cfg.junit and is_pytest
    token = secrets.token_hex(16)
    junit = f" --junitxml={JUNIT_DIR}/junit.xml" if use_junit else ""
    cmd = f"rm -rf {JUNIT_DIR}; mkdir -p {JUNIT_DIR}; {instance.env.test_cmd}{junit} {existing}"
    if use_junit:  # the report travels after a random separator, in the same command
        cmd += f"\ncode=$?; echo; echo {token}; cat {JUNIT_DIR}/junit.xml 2>/dev/null; exit $code"
    result = _run(sb, cmd, cfg)
    log, _, xml = result.output.rpartition(f"\n{token}\n") if use_junit else ("", "", "")
    log = log if use_junit else result.output
    statuses, notes = parse_log(log, instance.log_parser), []
    if is_pytest:
        statuses, notes = check_exit_code(statuses, result.exit_code)
    if use_junit:
        statuses, more = cross_check_junit(statuses, xml)
        notes += more
    if result.timed_out:
        notes.append(f"the test run timed out after {cfg.test_timeout_s:.0f} s "
                     "(sandbox.test_timeout_s): every test it did not finish fails")
    return statuses, log, notes


def _run(sb, cmd: str, cfg):
    return sb.execute(cmd, timeout=cfg.test_timeout_s)


def check_exit_code(statuses: dict[str, str], exit_code: int) -> tuple[dict[str, str], list[str]]:
    """Fail every test when pytest's exit code contradicts the log (see the module docstring)."""
    failures = any(s not in OK and s != "SKIPPED" for s in statuses.values())
    consistent = (exit_code == 0 and not failures and statuses) or (exit_code == 1 and failures)
    if consistent:
        return statuses, []
    note = f"exit code {exit_code} contradicts the log ({len(statuses)} tests, failures={failures})"
    return {t: "FAILED" for t in statuses}, [note]


def cross_check_junit(statuses: dict[str, str], xml_text: str) -> tuple[dict[str, str], list[str]]:
    """A test passes only if the junit report says so too; no readable report fails them all."""
    try:
        junit = junit_statuses(xml_text) if xml_text.strip() else None
    except Exception:  # noqa: BLE001 - any unreadable report means: trust nothing
        junit = None
    if junit is None:
        return {t: "FAILED" for t in statuses}, ["no readable junit report: every test failed"]
    out, disagree = {}, []
    for test, status in statuses.items():
        other = junit.get(junit_key(test))
        if status in OK and (other is None or other not in OK) and "::" in test:
            out[test] = "FAILED"
            disagree.append(test)
        else:
            out[test] = status
    return out, [f"junit disagrees on {len(disagree)} tests: {disagree[:5]}"] if disagree else []


def score(instance, report: GradeReport, statuses: dict[str, str], log: str,
          notes: tuple[str, ...]) -> GradeReport:
    """F2P/P2P lists and SWE-bench's resolution from the parsed statuses."""
    passed = lambda t: statuses.get(t) in OK  # noqa: E731 - missing and skipped fail
    f2p_ok = tuple(t for t in instance.fail_to_pass if passed(t))
    f2p_bad = tuple(t for t in instance.fail_to_pass if not passed(t))
    p2p_ok = tuple(t for t in instance.pass_to_pass if passed(t))
    p2p_bad = tuple(t for t in instance.pass_to_pass if not passed(t))
    resolution = resolution_status(len(f2p_ok), len(f2p_bad), len(p2p_ok), len(p2p_bad))
    resolved = resolution == "FULL" and report.patch_applied
    return dataclasses.replace(
        report, tests_status=statuses, f2p_passed=f2p_ok, f2p_failed=f2p_bad, p2p_passed=p2p_ok,
        p2p_failed=p2p_bad, resolution=resolution if report.patch_applied else "NO",
        resolved=resolved, log=log, notes=notes)


def resolution_status(f2p_ok: int, f2p_bad: int, p2p_ok: int, p2p_bad: int) -> str:
    """SWE-bench's ResolvedStatus: FULL if both rates are 1, PARTIAL if 0 < F2P < 1 with P2P 1."""
    f2p = f2p_ok / (f2p_ok + f2p_bad) if f2p_ok + f2p_bad else 1.0
    p2p = p2p_ok / (p2p_ok + p2p_bad) if p2p_ok + p2p_bad else 1.0
    if f2p == 1 and p2p == 1:
        return "FULL"
    if 0 < f2p < 1 and p2p == 1:
        return "PARTIAL"
    return "NO"


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
