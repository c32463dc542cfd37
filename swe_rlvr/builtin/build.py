"""Generate `instances.jsonl`: `python -m swe_rlvr.builtin.build` (`--carve-dev`: only re-carve the
dev split of the shipped file, `splits.carve_dev`).

The hand-written instances come first, from the specs. For each project it builds the upstream
commit, then for each spec injects the bug as a commit (its SHA is `base_commit`), diffs it
against upstream for the gold `patch`, adds the spec's tests for the `test_patch`, and runs pytest
on the touched test files before and after the gold patch to derive FAIL_TO_PASS and PASS_TO_PASS
(SWE-bench semantics). The generated instances follow (`mutants.py`: single-token bugs the
projects' own tests detect; the easy tier's, then the generated tier's: about 2,200 candidate
runs, 37 minutes on two cores that another run shared). Finally it re-materialises every project
from all the new records to prove the reverse-applied patches reproduce the base commits. The
dev split is carved out of the generated tier's train functions last (`splits.carve_dev`), and
the hidden variant tests are made from the new records (`variant_build`, about 3 minutes). The
output is deterministic: two builds write byte-identical files.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections import Counter
from itertools import groupby
from pathlib import Path

from swe_rlvr.builtin import ENV, INSTANCES_PATH, store, variant_build
from swe_rlvr.builtin.mutants import generate_instances
from swe_rlvr.builtin.outcomes import passed, run_pytest
from swe_rlvr.builtin.repository import commit_all, git
from swe_rlvr.builtin.spec import InstanceSpec, SpecError, load_specs
from swe_rlvr.builtin.splits import carve_dev
from swe_rlvr.instances import Instance
from swe_rlvr.patches import patch_files


def build_instances(run_tests: bool = True) -> list[Instance]:
    """Every spec as an Instance; without `run_tests` the test lists are left empty."""
    instances: list[Instance] = []
    for project, specs in groupby(load_specs(), key=lambda s: s.project):
        with tempfile.TemporaryDirectory(prefix="swe-rlvr-build-") as tmp:
            path = Path(tmp) / project
            upstream = store.build_upstream(project, path)
            instances += [_instance(spec, path, upstream, run_tests) for spec in specs]
    return instances


def _instance(spec: InstanceSpec, path: Path, upstream: str, run_tests: bool) -> Instance:
    store.commit_instance(path, upstream, spec.instance_id)
    _apply(spec, spec.bug, path)
    base = commit_all(path, store.snapshot_message(spec.instance_id))
    patch = git(path, "diff", "--no-color", "--no-ext-diff", base, upstream)
    _apply(spec, spec.tests, path)
    git(path, "add", "-A")
    test_patch = git(path, "diff", "--no-color", "--no-ext-diff", "--cached", base)
    check_tier(spec, patch)
    f2p, p2p = derive_tests(spec, path, patch, test_patch) if run_tests else ((), ())
    git(path, "reset", "-q", "--hard", base)
    git(path, "clean", "-q", "-f", "-d", "-x")
    return Instance(
        instance_id=spec.instance_id, repo=spec.repo, base_commit=base,
        problem_statement=spec.issue, patch=patch, test_patch=test_patch,
        fail_to_pass=f2p, pass_to_pass=p2p, env=ENV, source="builtin", split=spec.split,
        difficulty=spec.tier, version="0.1", created_at=spec.created_at, log_parser="pytest",
        meta_json=json.dumps({"project": spec.project, "kind": "handwritten"}))


def _apply(spec: InstanceSpec, edits: tuple, path: Path) -> None:
    try:
        for edit in edits:
            edit.apply(path)
    except SpecError as exc:
        raise SpecError(f"{spec.instance_id}: {exc}") from exc


def derive_tests(spec: InstanceSpec, path: Path, patch: str,
                 test_patch: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Run the touched test files before and after the gold patch -> (F2P, P2P)."""
    files = patch_files(test_patch)
    before = passed(run_pytest(path, files))
    git(path, "apply", "-", stdin=patch)
    after_all = run_pytest(path, files)
    after = passed(after_all)
    if broken := sorted(set(after_all) - after):
        raise SpecError(f"{spec.instance_id}: {broken} fail even with the gold patch; "
                        f"fix the spec's tests or the upstream project.")
    f2p = tuple(sorted(after - before))
    if not f2p:
        raise SpecError(f"{spec.instance_id}: no test fails before the gold patch; the new "
                        f"tests must reproduce the issue.")
    return f2p, tuple(sorted(after & before))


def check_tier(spec: InstanceSpec, patch: str) -> None:
    """easy: one changed line; medium: several lines in one file; hard: several files."""
    actual = tier_of(patch)
    if actual != spec.tier:
        raise SpecError(f"{spec.instance_id} is tagged {spec.tier!r} but its gold patch looks "
                        f"{actual!r} (easy: one line, medium: one file, hard: several files).")


def tier_of(patch: str) -> str:
    """The tier a gold patch's shape implies."""
    if len(patch_files(patch)) > 1:
        return "hard"
    lines = [ln for ln in patch.splitlines() if ln[:1] in "+-" and ln[:3] not in ("+++", "---")]
    removed = sum(ln.startswith("-") for ln in lines)
    added = len(lines) - removed
    return "easy" if max(removed, added) <= 1 else "medium"


def write_jsonl(instances: list[Instance], path: Path = INSTANCES_PATH) -> None:
    lines = [json.dumps(inst.to_row(), ensure_ascii=False) for inst in instances]
    path.write_text("\n".join(lines) + "\n")


def main(workers: int = 2) -> None:
    start = time.perf_counter()
    instances = carve_dev(build_instances() + generate_instances(workers))
    write_jsonl(instances)
    with tempfile.TemporaryDirectory(prefix="swe-rlvr-store-") as tmp:
        for repo in sorted({i.repo for i in instances}):
            store.materialize(repo, Path(tmp), instances)
    print_counts(instances)
    print(f"wrote {len(instances)} instances to {INSTANCES_PATH} "
          f"in {time.perf_counter() - start:.0f} s")
    variant_build.main()


def print_counts(instances: list[Instance]) -> None:
    """Per kind and tier, train/dev/test counts; for the generated ones per project and operator."""
    for kind in ("handwritten", "mutation"):
        some = [i for i in instances if i.meta().get("kind") == kind]
        for tier in ("easy", "medium", "hard", "generated"):
            counts = Counter(i.split for i in some if i.difficulty == tier)
            if counts:
                print(f"{kind:11s} {tier:9s} train={counts['train']:3d} dev={counts['dev']:3d} "
                      f"test={counts['test']:3d}")
        for key in ("project", "operator") if kind == "mutation" else ():
            pairs = Counter((f"{i.meta()[key]}/{i.difficulty}", i.split) for i in some)
            print(f"{kind:11s} by {key}/tier: " + ", ".join(
                f"{name} {pairs[name, 'train']}/{pairs[name, 'dev']}/{pairs[name, 'test']}"
                for name in sorted({k for k, _ in pairs})) + " (train/dev/test)")


def carve_shipped() -> None:
    """Apply `carve_dev` to the shipped file in place (idempotent; no test is run)."""
    from swe_rlvr.builtin import load_builtin
    instances = carve_dev(load_builtin())
    write_jsonl(instances)
    print_counts(instances)
    print(f"wrote {len(instances)} instances to {INSTANCES_PATH}")


if __name__ == "__main__":
    import sys
    carve_shipped() if sys.argv[1:] == ["--carve-dev"] else main()
