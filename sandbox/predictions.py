"""The predictions file of `swe-rlvr grade`: SWE-bench's JSON lines (or a JSON list, or a mapping of
rows) of instance_id, model_name_or_path and model_patch, or 'gold' for each instance's own patch.

Each prediction row is checked on its own; a bad one (not JSON, a missing or mistyped field, an id
that is no safe file name or not in the instance file, a repeat) is reported on stderr, in
`skipped_predictions.json` and in its model's summary, and skipped; the other rows are graded, and
the exit status is 1. The model names (with "/" as "__", SWE-bench's rule) and the instance ids are
each one path component (`swe_rlvr.instances.name_problem`), so no path leaves the run directory.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swe_rlvr.formats.fields import describe
from swe_rlvr.instances import Instance, name_problem

SKIPPED_FILE = "skipped_predictions.json"
"""The run's list of the prediction rows that were skipped, and why (`[]` when none)."""
RUN_FILE_SUFFIXES = (".json", ".parquet")
"""The run directory's own files end so; a model directory may not, or the two would collide."""


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

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(problem)
        self.field, self.problem = field, problem


def read_predictions(path: str, instances: Mapping[str, Instance], only: set[str]
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


def _prediction(where: str, row: Any, instances: Mapping[str, Instance], only: set[str],
                claims: _Claims) -> Prediction | None:
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


def _prediction_id(row: dict[str, Any]) -> str:
    ident = row.get("instance_id")
    if ident is None:
        raise _BadRow("instance_id", "is missing; every prediction names the instance it fixes")
    if not isinstance(ident, str):
        raise _BadRow("instance_id", f"must be a string, got {describe(ident)}")
    problem = name_problem(ident)
    if problem:
        raise _BadRow("instance_id", problem)
    return ident


def _prediction_patch(row: dict[str, Any]) -> str:
    if "model_patch" not in row:
        raise _BadRow("model_patch", "is missing; give the patch as a unified diff (\"\" or null "
                                     "for none)")
    patch = row["model_patch"]
    if patch is None:
        return ""
    if not isinstance(patch, str):
        raise _BadRow("model_patch", f"must be a string (a unified diff) or null, got "
                                     f"{describe(patch)}")
    if not patch.isascii() and any(0xD800 <= ord(c) <= 0xDFFF for c in patch):
        raise _BadRow("model_patch", "holds a lone surrogate (\\ud800-\\udfff), which is no "
                                     "text a file can hold; write the diff as UTF-8")
    return patch


def _model_dir(row: dict[str, Any]) -> str:
    """The results directory of the row's model; SWE-bench writes "org/model" as "org__model"."""
    name = row.get("model_name_or_path")
    if name is None:
        return "model"
    if not isinstance(name, str):
        raise _BadRow("model_name_or_path", f"must be a string, got {describe(name)}")
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
