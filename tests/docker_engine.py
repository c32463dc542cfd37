"""Fixtures for the docker-marked tests: a real engine, the base image, a tiny repo store.

A plain module (not a conftest) so only the docker tests import it; each test module pulls the
fixtures in with `from docker_engine import ...`. Without an engine or the base image every test
that uses `docker_client` skips, naming the reason and the script that fixes it.
"""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest

from swe_rlvr.config import SandboxConfig
from swe_rlvr.instances import Instance

BASE_IMAGE = "swe-rlvr/sandbox-base:bookworm"
FIX_HINT = "run infra/docker/engine.sh, then infra/docker/base-image.sh"

CALC_V1 = "def add(a, b):\n    return a - b\n"
CALC_FUTURE = "def add(a, b):\n    return a + b  # the fix, committed after the base\n"


def engine_problem() -> tuple[object, str]:
    """(client, "") when the engine answers and the base image exists, else (None, why not)."""
    try:
        import docker
    except ModuleNotFoundError:
        return None, "the docker SDK is not installed (pip install 'docker>=7.1')"
    try:
        client = docker.from_env(timeout=30)
        client.ping()
    except Exception as exc:  # any failure to reach the engine means: skip
        return None, f"no engine answers ({type(exc).__name__}: {str(exc)[:160]})"
    try:
        client.images.get(BASE_IMAGE)
    except docker.errors.ImageNotFound:
        return None, f"the base image {BASE_IMAGE} is missing"
    return client, ""


@pytest.fixture(scope="session")
def docker_client():
    client, problem = engine_problem()
    if problem:
        pytest.skip(f"Docker engine not available: {problem}; {FIX_HINT}")
    return client


def _git(repo: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@localhost", *args],
                          cwd=repo, check=True, capture_output=True, text=True)
    return proc.stdout.strip()


@pytest.fixture(scope="session")
def calc_store(tmp_path_factory) -> tuple[Path, str]:
    """A repo store with `acme/calc`: a base commit (the bug) and a later commit (the fix)."""
    store = tmp_path_factory.mktemp("repo-store")
    repo = store / "acme__calc"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "calc.py").write_text(CALC_V1)
    (repo / "README.md").write_text("calc\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "base")
    base = _git(repo, "rev-parse", "HEAD")
    (repo / "calc.py").write_text(CALC_FUTURE)
    _git(repo, "commit", "-qam", "future fix")
    return store, base


def calc_instance(base: str, tag: str = "") -> Instance:
    """An instance of `acme/calc` at `base`; `tag` makes its id (and container label) unique."""
    return Instance(instance_id=f"acme__calc-{tag or uuid.uuid4().hex[:8]}", repo="acme/calc",
                    base_commit=base, problem_statement="add() subtracts", patch="", test_patch="",
                    fail_to_pass=(), pass_to_pass=(), source="internal")


def docker_cfg(**overrides) -> SandboxConfig:
    """A docker-backend config on the base image with small limits (tests override some)."""
    values = dict(backend="docker", docker_image=BASE_IMAGE, memory_mb=512, max_procs=128,
                  output_limit_bytes=4096, command_timeout_s=30.0, docker_cpus=1.0)
    values.update(overrides)
    return SandboxConfig(**values)


def labelled(client, instance_id: str) -> list:
    """Containers (running or not) labelled as sandboxes of `instance_id`."""
    filters = {"label": ["swe-rlvr.sandbox=1", f"swe-rlvr.instance={instance_id}"]}
    return client.containers.list(all=True, sparse=True, filters=filters)
