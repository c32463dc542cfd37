"""Shared helpers for the sandbox and grading tests: a tiny real git repository as an instance.

`make_instance` builds `<store>/acme__calc`, a two-module package with a bug (`add` subtracts), and
derives the gold patch and the test patch with real `git diff`, SWE-bench style: the test patch
adds a FAIL_TO_PASS test, and the existing test file holds the PASS_TO_PASS tests.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from swe_rlvr.config import SandboxConfig
from swe_rlvr.instances import EnvSpec, Instance

BUGGY = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"
FIXED = BUGGY.replace("a - b", "a + b")
OLD_TESTS = ("from calc.core import add, mul\n\n\ndef test_mul():\n    assert mul(2, 3) == 6\n\n\n"
             "def test_add_zero():\n    assert add(0, 0) == 0\n")
NEW_TESTS = OLD_TESTS + "\n\ndef test_add():\n    assert add(2, 3) == 5\n"
ENV = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
       "GIT_COMMITTER_EMAIL": "t@t", "GIT_CONFIG_NOSYSTEM": "1"}


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env=ENV, check=True, capture_output=True,
                          text=True).stdout


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def diff_of(repo: Path, files: dict[str, str]) -> str:
    """The patch that turns the checked-out tree into one with `files` written (then reverted)."""
    write(repo, files)
    git(repo, "add", "-A")
    patch = git(repo, "diff", "--cached")
    git(repo, "reset", "-q", "--hard")
    return patch


def make_instance(store: Path, repo: str = "acme/calc", **changes) -> Instance:
    """A real repository in `store` and an Instance graded against it."""
    path = store / repo.replace("/", "__")
    if not (path / ".git").exists():
        path.mkdir(parents=True)
        git(path, "init", "-q")
        write(path, {"calc/__init__.py": "", "calc/core.py": BUGGY, "tests/test_core.py": OLD_TESTS,
                     "README.md": "calc\n"})
        git(path, "add", "-A")
        git(path, "commit", "-qm", "base")
        git(path, "commit", "-q", "--allow-empty", "-m", "the future: fixed upstream")
        git(path, "checkout", "-q", "HEAD~1")
    sha = git(path, "rev-parse", "HEAD").strip()
    fields = dict(
        instance_id=f"{repo.replace('/', '__')}-1", repo=repo, base_commit=sha,
        problem_statement="add() subtracts instead of adding.",
        patch=diff_of(path, {"calc/core.py": FIXED}),
        test_patch=diff_of(path, {"tests/test_core.py": NEW_TESTS}),
        fail_to_pass=("tests/test_core.py::test_add",),
        pass_to_pass=("tests/test_core.py::test_mul", "tests/test_core.py::test_add_zero"),
        env=EnvSpec(pip_packages=("pytest",)))
    fields.update(changes)
    return Instance(**fields)


def sandbox_config(tmp_path: Path, **changes) -> SandboxConfig:
    fields = dict(workdir=str(tmp_path / "sandboxes"), command_timeout_s=30, test_timeout_s=120,
                  memory_mb=2048, max_procs=64)
    return SandboxConfig(**{**fields, **changes})


def live_copies(cfg: SandboxConfig) -> list[str]:
    root = Path(cfg.workdir) / "copies"
    return sorted(p.name for p in root.glob("wc-*")) if root.exists() else []


def overlay_mounts(cfg: SandboxConfig) -> list[str]:
    root = str(Path(cfg.workdir).resolve() / "copies")
    return [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()
            if line.split()[1].startswith(root)]


@pytest.fixture
def store(tmp_path):
    path = tmp_path / "store"
    path.mkdir()
    return path


def test_fixture_repo_has_base_and_future(store):
    """The fixture itself: base commit checked out, a later commit exists in the store."""
    inst = make_instance(store)
    assert inst.test_files() == ("tests/test_core.py",)
    assert inst.fix_files() == ("calc/core.py",)
    log = git(store / "acme__calc", "log", "--all", "--oneline")
    assert "the future" in log
