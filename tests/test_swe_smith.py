"""SWE-smith records: the stored patch introduces the bug, so the loader's gold patch is its
reverse, and the task branch is the base commit.

The records are small hand-made ones with real-looking fields; the bug and the fix are written by
hand and applied with real `git apply`.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from records_support import write_jsonl, write_parquet
from swe_rlvr.loaders import load_instances

# --------------------------------------------------------------------------- SWE-smith


CALC = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"

# Hand-written, as SWE-smith stores it: applying it *introduces* the bug in add().
BUG = "\n".join([
    "diff --git a/src/calc.py b/src/calc.py",
    "index 5e1c3a2..9b7d0f4 100644",
    "--- a/src/calc.py",
    "+++ b/src/calc.py",
    "@@ -1,5 +1,5 @@",
    " def add(a, b):",
    "-    return a + b",
    "+    return a - b",
    " ",
    " ",
    " def sub(a, b):",
    "",
])

# The same diff reversed by hand: the gold fix.
FIX = "\n".join([
    "diff --git a/src/calc.py b/src/calc.py",
    "index 9b7d0f4..5e1c3a2 100644",
    "--- a/src/calc.py",
    "+++ b/src/calc.py",
    "@@ -1,5 +1,5 @@",
    " def add(a, b):",
    "-    return a - b",
    "+    return a + b",
    " ",
    " ",
    " def sub(a, b):",
    "",
])


def smith_record(**changes) -> dict:
    record = {
        "instance_id": "demo__calc.5e1c3a2f.func_pm_op_swap__k3j2x9q1",
        "repo": "swesmith/demo__calc.5e1c3a2f", "patch": BUG,
        "FAIL_TO_PASS": ["tests/test_calc.py::test_add"],
        "PASS_TO_PASS": ["tests/test_calc.py::test_sub"],
        "image_name": "jyangballin/swesmith.x86_64.demo_1776_calc.5e1c3a2f",
        "problem_statement": "add(2, 2) returns 0 instead of 4",
    }
    record.update(changes)
    return record


def git(repo: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=repo, input=stdin, text=True,
                          capture_output=True, check=True)


def test_swe_smith_gold_patch_is_the_reversed_bug(tmp_path):
    (instance,) = load_instances(write_jsonl(tmp_path / "smith.jsonl", [smith_record()])).instances
    assert instance.source == "swe-smith"
    assert instance.patch == FIX
    assert instance.base_commit == instance.instance_id  # the SWE-smith task branch
    assert instance.image == "jyangballin/swesmith.x86_64.demo_1776_calc.5e1c3a2f"
    assert instance.meta()["bug_patch"] == BUG
    assert instance.meta()["upstream_commit"] == "5e1c3a2f"
    assert instance.test_patch == ""


def test_swe_smith_patches_apply_with_git(tmp_path):
    """Bug then fix, through real `git apply`, gives the clean file back."""
    (instance,) = load_instances(write_jsonl(tmp_path / "smith.jsonl", [smith_record()])).instances
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / "src" / "calc.py").write_text(CALC)
    git(repo, "init", "-q")
    git(repo, "apply", "-", stdin=instance.meta()["bug_patch"])
    assert "return a - b\n\n\ndef sub" in (repo / "src" / "calc.py").read_text()
    git(repo, "apply", "-", stdin=instance.patch)
    assert (repo / "src" / "calc.py").read_text() == CALC


def test_swe_smith_parquet_is_detected(tmp_path):
    result = load_instances(write_parquet(tmp_path / "smith.parquet", [smith_record()]))
    assert result.format == "swe-smith" and result.instances[0].patch == FIX
