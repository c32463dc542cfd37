"""Driving `swe-rlvr grade` with hostile input: the instance file, prediction rows, the command.

`calc` is the small real instance of test_sandbox_support and an instance file holding it;
`pred` makes a prediction row for it (the gold patch unless told otherwise), `rows_file` writes
rows as JSON lines, `grade` runs the CLI's grade command into `<tmp_path>/out`, and `report_of`
reads back one instance's report.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from swe_rlvr.cli import main
from test_sandbox_support import make_instance, sandbox_config


@pytest.fixture
def calc(store, tmp_path):
    """The small real instance of test_sandbox_support, and an instance file holding it."""
    inst = make_instance(store)
    path = tmp_path / "instances.jsonl"
    path.write_text(json.dumps(inst.to_row()) + "\n")
    return inst, path


def rows_file(tmp_path: Path, rows: list, name: str = "preds.jsonl") -> Path:
    """JSON lines; a str item is written as the line itself (to plant lines that are not JSON)."""
    path = tmp_path / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def pred(inst, model: str = "org/m", patch: str | None = None, **changes) -> dict:
    row = {"instance_id": inst.instance_id, "model_name_or_path": model,
           "model_patch": inst.patch if patch is None else patch}
    row.update(changes)
    return row


def grade(tmp_path: Path, store: Path, instances: Path, predictions: Path, *extra: str,
          run_id: str = "r1") -> int:
    cfg = sandbox_config(tmp_path)
    return main(["grade", "--instances", str(instances), "--predictions", str(predictions),
                 "--repos", str(store), "--workers", "1", "--out", str(tmp_path / "out"),
                 f"--run-id={run_id}", f"sandbox.workdir={cfg.workdir}", *extra])


def report_of(tmp_path: Path, model_dir: str, inst) -> dict:
    path = tmp_path / "out" / "r1" / model_dir / inst.instance_id / "report.json"
    return json.loads(path.read_text())[inst.instance_id]
