"""Shared helpers of the agent tests: a tiny tokenizer, a toy git repository, instance and sandbox.

The toy sandbox is the real local backend at the default isolation (`auto`: bubblewrap where it is
installed; `pgroup` is refused as root, where its commands would run as host root).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sandbox import open_sandbox
from swe_rlvr.config import SandboxConfig
from swe_rlvr.instances import Instance

BUGGY = '''"""Tiny arithmetic helpers."""


def add(a, b):
    """Return a + b."""
    return a - b


def mul(a, b):
    return a * b
'''
TEST = '''from calc.ops import add, mul


def test_add():
    assert add(2, 3) == 5


def test_mul():
    assert mul(2, 3) == 6
'''


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=root,
                          check=True, capture_output=True, text=True).stdout


def make_repo(root: Path) -> Path:
    """A committed toy project with a bug in `calc/ops.py:add`."""
    (root / "calc").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "calc" / "__init__.py").write_text("")
    (root / "calc" / "ops.py").write_text(BUGGY)
    (root / "tests" / "test_ops.py").write_text(TEST)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "base")
    return root


def toy_instance(root: Path) -> Instance:
    """The toy bug as an Instance; its gold patch fixes `add` and adds a NEWS file."""
    (root / "calc" / "ops.py").write_text(BUGGY.replace("return a - b", "return a + b"))
    (root / "NEWS.md").write_text("Fixed add.\n")
    git(root, "add", "-A")
    patch = git(root, "diff", "--cached", "--no-color")
    git(root, "reset", "-q", "--hard")
    return Instance(instance_id="toy__calc-1", repo="toy/calc", base_commit=git(root, "rev-parse", "HEAD").strip(),
                    problem_statement="`add(2, 3)` returns -1 instead of 5.", patch=patch, test_patch="",
                    fail_to_pass=("tests/test_ops.py::test_add",), pass_to_pass=("tests/test_ops.py::test_mul",))


@pytest.fixture(scope="session")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(tiny_model_dir)


def toy_sandbox_cfg(tmp_path: Path) -> SandboxConfig:
    return SandboxConfig(isolation="auto", workdir=str(tmp_path / "work"),
                         env_cache=str(tmp_path / "envs"), command_timeout_s=20)


@pytest.fixture
def toy(tmp_path):
    """(instance, sandbox): the local backend on a fresh copy of the toy repository."""
    instance = toy_instance(make_repo(tmp_path / "store" / "toy__calc"))
    with open_sandbox(instance, toy_sandbox_cfg(tmp_path), tmp_path / "store") as box:
        yield instance, box
