"""Deterministic git plumbing for the built-in projects.

Every commit the suite creates must have the same SHA on every machine, because instances record
their `base_commit`. So git runs with no system or global config, no hooks, no templates, a fixed
identity and fixed dates, `core.autocrlf=false` and no signing. Variables such as `GIT_DIR` that a
caller may have exported are dropped.

Simplification: every commit carries the same timestamp (the suite's epoch); the history is two
levels deep (upstream, then one commit per instance), so dates carry no information anyway.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

EPOCH = "@1704067200 +0000"  # 2024-01-01T00:00:00Z
IDENTITY = {"name": "swe-rlvr builtin", "email": "builtin@swe-rlvr.invalid"}
_OPTIONS = ("-c", "core.autocrlf=false", "-c", "core.hooksPath=/dev/null",
            "-c", "commit.gpgsign=false", "-c", "init.defaultBranch=main",
            "-c", "core.fileMode=true", "-c", "diff.noprefix=false")
_SKIPPED = {"__pycache__", ".pytest_cache", ".git"}


class GitError(RuntimeError):
    """A git command failed; the message carries its stderr."""


def git_env() -> dict[str, str]:
    """The caller's environment without GIT_* variables, plus a fixed identity and date."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, GIT_TERMINAL_PROMPT="0",
               GIT_AUTHOR_NAME=IDENTITY["name"], GIT_AUTHOR_EMAIL=IDENTITY["email"],
               GIT_COMMITTER_NAME=IDENTITY["name"], GIT_COMMITTER_EMAIL=IDENTITY["email"],
               GIT_AUTHOR_DATE=EPOCH, GIT_COMMITTER_DATE=EPOCH, LC_ALL="C")
    return env


def git(cwd: Path, *args: str, stdin: str | None = None) -> str:
    """Run `git <args>` in `cwd` with the deterministic settings; return stdout."""
    proc = subprocess.run(["git", *_OPTIONS, *args], cwd=cwd, env=git_env(), input=stdin,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise GitError(f"git {' '.join(args)} failed in {cwd}: {proc.stderr.strip()}")
    return proc.stdout


def init(path: Path) -> None:
    """An empty repository with no template (so no sample hooks) and a local ignore list."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "--template=", ".")
    (path / ".git" / "info").mkdir(exist_ok=True)
    (path / ".git" / "info" / "exclude").write_text("__pycache__/\n*.pyc\n.pytest_cache/\n")


def copy_tree(src: Path, dest: Path) -> None:
    """Copy a project's plain files (no caches, no nested .git) byte for byte."""
    for path in sorted(src.rglob("*")):
        rel = path.relative_to(src)
        if path.is_dir() or _SKIPPED.intersection(rel.parts) or path.suffix == ".pyc":
            continue
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
        target.chmod(0o644)


def commit_all(path: Path, message: str) -> str:
    """Stage everything and commit; return the new commit's SHA."""
    git(path, "add", "-A")
    git(path, "commit", "-q", "--no-verify", "--allow-empty", "-m", message)
    return git(path, "rev-parse", "HEAD").strip()


def has_commits(path: Path, shas: list[str]) -> bool:
    """Whether `path` is a git repository holding every one of `shas`."""
    if not (path / ".git").is_dir():
        return False
    stdin = "".join(f"{sha}^{{commit}}\n" for sha in shas)
    try:
        out = git(path, "cat-file", "--batch-check", stdin=stdin)
    except GitError:  # a damaged store is rebuilt, not trusted
        return False
    return "missing" not in out
