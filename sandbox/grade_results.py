"""The run directory of `swe-rlvr grade`: `<out>/<run_id>/`, SWE-bench's harness layout (see
`sandbox.cli`), written so that bad input never destroys data.

`grade` writes and deletes only inside `<out>/<run_id>/`: the run id is one path component
(`swe_rlvr.instances.name_problem`), and nothing is followed out of the directory through a
symbolic link: a linked run directory is refused, a linked model directory is unlinked (never its
target), and files are replaced, not written through; a model's old results go only once its new
ones are complete.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from sandbox.grade_report import GradeReport, summary
from sandbox.predictions import SKIPPED_FILE, Prediction, SkippedRow
from swe_rlvr.instances import name_problem


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


def write_results(run_dir: Path, run_id: str, predictions: list[Prediction], reports: list[GradeReport],
                  skipped: Sequence[SkippedRow] = ()) -> None:
    """Each graded model's results and summary, `validations.parquet` (when anything was graded)
    and the skipped rows; a model's old results are replaced only once its new ones are written,
    and a model none of whose rows was graded keeps its old ones."""
    import io

    import pyarrow.parquet as pq

    from swe_rlvr import artifacts
    run_dir.mkdir(parents=True, exist_ok=True)
    for model in sorted({p.model for p in predictions}):
        graded = [(p, r) for p, r in zip(predictions, reports) if p.model == model]
        _replace_dir(run_dir / model, functools.partial(_write_model, graded=graded))
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


def _write_model(folder: Path, graded: list[tuple[Prediction, GradeReport]]) -> None:
    for pred, report in graded:
        out = folder / pred.instance_id
        out.mkdir()
        (out / "report.json").write_bytes(_utf8(json.dumps(report.to_swebench(), indent=2)))
        (out / "test_output.txt").write_bytes(_utf8(report.log or report.infra_reason))
        (out / "patch.diff").write_bytes(_utf8(pred.patch))


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", errors="replace")


def _replace_dir(path: Path, fill: Callable[[Path], None]) -> None:
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
