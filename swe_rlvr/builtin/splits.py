"""The built-in suite's dev split: whole train functions held out for tuning recipes.

Recipes (tiers, warm-up size, LR, G, iterations, ...) are chosen on scores that never touch the
test split. The dev split is carved out of the train functions the way the train/test split is
(`mutations.split_of`): by function, never by instance, so a dev instance's function is touched by
no train instance and training on `train` never sees the fix of a dev function.

- Only the `generated` tier gives up functions: every record of the other tiers is pinned (the
  quickstart's [easy] selection and figures depend on it, `tests/test_builtin_splits.py`).
- A function goes to `dev` when a salted sha256 of `project/file/function` falls in one bucket of
  `DEV_SHARE_BUCKETS`, its generated instances are `train`, and no pinned instance of either
  split (an easy mutant in it, or a hand-written gold patch changing one of its lines) touches it,
  so dev shares no function with train or test.
- `carve_dev` is idempotent; `python -m swe_rlvr.builtin.build` applies it to what it generates,
  and `python -m swe_rlvr.builtin.build --carve-dev` applies it to the shipped `instances.jsonl`
  in place (no mutant is re-run, so it takes a second rather than the build's half hour).
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
from collections.abc import Iterable

from unidiff import PatchSet

from swe_rlvr.builtin import store
from swe_rlvr.instances import Instance

DEV_SHARE_BUCKETS = 5
"""1 bucket of 5: about a fifth of the generated tier's train functions become `dev`."""
DEV_SALT = "dev"
"""Salts the dev hash so that it is independent of the train/test hash of `split_of`."""
DEV_TIER = "generated"


def dev_bucket(project: str, file: str, function: str) -> bool:
    """True when the function's salted hash falls in the dev bucket."""
    digest = hashlib.sha256(f"{DEV_SALT}/{project}/{file}/{function}".encode()).hexdigest()
    return int(digest, 16) % DEV_SHARE_BUCKETS == 0


def function_key(inst: Instance) -> tuple[str, str, str]:
    """(project, file, function) of a generated instance."""
    meta = inst.meta()
    return meta["project"], meta["file"], meta["function"]


def touched_functions(inst: Instance) -> set[tuple[str, str, str]]:
    """(project, file, function) of each function an instance's gold patch changes: from the
    record for a generated instance, from the patch for a hand-written one."""
    meta = inst.meta()
    if meta.get("kind") == "mutation":
        return {function_key(inst)}
    project = meta["project"]
    return {(project, file, function) for file, function in touched(project, inst.patch)}


def touched(project: str, patch: str) -> set[tuple[str, str]]:
    """(file, innermost function name) of each line a gold patch changes, on the upstream side
    (a removed line counts at the upstream line it sat before)."""
    found = set()
    for patched in PatchSet(patch):
        source = (store.PROJECTS_DIR / project / patched.path).read_text()
        owner = function_lines(source)
        for hunk in patched:
            position = hunk.target_start
            for line in hunk:
                if line.is_added or line.is_removed:
                    found.add((patched.path, owner.get(position, "")))
                if not line.is_removed:
                    position += 1
    return {(file, function) for file, function in found if function}


def function_lines(source: str) -> dict[int, str]:
    """Line number -> the name of the innermost function around it."""
    owner: dict[int, tuple[int, str]] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for line in range(node.lineno, (node.end_lineno or node.lineno) + 1):
                if line not in owner or owner[line][0] < node.lineno:
                    owner[line] = (node.lineno, node.name)
    return {line: name for line, (_, name) in owner.items()}


def dev_functions(instances: Iterable[Instance]) -> set[tuple[str, str, str]]:
    """The functions `carve_dev` sends to dev: in the dev bucket, with train (or already dev)
    generated instances, touched by no pinned instance of either split."""
    instances = list(instances)
    pinned = set().union(*(touched_functions(i) for i in instances if i.difficulty != DEV_TIER))
    return {function_key(i) for i in instances
            if i.difficulty == DEV_TIER and i.split in ("train", "dev")
            and dev_bucket(*function_key(i)) and function_key(i) not in pinned}


def carve_dev(instances: list[Instance]) -> list[Instance]:
    """`instances` with the generated train instances of every dev function marked `dev`, in the
    same order; everything else unchanged."""
    chosen = dev_functions(instances)
    return [dataclasses.replace(i, split="dev")
            if i.difficulty == DEV_TIER and i.split == "train" and function_key(i) in chosen else i
            for i in instances]
