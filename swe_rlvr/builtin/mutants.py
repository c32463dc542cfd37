"""Turn the candidate mutations of `mutations.py` into instances: run the tests, keep, commit.

For each project: run the clean suite once (every test must pass), run it again on each
candidate's mutated tree (in a few scratch copies, in parallel threads), then per tier of the
project (`mutations.tiers_of`: easy, then generated) keep the mutants of the tier's operators that
the tests detect cleanly, that no earlier tier took and whose bug reports differ from each other
and from the earlier tiers', at most the tier's `max_per_function` per function; re-run the kept
ones under a second hash seed, then commit each as an instance's base commit exactly like the
hand-written instances (`store`): the upstream commit plus the bug, with the gold patch the diff
back to upstream.

Simplifications: a run that exceeds `RUN_TIMEOUT_S` (a mutant that loops) is simply not kept;
one pytest process per candidate, no test selection or coverage-guided pruning (the projects'
suites take well under a second).
"""

from __future__ import annotations

import json
import queue
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from swe_rlvr.builtin import ENV, store
from swe_rlvr.builtin.mutations import (
    EASY,
    GENERATED,
    MAX_FAILING,
    MIN_FAILING,
    Mutation,
    Tier,
    project_candidates,
    split_of,
    spread,
    tiers_of,
)
from swe_rlvr.builtin.operators import OPERATORS
from swe_rlvr.builtin.outcomes import parse_summary, pytest_log
from swe_rlvr.builtin.reports import statement
from swe_rlvr.builtin.repository import commit_all, copy_tree, git
from swe_rlvr.instances import Instance

CREATED_AT = "2024-06-01T00:00:00Z"
RUN_TIMEOUT_S = 10   # a clean suite takes well under a second; a mutant that loops is cut off
SEEDS = ("0", "1")   # PYTHONHASHSEED of the first run, and of the stability re-run


@dataclass(frozen=True)
class Mutant:
    """A kept mutation with the outcome of the suite on it."""

    mutation: Mutation
    statuses: dict
    log: str
    workdir: str

    @property
    def failing(self) -> list[str]:
        return sorted(t for t, s in self.statuses.items() if s == "FAILED")

    def pass_to_pass(self) -> list[str]:
        files = {t.split("::", 1)[0] for t in self.failing}
        return sorted(t for t in self.statuses
                      if t.split("::", 1)[0] in files and t not in self.failing)

    def statement(self) -> str:
        m = self.mutation
        return statement(m.qualname, m.file, self.failing, self.log, self.workdir)


def generate_instances(workers: int = 2) -> list[Instance]:
    """Every project's generated instances: the easy tier's first (projects in name order), then
    the generated tier's, so the easy records keep their place in `instances.jsonl`."""
    by_project = {project: project_instances(project, workers)
                  for project in sorted(p.name for p in store.PROJECTS_DIR.iterdir() if p.is_dir())}
    return [inst for tier in (EASY, GENERATED) for instances in by_project.values()
            for inst in instances if inst.difficulty == tier.name]


def project_instances(project: str, workers: int = 2) -> list[Instance]:
    with tempfile.TemporaryDirectory(prefix=f"swe-rlvr-mutants-{project}-") as tmp:
        tiers = kept_mutants(project, Path(tmp), workers)
        return commit_mutants(project, tiers, Path(tmp) / "repo")


def kept_mutants(project: str, tmp: Path, workers: int) -> list[tuple[Tier, list[Mutant]]]:
    """Per tier of `project` (`tiers_of`), its detected, spread and stable mutants by position.

    Every candidate runs once; each tier then takes from the detected mutants of its operators
    those that no earlier tier took and whose bug report no earlier tier's reads the same, and
    drops those whose report quotes the fix."""
    scratch = _scratch_copies(project, tmp, workers)
    baseline = parse_summary(pytest_log(tmp / "scratch0" / project, (), hash_seed=SEEDS[0]))
    if not baseline or set(baseline.values()) != {"PASSED"}:
        raise RuntimeError(f"the clean {project} suite must pass before mutating it: "
                           f"{sorted(t for t, s in baseline.items() if s != 'PASSED')}")
    tiers = tiers_of(project)
    operators = tuple(name for name in OPERATORS if any(name in t.operators for t in tiers))
    first = _run_all(project_candidates(store.PROJECTS_DIR / project, operators), scratch,
                     SEEDS[0], workers)
    detected = [m for m in first if detects(m.statuses, baseline)]
    taken: set[Mutation] = set()
    seen: set[str] = set()
    kept = []
    for tier in tiers:
        own = distinct([m for m in detected if m.mutation.operator in tier.operators
                        and m.mutation not in taken], seen)
        chosen = set(spread([m.mutation for m in own], tier.max_per_function,
                            tier.whole_when_fewer))
        chosen_mutants = [m for m in own if m.mutation in chosen and not quotes_fix(project, m)]
        taken |= chosen
        seen |= {m.statement() for m in chosen_mutants}
        again = _run_all([m.mutation for m in chosen_mutants], scratch, SEEDS[1], workers)
        kept.append((tier, [m for m, r in zip(chosen_mutants, again) if r.statuses == m.statuses]))
    return kept


def detects(statuses: dict[str, str], baseline: dict[str, str]) -> bool:
    """Same tests collected, none erroring, MIN..MAX failing and every other test passing."""
    failing = sum(s == "FAILED" for s in statuses.values())
    return (set(statuses) == set(baseline) and set(statuses.values()) <= {"PASSED", "FAILED"}
            and MIN_FAILING <= failing <= MAX_FAILING)


def quotes_fix(project: str, mutant: Mutant) -> bool:
    """Whether the bug report shows the fixed line (12 characters or more) verbatim, as when a
    failing assertion quotes the code under test: such a report gives the answer away."""
    m = mutant.mutation
    fixed = (store.PROJECTS_DIR / project / m.file).read_text().splitlines()[m.line - 1].strip()
    return len(fixed) >= 12 and fixed in mutant.statement()


def distinct(mutants: list[Mutant], seen: Iterable[str] = ()) -> list[Mutant]:
    """The first mutant of each bug report not in `seen`: two whose reports read the same (same
    function, same first failure) could not be told apart by an agent, nor by a scripted policy."""
    seen = set(seen)
    kept = []
    for mutant in mutants:
        if (text := mutant.statement()) not in seen:
            seen.add(text)
            kept.append(mutant)
    return kept


def _scratch_copies(project: str, tmp: Path, workers: int) -> queue.Queue[Path]:
    copies: queue.Queue[Path] = queue.Queue()
    for n in range(workers):
        path = tmp / f"scratch{n}" / project
        copy_tree(store.PROJECTS_DIR / project, path)
        copies.put(path)
    return copies


def _run_all(mutations: list[Mutation], scratch: queue.Queue[Path], seed: str,
             workers: int) -> list[Mutant]:
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda m: _run_one(m, scratch, seed), mutations))


def _run_one(mutation: Mutation, scratch: queue.Queue[Path], seed: str) -> Mutant:
    """The suite's outcome on the mutated tree of a borrowed scratch copy, restored after."""
    path = scratch.get()
    target = path / mutation.file
    clean = target.read_text()
    try:
        target.write_text(mutation.apply(clean))
        log = pytest_log(path, (), ("--tb=short",), timeout=RUN_TIMEOUT_S, hash_seed=seed)
    except subprocess.TimeoutExpired:
        log = ""
    finally:
        target.write_text(clean)
        scratch.put(path)
    return Mutant(mutation, parse_summary(log), log, str(path))


def commit_mutants(project: str, tiers: list[tuple[Tier, list[Mutant]]],
                   path: Path) -> list[Instance]:
    """Each mutant as a commit on upstream, numbered per tier (m001..., g001...) by position."""
    upstream = store.build_upstream(project, path)
    instances = [_commit(project, tier, n, m, path, upstream)
                 for tier, mutants in tiers for n, m in enumerate(mutants, start=1)]
    git(path, "checkout", "-q", "-f", "main")
    shutil.rmtree(path, ignore_errors=True)
    return instances


def _commit(project: str, tier: Tier, number: int, mutant: Mutant, path: Path,
            upstream: str) -> Instance:
    m = mutant.mutation
    instance_id = f"swe-rlvr__{project}-{tier.prefix}{number:03d}"
    store.commit_instance(path, upstream, instance_id)
    target = path / m.file
    target.write_text(m.apply(target.read_text()))
    base = commit_all(path, store.snapshot_message(instance_id))
    patch = git(path, "diff", "--no-color", "--no-ext-diff", base, upstream)
    meta = {"project": project, "kind": "mutation", "file": m.file, "function": m.function,
            "line": m.line, "operator": m.operator}
    return Instance(
        instance_id=instance_id, repo=f"swe-rlvr/{project}", base_commit=base,
        problem_statement=mutant.statement(),
        patch=patch, test_patch="", fail_to_pass=tuple(mutant.failing),
        pass_to_pass=tuple(mutant.pass_to_pass()), env=ENV, source="builtin",
        split=split_of(project, m.file, m.function), difficulty=tier.name, version="0.1",
        created_at=CREATED_AT, log_parser="pytest", meta_json=json.dumps(meta))
