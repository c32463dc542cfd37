"""The repository store: one git repository per `owner/name`, shared read-only by every sandbox.

Simplification: a missing repository is cloned from GitHub only when the caller allows it
(`SandboxConfig.clone_missing`); grading on an offline machine should find every repo in the store.
"""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from sandbox.base import SandboxError

if TYPE_CHECKING:
    from swe_rlvr.instances import Instance


def candidate_dirs(repo: str, repo_store: Path) -> list[Path]:
    """Where `owner/name` may live: `<store>/<owner>/<name>` or `<store>/<owner>__<name>`."""
    owner, _, name = repo.partition("/")
    return [repo_store / owner / name, repo_store / f"{owner}__{name}"]


def ensure_repo(instance: Instance, repo_store: str | Path, clone: bool = False) -> Path:
    """The git repository of `instance.repo` in the store, materialised or cloned if needed."""
    store = Path(repo_store)
    if instance.source == "builtin":
        try:
            return _materialized(instance.repo, store.resolve())
        except (RuntimeError, OSError) as exc:
            raise SandboxError(f"Building the built-in repository {instance.repo!r} in {store} "
                               f"failed: {exc}. Check that the repo store is writable.") from exc
    for path in candidate_dirs(instance.repo, store):
        if (path / ".git").exists() or (path / "HEAD").is_file():
            return path
    if clone:
        return clone_repo(instance.repo, store)
    names = " or ".join(str(p) for p in candidate_dirs(instance.repo, store))
    raise SandboxError(f"Repository {instance.repo!r} is not in the repo store {store}; expected "
                       f"a git clone at {names}. Clone it there, or set "
                       f"sandbox.clone_missing=true on a machine with network access.")


@functools.cache
def _materialized(repo: str, store: Path) -> Path:
    """Built-in repos are immutable once built: materialise each once per process."""
    from swe_rlvr.builtin import materialize
    return Path(materialize(repo, store))


def clone_repo(repo: str, store: Path) -> Path:
    """Clone `https://github.com/<repo>.git` into `<store>/<owner>__<name>`."""
    dest = candidate_dirs(repo, store)[1]
    tmp = dest.with_name(dest.name + ".cloning")
    subprocess.run(["rm", "-rf", str(tmp)], check=True)
    proc = subprocess.run(["git", "clone", "--quiet", f"https://github.com/{repo}.git", str(tmp)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SandboxError(f"Cloning {repo!r} into {store} failed: {proc.stderr.strip()[-300:]}. "
                           f"Check network access, or clone it there by hand.")
    tmp.rename(dest)
    return dest
