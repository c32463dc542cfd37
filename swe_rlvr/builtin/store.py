"""Materialise a built-in project as a git repository holding every instance's base commit.

Layout: `main` holds one `upstream` commit with the clean project (fixed code and its existing
tests, none of the instances' new tests). Each instance adds one commit on top of it, on branch
`instance/<instance_id>`, that injects the bug by reverse-applying the gold patch; that commit is
the instance's `base_commit`. Commits are deterministic (see `repository`), so a rebuilt store is
checked against the recorded SHAs.

Simplification: the bug commit's parent is the fixed upstream, so `git diff HEAD~1` in the store
shows the fix. Workspaces given to an agent should be exported without history.
"""

from __future__ import annotations

import fcntl
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from swe_rlvr.builtin.repository import commit_all, copy_tree, git, has_commits, init
from swe_rlvr.instances import Instance

PROJECTS_DIR = Path(__file__).parent / "projects"


class MaterializeError(RuntimeError):
    """The store could not be built, or built commits differ from the recorded ones."""


def project_name(repo: str) -> str:
    """`swe-rlvr/<project>` -> `<project>`, refusing repos the suite does not ship."""
    owner, _, name = repo.partition("/")
    if owner != "swe-rlvr" or not (PROJECTS_DIR / name).is_dir():
        shipped = ", ".join(f"swe-rlvr/{p.name}" for p in sorted(PROJECTS_DIR.iterdir()))
        raise MaterializeError(f"{repo!r} is not a built-in project; choose one of: {shipped}.")
    return name


def build_upstream(project: str, path: Path) -> str:
    """Init `path` with the clean project as one commit on `main`; return its SHA."""
    init(path)
    copy_tree(PROJECTS_DIR / project, path)
    return commit_all(path, f"Import {project} upstream")


def commit_instance(path: Path, upstream: str, instance_id: str) -> None:
    """Start branch `instance/<id>` at upstream; the caller edits the tree, then commits."""
    git(path, "checkout", "-q", "-f", "-B", f"instance/{instance_id}", upstream)


def snapshot_message(instance_id: str) -> str:
    return f"Snapshot for {instance_id}"


def materialize(repo: str, repo_store: Path, instances: list[Instance]) -> Path:
    """Ensure `<repo_store>/<owner>__<name>` holds every base commit of `instances`."""
    project = project_name(repo)
    records = [i for i in instances if i.repo == repo]
    repo_store = Path(repo_store)
    repo_store.mkdir(parents=True, exist_ok=True)
    dest = repo_store / repo.replace("/", "__")
    with _locked(repo_store / f"{dest.name}.lock"):
        if not has_commits(dest, [i.base_commit for i in records]):
            _rebuild(project, records, dest)
    return dest


def _rebuild(project: str, records: list[Instance], dest: Path) -> None:
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        _build(project, records, tmp)
        if dest.exists():
            shutil.rmtree(dest)
        tmp.rename(dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _build(project: str, records: list[Instance], path: Path) -> None:
    upstream = build_upstream(project, path)
    for inst in records:
        commit_instance(path, upstream, inst.instance_id)
        git(path, "apply", "-R", "--whitespace=nowarn", "-", stdin=inst.patch)
        sha = commit_all(path, snapshot_message(inst.instance_id))
        if sha != inst.base_commit:
            raise MaterializeError(
                f"{inst.instance_id}: built base commit {sha} but the record says "
                f"{inst.base_commit}; the projects or specs changed since instances.jsonl was "
                f"generated. Regenerate it with `python -m swe_rlvr.builtin.build`.")
    git(path, "checkout", "-q", "-f", "main")


@contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    with open(lock_path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
