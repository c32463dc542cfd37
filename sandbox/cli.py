"""`swe-rlvr grade`, and the sandbox's part of `swe-rlvr sandbox sweep` (`swe_rlvr.sweep_cli`).

`grade` follows SWE-bench's harness layout: `<out>/<run_id>/<model>/<instance_id>/` holds
`report.json`, `test_output.txt` and `patch.diff`, and `<out>/<run_id>/<model>.<run_id>.json` the run
summary; `validations.parquet` beside them holds one VALIDATIONS row per graded instance.
Re-grading under the same run id replaces that model's previous results, so nothing stale
survives.

`grade` takes the dotted config overrides every command takes (`sandbox.isolation=pgroup`; the
old `--set KEY=VALUE` still works, with a warning) and grades every instance of the file that a
prediction names (`--split` narrows them to one split; records without a split are in `all`).

Bad input never destroys data, and `grade` writes and deletes only inside `<out>/<run_id>/`: each
prediction row is checked on its own and a bad one is skipped (`sandbox.predictions`), and no path
leaves the run directory, through a name or a symbolic link (`sandbox.grade_results`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sandbox.grade_report import GradeReport
from sandbox.grade_results import results_dir, write_results
from sandbox.predictions import SKIPPED_FILE, read_predictions, report_skipped
from swe_rlvr.instances import ALL, Instance, in_split, split_problem

if TYPE_CHECKING:
    from swe_rlvr.config import SandboxConfig


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    grade = sub.add_parser("grade", help="grade predictions (SWE-bench report.json per instance)")
    grade.add_argument("--instances", required=True, help="instance file, or 'builtin'")
    grade.add_argument("--predictions", required=True,
                       help="JSONL with instance_id, model_name_or_path, model_patch; or 'gold'")
    grade.add_argument("--backend", choices=("local", "docker"), default=None)
    grade.add_argument("--repos", default="", help="repo store (default: instances.repo_store "
                                                  "or <run_root>/.cache/repos)")
    grade.add_argument("--workers", type=int, default=4)
    grade.add_argument("--out", default="runs/grading", help="output directory")
    grade.add_argument("--run-id", default="grade", help="results go to <out>/<run-id>/")
    grade.add_argument("--ids", nargs="*", default=(), help="only these instance ids")
    grade.add_argument("--split", default=ALL, help="only instances of this split: train, test, "
                                                    "dev or all (default: all)")
    grade.add_argument("--config", default=None, help="YAML config (its sandbox section applies)")
    grade.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                       help="dotted config overrides, e.g. sandbox.isolation=pgroup")
    grade.add_argument("--set", dest="legacy_overrides", action="append", default=[],
                       help=argparse.SUPPRESS)  # deprecated: the positional KEY=VALUE
    grade.set_defaults(handler=grade_command)


def grade_command(args: argparse.Namespace) -> int:
    from sandbox.grading import grade_many
    from swe_rlvr.config import load_config
    if args.legacy_overrides:
        print("warning: `grade --set KEY=VALUE` is deprecated; pass KEY=VALUE alone, as every "
              "other command takes it", file=sys.stderr)
    cfg = load_config(args.config, [*args.overrides, *args.legacy_overrides])
    sandbox_cfg = cfg.sandbox if args.backend is None else _with(cfg.sandbox, backend=args.backend)
    run_dir = results_dir(Path(args.out), args.run_id)
    problem = split_problem(args.split, "--split")
    if problem:
        raise ValueError(problem)
    instances = {i.instance_id: i
                 for i in load_instance_file(args.instances, cfg.instances.skip_invalid)
                 if in_split(i, args.split)}
    predictions, skipped = read_predictions(args.predictions, instances, set(args.ids))
    report_skipped(args.predictions, skipped, run_dir)
    repos = args.repos or cfg.instances.repo_store or f"{cfg.orchestration.run_root}/.cache/repos"
    Path(repos).mkdir(parents=True, exist_ok=True)
    items = [(instances[p.instance_id], p.patch) for p in predictions]
    reports = grade_many(items, sandbox_cfg, repos, workers=args.workers)
    write_results(run_dir, args.run_id, predictions, reports, skipped)
    print(grade_table(reports))
    print(f"results in {run_dir}" + (f"; skipped {len(skipped)} prediction row(s), listed in "
                                     f"{run_dir / SKIPPED_FILE}" if skipped else ""))
    return 1 if skipped else 0


def outcome(report: GradeReport) -> str:
    """One word for a report: resolved, unresolved, infra, empty or not-applied."""
    if report.infra_failure:
        return "infra"
    if not report.patch_exists:
        return "empty"
    if not report.patch_applied:
        return "not-applied"
    return "resolved" if report.resolved else "unresolved"


def why(report: GradeReport) -> str:
    """Why a report is what it is: the infra reason, or the guards, failing tests and notes."""
    if report.infra_failure:
        return report.infra_reason.splitlines()[0] if report.infra_reason else ""
    parts = [g.split(":")[0] + " guard" for g in report.guards]
    failed = report.f2p_failed + report.p2p_failed
    if failed and not report.resolved:
        parts.append(f"failed: {', '.join(failed[:2])}{', ...' if len(failed) > 2 else ''}")
    parts += list(report.notes)
    return "; ".join(parts)


def grade_table(reports: Sequence[GradeReport]) -> str:
    """A row per instance (outcome, F2P and P2P passed/total, SWE-bench's own verdict, seconds, why)
    and a totals line."""
    def count(ok: Sequence[str], bad: Sequence[str]) -> str:
        return f"{len(ok)}/{len(ok) + len(bad)}"
    rows = [("instance", "outcome", "F2P", "P2P", "swebench", "s", "why")]
    for r in reports:
        rows.append((r.instance_id, outcome(r), count(r.f2p_passed, r.f2p_failed),
                     count(r.p2p_passed, r.p2p_failed),
                     "-" if r.infra_failure else ("resolved" if r.reference_resolved else "no"),
                     f"{r.duration_s:.0f}", why(r)[:160]))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1] for row in rows]
    words = [outcome(r) for r in reports]
    totals = ", ".join(f"{words.count(w)} {w}" for w in ("resolved", "unresolved", "infra", "empty",
                                                         "not-applied") if words.count(w))
    agree = sum(r.reference_resolved == r.resolved for r in reports if not r.infra_failure)
    lines.append(f"total {len(reports)}: {totals or 'nothing graded'}; SWE-bench's own verdict agrees on "
                 f"{agree}/{sum(not r.infra_failure for r in reports)}")
    return "\n".join(line.rstrip() for line in lines)


def _with(section: SandboxConfig, **changes: Any) -> SandboxConfig:
    import dataclasses
    return dataclasses.replace(section, **changes)


def load_instance_file(path: str, skip_invalid: bool = False) -> list[Instance]:
    """The instances of `path`; with `skip_invalid` (instances.skip_invalid) a malformed record is
    named on stderr and left out (its predictions are then skipped as unknown), else it stops
    the run."""
    try:
        from swe_rlvr.loaders import load_instances
    except ModuleNotFoundError:
        from swe_rlvr.builtin import load_builtin
        if path != "builtin":
            raise
        return load_builtin()
    result = load_instances(path, skip_invalid=skip_invalid)
    for bad in result.skipped:
        print(f"skipped instance record {bad.index} of {path}: {bad.message}", file=sys.stderr)
    return result.instances


def sweep_copies_report(workdir: str | None, older_than: float | None) -> str:
    """Remove the leaked working copies under the sandbox root `workdir` (of dead owners, and
    with `older_than` all older than that many seconds) and their processes; one line."""
    from sandbox.workspace import sandbox_root, sweep
    removed = sweep(sandbox_root(workdir), older_than=older_than)
    return f"removed {len(removed)} working copies" + (f": {', '.join(removed)}" if removed else "")


def sweep_containers_report(older_than: float | None) -> str:
    """Remove the labelled containers of dead owners (with `older_than`, all older than that many
    seconds); one line, which says so where no docker engine or SDK is there to ask."""
    from sandbox.base import SandboxError
    from sandbox.docker_container import docker_client
    from sandbox.docker_sweep import sweep_containers
    try:
        if older_than is None:
            count = sweep_containers(docker_client(), older_than_s=0, dead_owner_only=True)
        else:
            count = sweep_containers(docker_client(), older_than_s=older_than, dead_owner_only=False)
    except (SandboxError, ImportError) as exc:
        return f"docker containers not swept: {exc}"
    return f"removed {count} labelled docker containers"
