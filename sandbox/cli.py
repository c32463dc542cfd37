"""`swe-rlvr grade` and `swe-rlvr sandbox sweep`.

`grade` follows SWE-bench's harness layout: `<out>/<run_id>/<model>/<instance_id>/` holds
`report.json`, `test_output.txt` and `patch.diff`, and `<out>/<run_id>/<model>.<run_id>.json` the run
summary; `validations.parquet` beside them holds one VALIDATIONS row per graded instance.
Re-grading under the same run id replaces that model's previous results, so nothing stale
survives.

Bad input never destroys data, and `grade` writes and deletes only inside `<out>/<run_id>/`:
- each prediction row is checked on its own; a bad one (not JSON, a missing or mistyped field, an
  id that is no safe file name or not in the instance file, a repeat) is reported on stderr, in
  `skipped_predictions.json` and in its model's summary, and skipped; the other rows are graded,
  and the exit status is 1;
- the run id, the model names (with "/" as "__", SWE-bench's rule) and the instance ids are each
  one path component (`swe_rlvr.instances.name_problem`), so no path leaves the run directory;
- nothing is followed out of it through a symbolic link: a linked run directory is refused, a
  linked model directory is unlinked (never its target), and files are replaced, not written
  through; a model's old results go only once its new ones are complete.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swe_rlvr.instances import name_problem

SKIPPED_FILE = "skipped_predictions.json"
"""The run's list of the prediction rows that were skipped, and why (`[]` when none)."""
RUN_FILE_SUFFIXES = (".json", ".parquet")
"""The run directory's own files end so; a model directory may not, or the two would collide."""


def register(sub) -> None:
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
    grade.add_argument("--config", default=None, help="YAML config (its sandbox section applies)")
    grade.add_argument("--set", dest="overrides", action="append", default=[],
                       help="config override, e.g. sandbox.isolation=pgroup")
    grade.set_defaults(handler=grade_command)

    sandbox = sub.add_parser("sandbox", help="sandbox maintenance")
    sandbox_sub = sandbox.add_subparsers(dest="sandbox_command", metavar="COMMAND")
    sandbox_sub.required = True
    sweep = sandbox_sub.add_parser("sweep", help="remove leaked working copies and processes")
    sweep.add_argument("--older-than", type=float, default=None,
                       help="also remove copies older than this many seconds, live owner or not")
    sweep.add_argument("--workdir", default="", help="sandbox root (default: sandbox.workdir)")
    sweep.add_argument("--config", default=None)
    sweep.set_defaults(handler=sweep_command)


def grade_command(args) -> int:
    from sandbox.grading import grade_many
    from swe_rlvr.config import load_config
    cfg = load_config(args.config, args.overrides)
    sandbox_cfg = cfg.sandbox if args.backend is None else _with(cfg.sandbox, backend=args.backend)
    run_dir = results_dir(Path(args.out), args.run_id)
    instances = {i.instance_id: i
                 for i in load_instance_file(args.instances, cfg.instances.skip_invalid)}
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


def outcome(report) -> str:
    """One word for a report: resolved, unresolved, infra, empty or not-applied."""
    if report.infra_failure:
        return "infra"
    if not report.patch_exists:
        return "empty"
    if not report.patch_applied:
        return "not-applied"
    return "resolved" if report.resolved else "unresolved"


def why(report) -> str:
    """Why a report is what it is: the infra reason, or the guards, failing tests and notes."""
    if report.infra_failure:
        return report.infra_reason.splitlines()[0] if report.infra_reason else ""
    parts = [g.split(":")[0] + " guard" for g in report.guards]
    failed = report.f2p_failed + report.p2p_failed
    if failed and not report.resolved:
        parts.append(f"failed: {', '.join(failed[:2])}{', ...' if len(failed) > 2 else ''}")
    parts += list(report.notes)
    return "; ".join(parts)


def grade_table(reports) -> str:
    """A row per instance (outcome, F2P and P2P passed/total, SWE-bench's own verdict, seconds, why)
    and a totals line."""
    def count(ok, bad):
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


def _with(section, **changes):
    import dataclasses
    return dataclasses.replace(section, **changes)


def load_instance_file(path: str, skip_invalid: bool = False) -> list:
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


# --------------------------------------------------------------------------- predictions


@dataclass(frozen=True)
class Prediction:
    """One valid row of a predictions file."""

    where: str
    """The row in messages: "line 3" of JSON lines, "entry 3" of a JSON list or mapping."""
    instance_id: str
    model: str
    """The row's results directory: `model_name_or_path` with "/" as "__" (SWE-bench's rule),
    "model" when the row names none."""
    patch: str


@dataclass(frozen=True)
class SkippedRow:
    """A prediction row that was not graded, and why."""

    where: str
    field: str
    """The offending field ("" when the row itself is unreadable)."""
    message: str
    """The whole story: the row, the field, what is wrong and the fix."""
    model: str = ""
    """The row's results directory, where its model name is valid (its summary lists the row)."""


class _BadRow(Exception):
    """A prediction row is wrong: `problem` completes "field 'x' ..." (or "line 3 ...")."""

    def __init__(self, field: str, problem: str):
        super().__init__(problem)
        self.field, self.problem = field, problem


def read_predictions(path: str, instances: dict, only: set[str]
                     ) -> tuple[list[Prediction], list[SkippedRow]]:
    """The valid rows (of `only`'s ids, when given) and the skipped ones; 'gold' means each
    instance's own gold patch. Only an unreadable file raises."""
    if path == "gold":
        rows = [(f"instance {i!r}", {"instance_id": i, "model_name_or_path": "gold",
                                     "model_patch": inst.patch}) for i, inst in instances.items()]
    else:
        rows = _read_rows(Path(path))
    good: list[Prediction] = []
    skipped: list[SkippedRow] = []
    claims = _Claims()
    for where, row in rows:
        try:
            prediction = _prediction(where, row, instances, only, claims)
        except _BadRow as bad:
            said = f": field {bad.field!r} {bad.problem}" if bad.field else f" {bad.problem}"
            skipped.append(SkippedRow(where, bad.field, where + said, _model_or_blank(row)))
            continue
        if prediction is not None:
            good.append(prediction)
    return good, skipped


def _prediction(where: str, row: Any, instances: dict, only: set[str],
                claims: "_Claims") -> Prediction | None:
    """`row` checked, or None when --ids leaves it out."""
    if isinstance(row, _BadRow):
        raise row
    if not isinstance(row, dict):
        raise _BadRow("", f"is a {type(row).__name__}, not an object; each prediction must be a "
                          f"JSON object with instance_id, model_name_or_path and model_patch")
    ident = _prediction_id(row)
    if only and ident not in only:
        return None
    if ident not in instances:
        raise _BadRow("instance_id", f"is {ident!r}, which is not in the instance file; pass the "
                                     f"matching --instances file, or drop the row")
    model, patch = _model_dir(row), _prediction_patch(row)
    claims.take(where, row.get("model_name_or_path"), model, ident)
    return Prediction(where, ident, model, patch)


def _prediction_id(row: dict) -> str:
    ident = row.get("instance_id")
    if ident is None:
        raise _BadRow("instance_id", "is missing; every prediction names the instance it fixes")
    if not isinstance(ident, str):
        raise _BadRow("instance_id", f"must be a string, got {_kind(ident)}")
    problem = name_problem(ident)
    if problem:
        raise _BadRow("instance_id", problem)
    return ident


def _prediction_patch(row: dict) -> str:
    if "model_patch" not in row:
        raise _BadRow("model_patch", "is missing; give the patch as a unified diff (\"\" or null "
                                     "for none)")
    patch = row["model_patch"]
    if patch is None:
        return ""
    if not isinstance(patch, str):
        raise _BadRow("model_patch", f"must be a string (a unified diff) or null, got "
                                     f"{_kind(patch)}")
    if not patch.isascii() and any(0xD800 <= ord(c) <= 0xDFFF for c in patch):
        raise _BadRow("model_patch", "holds a lone surrogate (\\ud800-\\udfff), which is no "
                                     "text a file can hold; write the diff as UTF-8")
    return patch


def _model_dir(row: dict) -> str:
    """The results directory of the row's model; SWE-bench writes "org/model" as "org__model"."""
    name = row.get("model_name_or_path")
    if name is None:
        return "model"
    if not isinstance(name, str):
        raise _BadRow("model_name_or_path", f"must be a string, got {_kind(name)}")
    folder = name.replace("/", "__")
    problem = name_problem(folder)  # "/" is gone, and the name's other flaws stay in `folder`
    if not problem and folder.endswith(RUN_FILE_SUFFIXES):
        problem = (f"is {name!r}, which ends like the run's own files "
                   f"({', '.join(RUN_FILE_SUFFIXES)}); rename the model")
    if problem:
        raise _BadRow("model_name_or_path", problem)
    return folder


def _model_or_blank(row: Any) -> str:
    try:
        return _model_dir(row) if isinstance(row, dict) else ""
    except _BadRow:
        return ""


class _Claims:
    """The rows taken so far: a second prediction for one (model, instance), or a second model
    name for one directory ("org/m" and "org__m"), would overwrite the first row's results."""

    def __init__(self) -> None:
        self.owners: dict[str, tuple[Any, str]] = {}
        self.rows: dict[tuple[str, str], str] = {}

    def take(self, where: str, name: Any, model: str, ident: str) -> None:
        owner, first = self.owners.setdefault(model, (name, where))
        if owner != name:
            raise _BadRow("model_name_or_path", f"is {name!r}, whose results directory {model!r} "
                                                f"is already {owner!r}'s ({first}); rename one")
        first = self.rows.setdefault((model, ident), where)
        if first != where:
            raise _BadRow("instance_id", f"repeats {first} (instance {ident!r}, model {name!r}); "
                                         f"keep one prediction per instance and model")


def _kind(value: Any) -> str:
    shown = repr(value)
    return f"{type(value).__name__} {shown if len(shown) <= 40 else shown[:37] + '...'}"


def _read_rows(path: Path) -> list[tuple[str, Any]]:
    """(where, row) pairs of a JSON list, a JSON mapping of rows (SWE-bench's .json form) or JSON
    lines; a line that is not JSON becomes a `_BadRow`, so it is skipped alone."""
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise FileNotFoundError(f"Predictions file {str(path)!r} does not exist; pass a JSONL or "
                                f"JSON file of predictions, or 'gold'.") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"Predictions file {str(path)!r} is not UTF-8 text ({exc}); write it as "
                         f"JSON lines.") from None
    whole = _whole_json(path, text)
    if isinstance(whole, list):
        return [(f"entry {n}", row) for n, row in enumerate(whole, start=1)]
    if isinstance(whole, dict) and whole and all(isinstance(v, dict) for v in whole.values()):
        return [(f"entry {n}", row) for n, row in enumerate(whole.values(), start=1)]
    if isinstance(whole, dict):
        return [("line 1", whole)]  # one row, on one line or pretty-printed
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            rows.append((f"line {number}", _json_line(line)))
    return rows


def _whole_json(path: Path, text: str) -> Any:
    """The file as one JSON value, or None when it is JSON lines."""
    start = text.lstrip()[:1]
    if start not in ("[", "{"):
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        if start == "[":
            raise ValueError(f"Predictions file {str(path)!r} is not valid JSON: {exc}.") from None
        return None  # "{...}\n{...}": JSON lines


def _json_line(line: str) -> Any:
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        return _BadRow("", f"is not JSON ({exc}); write one JSON object per line")


def report_skipped(source: str, skipped: list[SkippedRow], run_dir: Path, shown: int = 50) -> None:
    """The skipped rows on stderr (the first `shown`; all of them go to SKIPPED_FILE)."""
    if not skipped:
        return
    print(f"skipped {len(skipped)} prediction row(s) of {source}; the others are graded:",
          file=sys.stderr)
    for row in skipped[:shown]:
        print(f"  {row.message}", file=sys.stderr)
    if len(skipped) > shown:
        print(f"  ... and {len(skipped) - shown} more, all in {run_dir / SKIPPED_FILE}",
              file=sys.stderr)


# --------------------------------------------------------------------------- results


def results_dir(out: Path, run_id: str) -> Path:
    """`<out>/<run_id>`, made before any grading, and refused unless it is a directory of `out`'s
    own (so a bad --out or --run-id costs a second, not the run's grades)."""
    problem = name_problem(run_id)
    if problem:
        raise ValueError(f"--run-id {problem}.")
    run_dir = out / run_id
    if run_dir.is_symlink():
        raise ValueError(f"{run_dir} is a symbolic link (to {os.readlink(run_dir)}), and grade "
                         f"writes only inside --out; remove the link, or pass another --run-id.")
    for path in (out, run_dir):
        if path.exists() and not path.is_dir():
            raise ValueError(f"{path} is a file, not a directory; pass another --out or --run-id.")
    run_dir.mkdir(parents=True, exist_ok=True)
    return run_dir


def write_results(run_dir: Path, run_id: str, predictions: list[Prediction], reports: list,
                  skipped: list[SkippedRow] = ()) -> None:
    """Each graded model's results and summary, `validations.parquet` (when anything was graded)
    and the skipped rows; a model's old results are replaced only once its new ones are written,
    and a model none of whose rows was graded keeps its old ones."""
    import io

    import pyarrow.parquet as pq

    from sandbox.grading import summary
    from swe_rlvr import artifacts
    run_dir.mkdir(parents=True, exist_ok=True)
    for model in sorted({p.model for p in predictions}):
        graded = [(p, r) for p, r in zip(predictions, reports) if p.model == model]
        _replace_dir(run_dir / model, lambda new: _write_model(new, graded))
        bad = [dataclasses.asdict(s) for s in skipped if s.model == model]
        data = {**summary([r for _, r in graded], submitted=len(graded) + len(bad)),
                "skipped_rows": bad}
        _replace_file(run_dir / f"{model}.{run_id}.json", json.dumps(data, indent=2).encode())
    _replace_file(run_dir / SKIPPED_FILE,
                  json.dumps([dataclasses.asdict(s) for s in skipped], indent=2).encode())
    if reports:
        buffer = io.BytesIO()
        pq.write_table(artifacts.table("validations", [r.to_row() for r in reports]), buffer)
        _replace_file(run_dir / "validations.parquet", buffer.getvalue())


def _write_model(folder: Path, graded: list) -> None:
    for pred, report in graded:
        out = folder / pred.instance_id
        out.mkdir()
        (out / "report.json").write_bytes(_utf8(json.dumps(report.to_swebench(), indent=2)))
        (out / "test_output.txt").write_bytes(_utf8(report.log or report.infra_reason))
        (out / "patch.diff").write_bytes(_utf8(pred.patch))


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", errors="replace")


def _replace_dir(path: Path, fill) -> None:
    """Fill a new directory beside `path`, then put it in `path`'s place: a link or file there is
    unlinked (never its target), an old directory removed only after the new one is complete."""
    new = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        fill(new)
        if path.is_symlink() or path.is_file():
            path.unlink()
        elif path.is_dir():
            old = Path(tempfile.mkdtemp(prefix=f".{path.name}.old.", dir=path.parent))
            path.rename(old / path.name)
            shutil.rmtree(old)
        new.rename(path)
    finally:
        if new.exists():
            shutil.rmtree(new)


def _replace_file(path: Path, data: bytes) -> None:
    """Write `data` to a new file and rename it over `path`, so a link there is replaced, never
    written through, and a crash leaves the old file whole."""
    handle, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def sweep_command(args) -> int:
    from sandbox.workspace import sandbox_root, sweep
    from swe_rlvr.config import load_config
    workdir = args.workdir or load_config(args.config).sandbox.workdir
    removed = sweep(sandbox_root(workdir), older_than=args.older_than)
    print(f"removed {len(removed)} working copies" + (f": {', '.join(removed)}" if removed else ""))
    print(_sweep_containers(args.older_than))
    return 0


def _sweep_containers(older_than: float | None) -> str:
    """Labelled containers of dead owners (or all older than `older_than` s); engines are optional."""
    from sandbox.base import SandboxError
    from sandbox.docker import sweep_containers
    try:
        if older_than is None:
            count = sweep_containers(older_than_s=0, dead_owner_only=True)
        else:
            count = sweep_containers(older_than_s=older_than, dead_owner_only=False)
    except (SandboxError, ImportError) as exc:
        return f"docker containers not swept: {exc}"
    return f"removed {count} labelled docker containers"
