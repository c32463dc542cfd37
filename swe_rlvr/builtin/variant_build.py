"""Generate `variants.jsonl`: `python -m swe_rlvr.builtin.variant_build` (the method is
`swe_rlvr.builtin.variants`'s docstring). Per project: one harvest run of its suite and one
process for the fixed outcomes; per instance, one process for the buggy outcomes. The output is
deterministic: two builds write byte-identical files."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from swe_rlvr.builtin import load_builtin
from swe_rlvr.builtin.repository import copy_tree, git
from swe_rlvr.builtin.store import PROJECTS_DIR, project_name
from swe_rlvr.builtin.variants import VARIANTS_PATH, Call, candidates, patch_sha, select_cases
from swe_rlvr.instances import Instance
from swe_rlvr.patches import Hunk, parse_hunks

PROBE = "swe_rlvr.builtin.variant_probe"
MAX_CANDIDATES = 80
"""Perturbed calls tried per instance (in order): enough to find a telling case, and quick."""


def probe_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(PYTHONHASHSEED="0", PYTHONDONTWRITEBYTECODE="1", PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    return env


def harvest(tree: Path) -> list[Call]:
    """The literal-argument calls the project's own suite makes of its module-level functions."""
    with tempfile.TemporaryDirectory(prefix="swe-rlvr-harvest-") as tmp:
        out = Path(tmp) / "calls.json"
        subprocess.run([sys.executable, "-m", PROBE, "harvest", str(out), "tests"], cwd=tree,
                       env=probe_env(), capture_output=True, text=True, timeout=600, check=False)
        rows = json.loads(out.read_text()) if out.exists() else []
    return [Call(*row) for row in rows]


def outcomes(tree: Path, calls: list[Call]) -> list[tuple[str, ...] | None]:
    """Each call's outcome in `tree` (`variant_probe eval`); all None if the process fails."""
    if not calls:
        return []
    with tempfile.TemporaryDirectory(prefix="swe-rlvr-outcomes-") as tmp:
        jobs, out = Path(tmp) / "jobs.json", Path(tmp) / "out.json"
        jobs.write_text(json.dumps([list(c.key()) for c in calls]))
        subprocess.run([sys.executable, "-m", PROBE, "eval", str(jobs), str(out)], cwd=tree,
                       env=probe_env(), capture_output=True, text=True, timeout=60 + 5 * len(calls),
                       check=False)
        rows = json.loads(out.read_text()) if out.exists() else [None] * len(calls)
    return [tuple(r) if r is not None else None for r in rows]


def fixed_rows(hunk: Hunk) -> list[int]:
    """Lines of the fixed file that the gold hunk wrote (its start, for a pure deletion)."""
    rows, row = [], hunk.new_start
    for tag, _ in hunk.lines:
        if tag == "+":
            rows.append(row)
        row += tag != "-"
    return rows or [hunk.new_start]


def target_functions(instance: Instance, tree: Path) -> set[tuple[str, str]]:
    """(module, function) of each module-level function of the fixed tree that the gold patch
    changes, or that reads a module-level name whose assignment it changes."""
    wanted: dict[str, set[int]] = {}
    for hunk in parse_hunks(instance.patch):
        if hunk.path.endswith(".py"):
            wanted.setdefault(hunk.path, set()).update(fixed_rows(hunk))
    found = set()
    for path, rows in wanted.items():
        source = tree / path
        if not source.is_file():
            continue
        module = path[:-3].replace("/", ".").removesuffix(".__init__")
        body = ast.parse(source.read_text()).body
        functions = [n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        constants = {t.id for n in body if isinstance(n, (ast.Assign, ast.AnnAssign)) and _covers(n, rows)
                     for t in ast.walk(n) if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)}
        found |= {(module, f.name) for f in functions if _covers(f, rows) or any(
            isinstance(n, ast.Name) and n.id in constants for n in ast.walk(f))}
    return found


@contextmanager
def applied(tree: Path, patch: str, reverse: bool = False) -> Iterator[None]:
    """`patch` applied to the plain tree `tree` (reverse-applied with `reverse`) for the block."""
    apply = ("apply", "--unsafe-paths", f"--directory={tree}")
    git(tree, *apply, *(("-R",) if reverse else ()), "-", stdin=patch)
    try:
        yield
    finally:
        git(tree, *apply, *(() if reverse else ("-R",)), "-", stdin=patch)


def with_test_patch(instance: Instance, tree: Path) -> list[Call]:
    """The harvest with the instance's test patch applied (its new tests' inputs are visible too)."""
    with applied(tree, instance.test_patch):
        return harvest(tree)


def _covers(node: ast.stmt, rows: set[int]) -> bool:
    return any(node.lineno <= r <= (node.end_lineno or node.lineno) for r in rows)


def buggy_outcomes(instance: Instance, tree: Path, calls: list[Call]) -> list[tuple[str, ...] | None]:
    """The outcomes in `tree` with the gold patch reverse-applied (the instance's bug), restored after."""
    with applied(tree, instance.patch, reverse=True):
        return outcomes(tree, calls)


def project_rows(project: str, instances: list[Instance]) -> tuple[list[dict], Counter]:
    """The variants rows of one project's instances, and why each instance without variants has none."""
    why: Counter = Counter()
    rows = []
    with tempfile.TemporaryDirectory(prefix="swe-rlvr-variants-") as tmp:
        tree = Path(tmp) / project
        copy_tree(PROJECTS_DIR / project, tree)
        harvested = harvest(tree)
        plans = {}
        for inst in instances:
            targets = target_functions(inst, tree)
            seen = with_test_patch(inst, tree) if inst.test_patch.strip() else harvested
            calls = candidates([c for c in seen if (c.module, c.function) in targets])[:MAX_CANDIDATES]
            plans[inst.instance_id] = calls
            if not targets:
                why["the gold patch changes no module-level function"] += 1
            elif not calls:
                why["no test calls the changed function with literal arguments"] += 1
        everything = list(dict.fromkeys(c for calls in plans.values() for c in calls))
        fixed = dict(zip(everything, outcomes(tree, everything)))
        for inst in instances:
            calls = plans[inst.instance_id]
            if not calls:
                continue
            cases = select_cases(calls, [fixed[c] for c in calls], buggy_outcomes(inst, tree, calls))
            if not cases:
                why["no nearby input tells the bug apart"] += 1
                continue
            rows.append({"instance_id": inst.instance_id, "patch_sha": patch_sha(inst.patch),
                         "cases": [c.to_json() for c in cases]})
    return rows, why


def build(instances: list[Instance]) -> tuple[list[dict], Counter]:
    rows: list[dict] = []
    why: Counter = Counter()
    projects = sorted({project_name(i.repo) for i in instances})
    for n, project in enumerate(projects, 1):
        start = time.perf_counter()
        some, reasons = project_rows(project, [i for i in instances if project_name(i.repo) == project])
        rows += some
        why += reasons
        print(f"[{n}/{len(projects)}] {project}: {len(some)} of "
              f"{sum(project_name(i.repo) == project for i in instances)} instances have variants "
              f"({time.perf_counter() - start:.0f} s)", flush=True)
    order = {i.instance_id: n for n, i in enumerate(instances)}
    return sorted(rows, key=lambda r: order[r["instance_id"]]), why


def main() -> None:
    instances = load_builtin()
    rows, why = build(instances)
    VARIANTS_PATH.write_text("".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows))
    print(f"wrote variants of {len(rows)} of {len(instances)} instances to {VARIANTS_PATH}")
    for reason, count in why.most_common():
        print(f"  {count:4d} without: {reason}")


if __name__ == "__main__":
    main()
