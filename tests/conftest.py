"""Fixtures shared across test modules."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

import pytest

# Prefect's ephemeral API keeps its SQLite database under PREFECT_HOME. The tests get their own,
# set before any test module imports prefect, so they never read, lock or fill ~/.prefect (a
# second Prefect process on the same database makes the ephemeral server fail "database is locked").
_PREFECT_HOME = tempfile.mkdtemp(prefix="swe-rlvr-test-prefect-")
os.environ["PREFECT_HOME"] = _PREFECT_HOME
os.environ.pop("PREFECT_API_URL", None)
# Its start-up (migrations on a fresh database) can take over Prefect's 20 s default on 2 busy cores.
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
atexit.register(shutil.rmtree, _PREFECT_HOME, ignore_errors=True)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A tiny random Qwen2 model with an offline BPE tokenizer, built once per test session."""
    from agent.models import build_tiny
    return build_tiny(tmp_path_factory.mktemp("tiny-model"))
